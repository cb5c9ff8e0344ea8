"""MULTI-PROCESS Decoupled DiLoCo: a syncer process and M = 4 learner processes over the store.

Learners run on their own clocks; learners are SIGKILLed while they upload (``syncer-upload``) or
by the scenario's events, and come back. Each run starts 5-6 processes and has a hard timeout."""

import json
import math
import os
import subprocess
import sys
import tomllib

import pandas as pd
import pytest
from helpers.multiprocess import TINY

from islands.scenarios import from_dict
from islands.simulator import simulate
from islands.trainer.exchange.quantize import encoded_bytes, padded_length

RUN_TIMEOUT_S = 150
H, OUTER, P, TAU = 10, 4, 2, 2
SCENARIO = f"""
name = "decoupled"
[model]
parameters = 1e5
[schedule]
algorithm = "decoupled"
inner_steps = {H}
outer_steps = {OUTER}
fragments = {P}
overlap_steps = {TAU}
bits = 8
[network]
detection_timeout_s = 1.0
[[island]]
name = "a"
replicas = 4
step_time_s = 0.05
bandwidth_gbps = 1.0
"""
SETS = [*TINY, "trainer.pace_step_time_s=0.05", "trainer.timeout_s=30"]
RETURNS = """
[[event]]
at_s = 0.7
island = "a-2"
kind = "leave"
[[event]]
at_s = 1.2
island = "a-2"
kind = "join"
"""


def train(tmp_path, text, kill_at=None, sets=(), base=SETS):
    scenario = tmp_path / "decoupled.toml"
    scenario.write_text(text)
    command = [
        sys.executable,
        "-m",
        "islands.cli",
        "train",
        str(scenario),
        "--out",
        str(tmp_path / "run"),
    ]
    for override in [*base, *sets]:
        command += ["--set", override]
    env = {**os.environ, **({"ISLANDS_KILL_AT": kill_at} if kill_at else {})}
    done = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    run = tmp_path / "run"
    return (
        done.stdout,
        json.loads((run / "summary.json").read_text()),
        json.loads((run / "run.json").read_text()),
        pd.read_csv(run / "trace.csv"),
    )


def test_four_learners_merge_every_fragment_and_learn(tmp_path):
    _, summary, run, trace = train(tmp_path, SCENARIO)
    syncer = run["syncer"]
    assert (
        summary["complete"]
        and summary["outer_steps"] == OUTER
        and summary["inner_steps"] == OUTER * H
    )
    assert syncer["reports"] == 4 * OUTER * P and syncer["dropped_reports"] == 0
    assert all(learner["steps"] == OUTER * H for learner in syncer["learners"].values())
    first, last = syncer["learners"]["0"]["eval_losses"][0][1], run["final_eval_loss"]
    assert math.isfinite(last) and last < first
    comm = trace[trace["kind"] == "comm"]
    assert sorted(comm["worker"].unique()) == [0, 1, 2, 3] and len(comm) == 4 * OUTER * P
    # Every upload is one fragment in int8 with a scale per 128 values: the bytes of the two
    # fragments add up to the whole model's encoded size, per learner and outer step.
    per_outer = comm.groupby(["worker", "outer_step"])["bytes"].sum()
    sizes = sorted(comm.groupby("fragment")["bytes"].first())
    assert per_outer.nunique() == 1 and per_outer.iloc[0] == sum(sizes)
    assert all(size == encoded_bytes(padded_length(size * 128 // 132, 1), 8) for size in sizes)


def test_learner_killed_while_uploading_costs_only_its_own_contribution(tmp_path):
    """Learner 1 dies in its third upload (pieces sent, report not): the syncer got its first two
    reports and nothing of the third, never waits for it (every merge goes ahead within the grace
    window, long before the 1 s detection timeout), the three others finish, the model is finite."""
    stdout, summary, run, trace = train(tmp_path, SCENARIO, kill_at="syncer-upload:3:1")
    syncer = run["syncer"]
    assert "learner 1 is gone" in stdout
    assert syncer["reports"] == 3 * OUTER * P + 2
    assert [
        island for island, learner in syncer["learners"].items() if learner["steps"] == OUTER * H
    ] == ["0", "2", "3"]
    assert not summary["complete"] and "[1]" in summary["incomplete_reason"]
    assert math.isfinite(run["final_eval_loss"])
    idle = trace[trace["kind"] == "idle"]
    longest_idle_s = float((idle["time_end_s"] - idle["time_start_s"]).max()) if len(idle) else 0.0
    assert longest_idle_s < 0.5


def test_a_learner_that_returns_catches_up_from_the_syncer(tmp_path):
    """Learner 2 is SIGKILLed at 0.7 s and started again at 1.2 s: it downloads the global model,
    trains on from the outer step after its last completed one, and every learner finishes."""
    stdout, summary, run, trace = train(tmp_path, SCENARIO + RETURNS)
    syncer = run["syncer"]
    assert "island 2 killed (SIGKILL)" in stdout
    assert syncer["joins"] == 1 and syncer["learners"]["2"]["incarnations"] == 2
    assert all(learner["steps"] == OUTER * H for learner in syncer["learners"].values())
    assert summary["complete"] and summary["joins"] == 1
    catch_up = trace[(trace["kind"] == "comm") & (trace["worker"] == 2) & (trace["fragment"] == -1)]
    assert len(catch_up) == 1 and catch_up["time_start_s"].iloc[0] >= 1.2
    resumed = trace[
        (trace["worker"] == 2) & (trace["time_start_s"] >= catch_up["time_end_s"].iloc[0])
    ]
    assert resumed["outer_step"].min() == catch_up["outer_step"].iloc[0] >= 1
    assert math.isfinite(run["final_eval_loss"])


TWO_SPEEDS = """
name = "two-speeds"
[model]
parameters = 1e5
[schedule]
algorithm = "decoupled"
inner_steps = 10
outer_steps = 2
overlap_steps = 0
bits = 8
[[island]]
name = "fast"
step_time_s = 0.05
bandwidth_gbps = 1.0
[[island]]
name = "slow"
step_time_s = 0.1
bandwidth_gbps = 1.0
"""
PACED = [*TINY, "trainer.pace_islands=true", "trainer.timeout_s=30"]


def idle_per_sync(trace, worker):
    idle = trace[(trace["kind"] == "idle") & (trace["worker"] == worker)]
    return (idle["time_end_s"] - idle["time_start_s"]).groupby(idle["outer_step"]).sum().tolist()


@pytest.mark.parametrize("quorum, expected_idle_s", [(1, 0.1), (2, 10 * (0.1 - 0.05))])
def test_quorum_and_grace_window_decide_how_long_the_fast_learner_waits(
    tmp_path, quorum, expected_idle_s
):
    """The fast learner (0.05 s steps) reports every 0.5 s, the slow one (0.1 s) every 1 s, each
    blocking (tau = 0). Quorum 1 with a 0.1 s grace window: the syncer merges the fast learner's
    report alone, 0.1 s after it came. Quorum 2: it waits for the slow learner's, H x (0.1 - 0.05)."""
    _, summary, run, trace = train(
        tmp_path,
        TWO_SPEEDS,
        sets=[f"schedule.quorum={quorum}", "schedule.grace_window=0.1"],
        base=PACED,
    )
    assert summary["complete"]
    assert idle_per_sync(trace, 0) == pytest.approx([expected_idle_s] * 2, abs=0.04)


def test_a_straggler_behind_a_quorum_of_the_others_never_waits_and_the_simulator_agrees(tmp_path):
    """Two fast learners (0.05 s steps) and one 100% slower (0.1 s), quorum 2, no grace window: the
    fast pair is every round's quorum; the straggler's reports, each a round behind, are late:
    answered at once (no idle), merged with the pair's next round or, the last two, together once
    nobody is left to report: 3 + 1 merges, 3 late reports, as the simulator counts them."""
    text = TWO_SPEEDS.replace('name = "fast"', 'name = "fast"\nreplicas = 2')
    text = text.replace("outer_steps = 2", "outer_steps = 3")
    sets = ["schedule.quorum=2", "schedule.grace_window=0"]
    _, summary, run, trace = train(tmp_path, text, sets=sets, base=PACED)
    assert summary["complete"]
    assert sum(idle_per_sync(trace, 2)) == pytest.approx(0, abs=0.03)
    predicted = simulate(from_dict(tomllib.loads(text), overrides=sets)).summary
    measured = run["syncer"]["merges"], run["syncer"]["late_reports"]
    assert measured == (predicted["merges"], predicted["late_reports"]) == (4, 3)
