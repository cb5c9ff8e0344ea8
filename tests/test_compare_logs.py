"""``islands compare SCENARIO LOG``: a run of any stack, from its per-step log, a PyTorch profiler
trace or a torchtitan log (the samples in tests/data/), beside the prediction over the same steps.

The scenario: one island of 2 workers, 1 s per step, H = 4, 3 outer steps, a 1e9-parameter bf16
model over 1 Gbit/s: each sync is a ring all-reduce of 2e9 bytes, 2 * (1/2) * 2e9 = 2e9 bytes sent
per worker, 16 s. So the prediction over any window is: 1 s of compute on each step, 16 s blocked
and 2e9 bytes on each of steps 4, 8 and 12."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from helpers.step_logs import DATA, SCENARIO

from islands.cli import main

SYNC_S = 16.0


@pytest.fixture
def scenario_path(scenario_file):
    return scenario_file(SCENARIO)


def compared(capsys, *argv) -> dict:
    assert main(["compare", *map(str, argv), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def figure(document: dict, name: str) -> tuple[float | None, float | None]:
    [row] = [f for f in document["figures"] if f["name"] == name]
    return row["predicted"], row["measured"]


def refused(capsys, *argv) -> str:
    assert main(["compare", *map(str, argv)]) == 2
    error = capsys.readouterr().err
    assert len(error.strip().splitlines()) == 1 and "Traceback" not in error
    return error


def test_a_per_step_log_of_two_ranks_over_the_whole_run(scenario_path, capsys):
    document = compared(capsys, scenario_path, DATA / "steps-two-ranks.csv")
    assert document["format"] == "steps" and document["assumptions"] == []
    assert document["window"] == {
        "first_step": 1,
        "last_step": 12,
        "steps": 12,
        "sync_steps": [4, 8, 12],
        "ranks": [0, 1],
    }
    measured_wall_s = 12 * 1.0 + 16.6 + 16.0 + 16.2  # each rank
    assert figure(document, "mean step time") == pytest.approx(
        ((12 + 3 * SYNC_S) / 12, measured_wall_s / 12)
    )
    assert figure(document, "compute utilisation") == pytest.approx((12 / 60, 12 / measured_wall_s))
    assert figure(document, "blocked per step") == pytest.approx(
        (3 * SYNC_S / 12, (16.6 + 16.0 + 16.2) / 12)
    )
    # the first sync, 16.6 s, is 0.5 s over the median of the later two (16.0, 16.2): its set-up
    assert figure(document, "first sync set-up") == pytest.approx((0.0, 0.5))
    assert figure(document, "mean sync (steady)") == pytest.approx((SYNC_S, 16.1))
    assert figure(document, "bytes per step") == pytest.approx((3 * 2e9 / 12, 3 * 2e9 / 12))
    assert [s["step"] for s in document["syncs"]] == [4, 8, 12]
    assert [s["measured_s"] for s in document["syncs"]] == pytest.approx([16.6, 16.0, 16.2])


def test_rank_0_alone_over_a_window_of_part_rounds_states_its_assumption(scenario_path, capsys):
    document = compared(capsys, scenario_path, DATA / "steps-rank0-window.jsonl")
    assumption = "only rank 0 logged: its times stand for every worker"
    assert document["assumptions"][0].startswith(assumption) and assumption in document["notes"][0]
    assert document["window"]["first_step"] == 3 and document["window"]["sync_steps"] == [4, 8]
    # steps 3-9: 7 steps of 1 s, two syncs in them
    assert figure(document, "mean step time") == pytest.approx(
        ((7 + 2 * SYNC_S) / 7, (7 + 16.8 + 16.2) / 7)
    )
    assert figure(document, "compute utilisation") == pytest.approx((7 / 39, 7 / 40))
    assert figure(document, "first sync set-up") == pytest.approx((0.0, 16.8 - 16.2))
    assert figure(document, "mean sync (steady)") == pytest.approx((SYNC_S, 16.2))
    assert figure(document, "bytes per step") == (
        pytest.approx(2 * 2e9 / 7),
        None,
    )  # the log has no bytes
    assert main(["compare", str(scenario_path), str(DATA / "steps-rank0-window.jsonl")]) == 0
    printed = capsys.readouterr().out
    assert (
        "window: steps 3-9 of the run (7 steps; 2 syncs, after step 4, 8)" in printed
        and assumption in printed
    )


def test_clock_readings_give_step_times_and_a_window_after_the_first_sync_has_no_set_up(
    scenario_path, capsys
):
    document = compared(capsys, scenario_path, DATA / "steps-clock.csv")
    assert (document["window"]["first_step"], document["window"]["last_step"]) == (
        6,
        9,
    )  # step 5 opens it
    assert figure(document, "mean step time") == pytest.approx(
        ((4 + SYNC_S) / 4, (4 * 1.25 + 16.4) / 4)
    )
    assert figure(document, "first sync set-up") == (None, None)
    assert figure(document, "mean sync (steady)") == pytest.approx((SYNC_S, 16.4))
    assert "the log names no rank" in document["assumptions"][0]
    assert any("starts after the run's first sync (step 4)" in note for note in document["notes"])


def test_a_chrome_trace_times_its_steps_and_the_union_of_its_collectives(scenario_path, capsys):
    document = compared(capsys, scenario_path, DATA / "chrome-trace.json")
    assert document["format"] == "chrome" and document["window"]["ranks"] == [0]
    # ProfilerStep#0-#7 are steps 1-8; the sync after step 4 spans 16.2 s, the one after step 8 a
    # gloo span and an overlapping NCCL kernel, 24.2-39.0 s and 38.5-40.2 s: 16.0 s covered
    assert [s["step"] for s in document["syncs"]] == [4, 8]
    assert [s["measured_s"] for s in document["syncs"]] == pytest.approx([16.2, 16.0])
    assert figure(document, "mean step time") == pytest.approx((5.0, 40.2 / 8))
    assert figure(document, "compute utilisation") == pytest.approx((0.2, 8 / 40.2))
    assert figure(document, "first sync set-up") == pytest.approx((0.0, 0.2))
    only_gloo = compared(capsys, scenario_path, DATA / "chrome-trace.json", "--comm-event", "gloo:")
    assert [s["measured_s"] for s in only_gloo["syncs"]] == pytest.approx([16.2, 39.0 - 24.2])


def test_a_torchtitan_log_compares_the_step_time_between_its_logged_steps(scenario_path, capsys):
    document = compared(capsys, scenario_path, DATA / "torchtitan.log")
    assert (
        document["format"] == "torchtitan" and document["window"]["first_step"] == 2
    )  # step 1 opens it
    # steps 2-12: 11 steps and three syncs predicted; logged at 10:00:01.0 and 10:01:00.1
    assert figure(document, "mean step time") == pytest.approx(((11 + 3 * SYNC_S) / 11, 59.1 / 11))
    assert (
        figure(document, "compute utilisation")[1] is None
        and figure(document, "mean sync (steady)")[1] is None
    )


def test_measured_steps_give_every_island_the_log_s_mean_compute(scenario_path, capsys):
    document = compared(capsys, scenario_path, DATA / "steps-clock.csv", "--measured-steps")
    assert document["overrides"] == ["island.0.step_time_s=1.25"]
    assert figure(document, "mean step time")[0] == pytest.approx((4 * 1.25 + SYNC_S) / 4)


def test_out_writes_the_comparison_and_the_predicted_trace(scenario_path, tmp_path, capsys):
    log = tmp_path / "steps.csv"
    shutil.copy(DATA / "steps-two-ranks.csv", log)
    assert main(["compare", str(scenario_path), str(log), "--out", str(tmp_path / "c")]) == 0
    assert json.loads((tmp_path / "c" / "comparison.json").read_text())["log"] == str(log)
    assert (tmp_path / "c" / "predicted_trace.csv").read_text().startswith("time_start_s")
    assert "--out's comparison.json would overwrite the log" in refused(
        capsys, scenario_path, tmp_path / "c" / "comparison.json", "--out", tmp_path / "c"
    )


def write_steps(
    folder: Path, synced_steps: set[int], steps: range = range(1, 13), name: str = "steps.csv"
) -> Path:
    rows = ["step,wall_s,compute_s,blocked_s,synced"]
    rows += [
        f"{s},{17.0 if s in synced_steps else 1.0},1.0,{16.0 if s in synced_steps else 0.0},"
        f"{int(s in synced_steps)}"
        for s in steps
    ]
    (folder / name).write_text("\n".join(rows) + "\n")
    return folder / name


@pytest.mark.parametrize(
    "synced, steps, message",
    [
        (
            {2, 4, 6, 8, 10, 12},
            range(1, 13),
            "line 3: step 2 ends in a sync, the scenario syncs after every 4th step: "
            "the log syncs every 2 steps (--set schedule.inner_steps to it)",
        ),
        (
            {3, 7, 11},
            range(1, 13),
            "step 3 ends in a sync, the scenario syncs after every 4th step: its steps look "
            "counted from 0",
        ),
        (
            {4, 12},
            range(1, 13),
            "line 9: step 8 ends in no sync, the scenario syncs after every 4th step",
        ),
        (
            set(),
            range(5, 8),
            "the window, steps 5-7, holds no sync: the scenario syncs after every 4th step",
        ),
        (
            {4, 8, 12, 16},
            range(1, 17),
            "runs to step 16, the scenario's 3 outer steps of 4 make 12: "
            "--set schedule.outer_steps=4",
        ),
    ],
)
def test_a_log_of_other_work_or_with_nothing_to_compare_is_refused(
    scenario_path, tmp_path, capsys, synced, steps, message
):
    assert message in refused(capsys, scenario_path, write_steps(tmp_path, synced, steps))


def test_what_no_log_can_be_compared_with_is_refused(
    scenario_path, scenario_file, tmp_path, capsys
):
    streaming = scenario_file(
        SCENARIO.replace('"diloco"', '"streaming"\nfragments = 2'), "streaming.toml"
    )
    assert (
        "schedule.algorithm is streaming: a step log is compared with schedules of one blocking sync"
        in refused(capsys, streaming, DATA / "steps-two-ranks.csv")
    )
    header, *rows = (DATA / "steps-two-ranks.csv").read_text().splitlines()
    rank_2 = [
        row.replace(",1,", ",2,", 1) if row.split(",")[1] == "1" else row for row in rows
    ]  # rank 1 -> 2
    (tmp_path / "rank2.csv").write_text("\n".join([header, *rank_2]) + "\n")
    assert (
        "rank 2 logged, the scenario has 2 workers (ranks 0-1): compare a run of the same workers"
        in refused(capsys, scenario_path, tmp_path / "rank2.csv")
    )
    assert (
        "a torchtitan log gives no compute seconds per step: compare without --measured-steps"
        in refused(capsys, scenario_path, DATA / "torchtitan.log", "--measured-steps")
    )
    assert "--comm-event goes with a Chrome trace; this is a steps log" in refused(
        capsys, scenario_path, DATA / "steps-clock.csv", "--comm-event", "gloo"
    )
    (tmp_path / "run").mkdir()
    assert "--format goes with a log file; " in refused(
        capsys, scenario_path, tmp_path / "run", "--format", "steps"
    )
    assert "nowhere.csv: no such run folder or log file" in refused(
        capsys, scenario_path, tmp_path / "nowhere.csv"
    )
    (tmp_path / "notes.txt").write_text("hello\n")
    assert "notes.txt: is a file, not a run folder, nor a log in a format islands reads" in refused(
        capsys, scenario_path, tmp_path / "notes.txt"
    )


def test_format_names_the_reader_whatever_the_content(scenario_path, capsys):
    assert "not a per-step log" in refused(
        capsys, scenario_path, DATA / "torchtitan.log", "--format", "steps"
    )
    assert "no 'step: N  loss:' lines: not a torchtitan log" in refused(
        capsys, scenario_path, DATA / "steps-clock.csv", "--format", "torchtitan"
    )
    assert "not valid JSON" in refused(
        capsys, scenario_path, DATA / "steps-clock.csv", "--format", "chrome"
    )


def test_the_how_to_page_s_worked_example_prints_what_the_page_shows(tmp_path, monkeypatch, capsys):
    """docs/how-to/compare-any-stack.md: the files it says to save, and the two commands it runs."""
    from helpers.docs_text import ROOT, command_examples

    page = (ROOT / "docs" / "how-to" / "compare-any-stack.md").read_text()
    files = re.findall(r"as `([\w.]+)`:\n\n```\w*\n(.*?)```", page, flags=re.S)
    assert [name for name, _ in files] == ["scenario.toml", "steps.csv", "overlapped.csv"]
    for name, text in files:
        (tmp_path / name).write_text(text)
    examples = [e for e in command_examples(page) if e.args[2] in ("steps.csv", "overlapped.csv")]
    assert [e.args[:3] for e in examples] == [
        ("compare", "scenario.toml", "steps.csv"),
        ("compare", "scenario.toml", "overlapped.csv"),
    ]
    monkeypatch.chdir(tmp_path)
    for example in examples:
        assert main(list(example.args)) == 0
        assert capsys.readouterr().out.rstrip("\n").splitlines() == list(example.shown)


def test_an_integer_past_floats_range_in_a_log_is_refused_in_one_line(
    scenario_path, tmp_path, capsys
):
    """Found reading the change: ``math.isfinite`` of a 401-digit integer raised OverflowError, a
    traceback, in a JSON lines log and in a Chrome trace (the generated cases stopped at 30 digits)."""
    huge = "1" + "0" * 400
    (tmp_path / "big.jsonl").write_text(
        '{"step": 1, "wall_s": 1, "compute_s": ' + huge + ', "blocked_s": 0, "synced": 0}\n'
    )
    (tmp_path / "big.json").write_text(
        '{"traceEvents": [{"ph": "X", "name": "ProfilerStep#1", "ts": ' + huge + ', "dur": 1}]}\n'
    )
    for name, message in (
        (
            "big.jsonl",
            "big.jsonl: line 1: compute_s must be a finite number (got an integer of 401 digits)",
        ),
        (
            "big.json",
            "'ts' must be a finite number of microseconds, 0 or more (got an integer of "
            "401 digits)",
        ),
    ):
        assert main(["compare", str(scenario_path), str(tmp_path / name)]) == 2
        error = capsys.readouterr().err.strip()
        assert message in error and "\n" not in error


def test_a_trace_step_longer_than_any_training_step_and_a_stray_carriage_return_are_refused(
    scenario_path, tmp_path, capsys
):
    """Found by the generated cases at the fuzz profile: a ProfilerStep of 1e12 + 1 us, past
    ``MAX_STEP_S`` (which only the per-step format bounded), was read (here: a second past it); and a
    log whose first line holds a bare carriage return raised csv.Error while its format was told."""
    (tmp_path / "long.json").write_text(
        '{"traceEvents": [{"ph": "X", "name": "ProfilerStep#0", "ts": 0, "dur": 1000001000000}]}\n'
    )
    assert main(["compare", str(scenario_path), str(tmp_path / "long.json")]) == 2
    assert (
        "ProfilerStep#0): a step of 1000001 s: no training step lasts more than 1,000,000 s"
        in capsys.readouterr().err
    )
    (tmp_path / "cr.log").write_text("[rank0]:\r\n")
    assert main(["compare", str(scenario_path), str(tmp_path / "cr.log")]) == 2
    error = capsys.readouterr().err.strip()
    assert (
        "cr.log: is a file, not a run folder, nor a log in a format islands reads" in error
        and "\n" not in error
    )
