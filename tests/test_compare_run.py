"""``islands compare``: a prediction beside a run made anywhere, checked on runs whose numbers are
known by hand (a "run" here is what ``islands train`` writes, made from a simulation of other links)."""

from __future__ import annotations

import json

import pytest
from helpers.scenarios import SCENARIO, make_scenario

from islands.cli import main
from islands.io import json_text, write_table
from islands.simulator import simulate

S = 2e9  # 1e9 parameters in bf16
SYNC_S = 1.5 * S / 1.25e8  # ring all-reduce over four 1 Gbit/s workers: 24 s
STEPS = 100  # inner steps per outer step, 1 s each
OUTER = 3


def write_run(folder, overrides: list[str], **facts) -> dict:
    """What `islands train --out folder` writes, for a run that behaved as the base scenario with
    ``overrides`` (the simulator's summary keys are the trainer's)."""
    result = simulate(make_scenario(overrides))
    folder.mkdir()
    summary = {**result.summary, **facts.pop("summary", {})}
    (folder / "summary.json").write_text(json_text(summary))
    (folder / "run.json").write_text(
        json.dumps(
            {
                "scenario": "test",
                "algorithm": summary["algorithm"],
                "bits": 16,
                "device": "cuda",
                **facts,
            }
        )
    )
    write_table(result.trace, folder / "trace.csv")
    return summary


@pytest.fixture
def scenario_path(scenario_file):
    return scenario_file(SCENARIO)


def test_a_run_over_slower_links_is_short_by_their_ratio_in_every_sync(
    tmp_path, scenario_path, capsys
):
    write_run(tmp_path / "run", ["island.0.bandwidth_gbps=0.8"])  # the real links moved 80%
    assert main(["compare", str(scenario_path), str(tmp_path / "run"), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert [s["error"] for s in document["syncs"]] == pytest.approx([0.8 - 1] * OUTER)
    [wall] = [f for f in document["figures"] if f["name"] == "wall time"]
    predicted_s, measured_s = OUTER * (STEPS + SYNC_S), OUTER * (STEPS + SYNC_S / 0.8)
    assert (wall["predicted"], wall["measured"]) == pytest.approx((predicted_s, measured_s))
    assert wall["error"] == pytest.approx(predicted_s / measured_s - 1)


def test_measured_steps_take_the_run_s_compute_so_that_only_the_network_is_compared(
    tmp_path, scenario_path, capsys
):
    write_run(
        tmp_path / "run", ["island.0.step_time_s=1.25"]
    )  # the accelerators were slower than planned
    assert main(["compare", str(scenario_path), str(tmp_path / "run"), "--json"]) == 0
    guessed = json.loads(capsys.readouterr().out)
    assert guessed["figures"][0]["error"] == pytest.approx(
        (STEPS + SYNC_S) / (1.25 * STEPS + SYNC_S) - 1
    )
    out = tmp_path / "compared"
    assert (
        main(
            [
                "compare",
                str(scenario_path),
                str(tmp_path / "run"),
                "--measured-steps",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert (
        "wall time" in printed and "compute: the run's measured seconds per inner step" in printed
    )
    document = json.loads((out / "comparison.json").read_text())
    assert document["overrides"] == ["island.0.step_time_s=1.25"]
    assert all(f["error"] in (None, pytest.approx(0.0)) for f in document["figures"])
    assert (out / "overlay.png").stat().st_size > 10_000 and (out / "predicted_trace.csv").exists()


@pytest.mark.parametrize(
    "overrides, facts, message",
    [
        (
            ["schedule.algorithm=ddp", "schedule.inner_steps=1"],
            {},
            "algorithm is 'ddp', the scenario's schedule.algorithm",
        ),
        (["island.0.replicas=3"], {}, "workers is 3, the scenario's workers gives 4"),
        (
            ["schedule.outer_steps=2"],
            {},
            "outer_steps is 2, the scenario's schedule.outer_steps gives 3",
        ),
        ([], {"bits": 8}, "bits is 8, the scenario's schedule.bits is 16: --set schedule.bits=8"),
        (
            [],
            {"summary": {"complete": False, "incomplete_reason": "stopped at outer step 2"}},
            "the run stopped short (stopped at outer step 2): compare a finished run",
        ),
    ],
)
def test_a_run_of_other_work_is_refused_in_one_line(
    tmp_path, scenario_path, capsys, overrides, facts, message
):
    write_run(tmp_path / "run", overrides, **facts)
    assert main(["compare", str(scenario_path), str(tmp_path / "run")]) == 2
    error = capsys.readouterr().err
    assert message in error and len(error.strip().splitlines()) == 1


def test_a_folder_that_is_not_a_run_is_refused_in_one_line(tmp_path, scenario_path, capsys):
    assert main(["compare", str(scenario_path), str(tmp_path / "nowhere")]) == 2
    assert "no such run folder" in capsys.readouterr().err
    write_run(tmp_path / "run", [])
    (tmp_path / "run" / "run.json").unlink()
    assert main(["compare", str(scenario_path), str(tmp_path / "run")]) == 2
    assert "no run.json: not a folder `islands train --out` wrote" in capsys.readouterr().err
    (tmp_path / "run" / "run.json").write_text("{not json")
    assert main(["compare", str(scenario_path), str(tmp_path / "run")]) == 2
    assert "run.json: not valid JSON" in capsys.readouterr().err
    (tmp_path / "run" / "run.json").write_text("{}")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    (tmp_path / "run" / "summary.json").write_text(json.dumps({**summary, "mean_sync_s": "slow"}))
    assert main(["compare", str(scenario_path), str(tmp_path / "run")]) == 2
    assert (
        "summary.json: 'mean_sync_s' must be a finite number (got 'slow')"
        in capsys.readouterr().err
    )
    (tmp_path / "run" / "summary.json").write_text(
        json.dumps({**summary, "islands": [{"name": "a"}]})
    )
    assert main(["compare", str(scenario_path), str(tmp_path / "run"), "--measured-steps"]) == 2
    assert (
        "'islands' must list each island's name, compute_s and inner_steps"
        in capsys.readouterr().err
    )
    (tmp_path / "run" / "trace.csv").write_text("time_start_s,worker\n0.0,0\n")
    assert main(["compare", str(scenario_path), str(tmp_path / "run")]) == 2
    assert (
        "trace.csv: no column time_end_s, island, kind, bytes, fragment, outer_step"
        in capsys.readouterr().err
    )
