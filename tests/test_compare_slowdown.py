"""``islands compare SCENARIO LOG`` reads how much compute slowed while the sync moved bytes
(``validation/logs/slowdown.py``): s = (median compute of the steps that end in a sync / median of
the others - 1) / backward_overlap, or why it cannot be told.

The scenario (helpers.step_logs): 2 workers, 1 s a step, H = 4, 3 outer steps; every log below is
rank 0's steps 1-12, syncing after steps 4, 8 and 12."""

from __future__ import annotations

import json

import pytest
from helpers.step_logs import DATA, SCENARIO

from islands.cli import main

KEY = "compute.slowdown_while_exchanging"
FIGURE = "slowdown while exchanging"


def log_text(synced_compute_s: list[float], blocked_s: list[float], other_s=(1.0, 1.01)) -> str:
    """Steps 1-12: the three that sync compute ``synced_compute_s`` and wait ``blocked_s``; the others
    compute ``other_s`` in turn."""
    rows = ["step,wall_s,compute_s,blocked_s,synced"]
    syncs = iter(zip(synced_compute_s, blocked_s))
    for step in range(1, 13):
        if step % 4 == 0:
            compute_s, wait_s = next(syncs)
            rows.append(f"{step},{compute_s + wait_s},{compute_s},{wait_s},1")
        else:
            compute_s = other_s[step % 2]
            rows.append(f"{step},{compute_s},{compute_s},0,0")
    return "\n".join(rows) + "\n"


def compared(capsys, scenario_file, tmp_path, text: str, *overrides: str) -> dict:
    log = tmp_path / "steps.csv"
    log.write_text(text)
    sets = [arg for override in overrides for arg in ("--set", override)]
    assert main(["compare", str(scenario_file(SCENARIO)), str(log), *sets, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def figure(document: dict) -> tuple[float | None, float | None]:
    [row] = [f for f in document["figures"] if f["name"] == FIGURE]
    return row["predicted"], row["measured"]


def note(document: dict) -> str:
    [line] = [n for n in document["notes"] if n.startswith("compute slowdown while exchanging")]
    return line


def test_synced_steps_that_compute_longer_over_their_overlap_give_s(
    capsys, scenario_file, tmp_path
):
    # the 9 others compute 1.01 s (steps 1, 3, 5, 7, 9, 11) and 1.0 s (2, 6, 10): median 1.01 s; the
    # synced ones 1.0302 s: +2% over half a step, s = 0.04
    text = log_text([1.0302, 1.0302, 1.0302], [16.0, 16.0, 16.0])
    document = compared(
        capsys, scenario_file, tmp_path, text, "schedule.backward_overlap=0.5", f"{KEY}=0.03"
    )
    slowdown = document["slowdown"]
    assert (slowdown["synced_steps"], slowdown["other_steps"]) == (3, 9)
    assert slowdown["excess"] == pytest.approx(1.0302 / 1.01 - 1)
    assert slowdown["s"] == pytest.approx((1.0302 / 1.01 - 1) / 0.5)
    assert slowdown["s"] == pytest.approx(0.04)
    assert slowdown["lower_bound"] is False and slowdown["why_not"] is None
    assert figure(document) == pytest.approx((0.03, 0.04))
    assert note(document).endswith(
        "the 3 steps that end in a sync against the 9 that do not: median compute +2.0%, over the "
        f"backward_overlap = 0.5 of a step that overlaps its sync: s = 0.04; --set {KEY}=0.04 predicts it"
    )


def test_a_sync_that_ended_before_its_compute_makes_s_a_lower_bound(
    capsys, scenario_file, tmp_path
):
    text = log_text([1.0302, 1.0302, 1.0302], [16.0, 0.0, 16.0])
    document = compared(capsys, scenario_file, tmp_path, text, "schedule.backward_overlap=0.5")
    assert document["slowdown"]["lower_bound"] is True
    assert "s = 0.04, at least (a sync ended before its step's compute" in note(document)


def test_a_scenario_that_overlaps_nothing_cannot_tell_s_but_shows_the_excess(
    capsys, scenario_file, tmp_path
):
    text = log_text([1.0302, 1.0302, 1.0302], [16.0, 16.0, 16.0])
    document = compared(capsys, scenario_file, tmp_path, text)
    assert figure(document) == (0.0, None)
    assert document["slowdown"]["s"] is None
    assert document["slowdown"]["excess"] == pytest.approx(0.02)
    assert note(document) == (
        f"compute slowdown while exchanging ({KEY}): cannot be told: the scenario overlaps no "
        "compute with its syncs (schedule.backward_overlap = 0): a blocking sync slows no compute; "
        "the 3 steps that end in a sync against the 9 that do not: median compute +2.0%"
    )


def test_a_window_whose_every_step_syncs_cannot_tell_it(capsys, scenario_file, tmp_path):
    # DDP: H = 1, every step ends in a sync
    rows = ["step,wall_s,compute_s,blocked_s,synced"] + [
        f"{step},17.02,1.02,16.0,1" for step in range(1, 13)
    ]
    document = compared(
        capsys,
        scenario_file,
        tmp_path,
        "\n".join(rows) + "\n",
        "schedule.algorithm=ddp",
        "schedule.outer_steps=12",
        "schedule.backward_overlap=0.5",
    )
    assert figure(document)[1] is None
    assert "every step of the window ends in a sync" in note(document)
    assert (document["slowdown"]["synced_steps"], document["slowdown"]["other_steps"]) == (12, 0)


def test_steps_that_computed_nothing_cannot_tell_it(capsys, scenario_file, tmp_path):
    text = log_text([0.5, 0.5, 0.5], [16.0, 16.0, 16.0], other_s=(0.0, 0.0))
    document = compared(capsys, scenario_file, tmp_path, text, "schedule.backward_overlap=0.5")
    assert "the steps that end in no sync computed for 0 s" in note(document)


@pytest.mark.parametrize(
    ("log", "why"),
    [
        ("torchtitan.log", "a torchtitan log gives no compute seconds"),
        ("chrome-trace.json", "a trace's compute is each step less its communication"),
    ],
)
def test_logs_without_compute_apart_cannot_tell_it(capsys, scenario_file, log, why):
    assert main(["compare", str(scenario_file(SCENARIO)), str(DATA / log), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert figure(document)[1] is None and why in note(document)
