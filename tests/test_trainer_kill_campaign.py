"""MULTI-PROCESS kill campaign: islands SIGKILLed at every kind of point, at M = 4, 5 and 6.

With 3 islands every survivor is a ring neighbour of the dead one; only at M >= 4 does an island wait
on a live peer while the death is discovered elsewhere, which is where a healthy island used to be
evicted. Each trial is one elastic run (``trainer.faults``: ``ISLANDS_KILL_AT`` picks the points,
``ISLANDS_FAULT`` poisons one contribution); the pass at which an island dies is drawn from a seeded
generator, so a trial is the same on every run of the suite. One trial has islands of two ranks,
which die whole. Every trial asserts:

* the islands that left are exactly the ones killed: no healthy island evicted;
* every outer step is committed, each survivor holds one comm row per outer step it took part in,
  and ``metrics.jsonl`` holds every inner step exactly once, as strict JSON;
* the survivors' global weights are identical and finite (on every rank, in islands of two ranks);
* a death costs the survivors at most the detection timeout plus one re-formed exchange;
* every output is written.
"""

import json
import math
import os
import random
import subprocess
import sys
from collections import Counter, defaultdict

import pytest
import torch
from helpers.multiprocess import TINY, global_flat, rank_state

SEED = 20261130
H = 4
PERIODS = 5
DETECTION_S = 1.0
PACE_S = 0.04
# re-forming after a death: the detection timeout, then one exchange of a tiny model on loopback,
# with room for a loaded 2-core CI machine
DEATH_COST_BOUND_S = DETECTION_S + 2.5
COLLECTIVE_S = 20.0
RUN_TIMEOUT_S = 240
SETS = [
    *TINY,
    f"trainer.pace_step_time_s={PACE_S}",
    f"trainer.collective_timeout_s={COLLECTIVE_S:g}",
    "trainer.elastic=true",
    "trainer.checkpoint_every=1",
]


def scenario(islands: int, joiner_at_s: float | None = None) -> str:
    text = f"""
name = "campaign"
[model]
parameters = 1e5
[schedule]
algorithm = "diloco"
inner_steps = {H}
outer_steps = {PERIODS}
bits = 16
[network]
detection_timeout_s = {DETECTION_S}
[[island]]
name = "a"
replicas = {islands}
step_time_s = {PACE_S}
bandwidth_gbps = 1.0
"""
    if joiner_at_s is not None:
        text += f"""
[[island]]
name = "late"
present = false
step_time_s = {PACE_S}
bandwidth_gbps = 1.0
[[event]]
at_s = {joiner_at_s}
island = "late"
kind = "join"
"""
    return text


def strict_json(text: str):
    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def train(
    tmp_path, text: str, kills: str, fault: str | None = None, ranks_per_island: int = 1
) -> str:
    (tmp_path / "campaign.toml").write_text(text)
    command = [
        sys.executable,
        "-m",
        "islands.cli",
        "train",
        str(tmp_path / "campaign.toml"),
        "--out",
        str(tmp_path / "run"),
    ]
    for override in [*SETS, f"trainer.ranks_per_island={ranks_per_island}"]:
        command += ["--set", override]
    env = {**os.environ, "ISLANDS_KILL_AT": kills, **({"ISLANDS_FAULT": fault} if fault else {})}
    done = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "arrived after the detection timeout" not in done.stdout, done.stdout
    return done.stdout


def trace_rows(run):
    lines = (run / "trace.csv").read_text().splitlines()
    header = lines[0].split(",")
    return [dict(zip(header, line.split(","))) for line in lines[1:]]


def check_trial(
    run,
    islands: int,
    killed: set[int],
    joined: int = 0,
    bound_s: float = DEATH_COST_BOUND_S,
    ranks_per_island: int = 1,
) -> dict:
    """The assertions every trial shares (the global weights: on every rank of every survivor);
    returns the summary."""
    documents = {
        name: strict_json((run / f"{name}.json").read_text())
        for name in ("summary", "run", "churn")
    }
    summary, churn = documents["summary"], documents["churn"]
    assert sorted(leave["island"] for leave in churn["leaves"]) == sorted(killed)
    assert summary["leaves"] == len(killed) and summary["joins"] == joined
    assert summary["outer_steps"] == PERIODS and summary["inner_steps"] == H * PERIODS

    metrics = [strict_json(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == list(range(1, H * PERIODS + 1))
    assert [m["eval_loss"] is not None for m in metrics] == ([False] * (H - 1) + [True]) * PERIODS

    rows = trace_rows(run)
    comms = Counter(
        (row["worker"], row["outer_step"])
        for row in rows
        if row["kind"] == "comm" and int(row["fragment"]) >= 0
    )
    assert set(comms.values()) == {1}, comms  # a redone exchange is recorded once
    survivors = sorted(set(range(islands + joined)) - killed)
    for island in survivors:
        committed = sorted(int(step) for worker, step in comms if int(worker) == island)
        assert committed == list(range(committed[0], PERIODS)), (island, committed)

    blocked = defaultdict(float)
    for row in rows:
        if row["kind"] in ("idle", "stall") and int(row["fragment"]) >= 0:
            blocked[(row["worker"], row["outer_step"])] += float(row["time_end_s"]) - float(
                row["time_start_s"]
            )
    assert max(blocked.values()) <= bound_s, max(blocked.items(), key=lambda item: item[1])

    states = [
        rank_state(run, PERIODS, island * ranks_per_island + local)
        for island in survivors
        for local in range(ranks_per_island)
    ]
    final = global_flat(states[0])
    assert torch.isfinite(final).all()
    assert all(torch.equal(final, global_flat(state)) for state in states[1:])
    return summary


def draw(count: int, low: int, high: int) -> list[int]:
    """``count`` passes in [low, high], from this module's seeded generator (one per trial)."""
    return random.Random(f"{SEED}-{low}-{high}-{count}").sample(range(low, high + 1), count)


def test_m4_a_non_neighbour_keeps_its_place_when_one_dies_mid_exchange_then_the_reporter_dies(
    tmp_path,
):
    """Island 2 dies inside the reduce-scatter (island 0 is not its neighbour, islands 1 and 3 are);
    later island 0, which writes metrics.jsonl, dies in an inner step; a poisoned delta is screened."""
    (exchange_pass,) = draw(1, 1, 2)
    (step_pass,) = draw(1, H * 3 + 1, H * 4 - 1)
    stdout = train(
        tmp_path,
        scenario(4),
        f"all-reduce:{exchange_pass}:2,inner-step:{step_pass}:0",
        fault="nan@3:0",
    )
    assert "islands [0, 1, 3] (M = 3)" in stdout and "islands [1, 3] (M = 2)" in stdout
    run = tmp_path / "run"
    check_trial(run, 4, {0, 2})
    excluded = strict_json((run / "run.json").read_text())["excluded_contributions"]
    assert [(entry["outer_step"], entry["island"]) for entry in excluded] == [(0, 3)]


def test_m5_two_simultaneous_deaths_at_the_screen_then_one_at_evaluation(tmp_path):
    (screen_pass,) = draw(1, 2, 3)
    stdout = train(
        tmp_path,
        scenario(5),
        f"exchange-screen:{screen_pass}:1,exchange-screen:{screen_pass}:3,"
        f"evaluate:{screen_pass + 1}:4",
    )
    assert "islands [0, 2, 4] (M = 3)" in stdout and "islands [0, 2] (M = 2)" in stdout
    check_trial(tmp_path / "run", 5, {1, 3, 4})


def test_m6_deaths_at_a_checkpoint_write_before_the_vote_and_mid_interval(tmp_path):
    write_pass, vote_pass, step_pass = draw(1, 1, 2) + draw(1, 3, 3) + draw(1, H * 3 + 1, H * 4 - 1)
    train(
        tmp_path,
        scenario(6),
        f"checkpoint-write:{write_pass}:5,exchange-vote:{vote_pass}:2,inner-step:{step_pass}:4",
    )
    check_trial(tmp_path / "run", 6, {2, 4, 5})


@pytest.mark.parametrize("victim, point", [(0, "download-source"), (4, "download-joiner")])
def test_m4_a_death_during_a_joiners_download(tmp_path, victim, point):
    """The source of the state (island 0: the holders' links are alike, so the fastest holder is the
    lowest, ``network.weights_from``) or the joiner (island 4) dies mid-download: a source's death
    sends the joiner to another holder; a joiner's death costs only the joiner."""
    stdout = train(tmp_path, scenario(4, joiner_at_s=2 * H * PACE_S), f"{point}:1:{victim}")
    summary = check_trial(tmp_path / "run", 4, {victim}, joined=1)
    assert summary["joins"] == 1
    if victim == 0:
        assert "islands [1, 2, 3, 4] (M = 4)" in stdout
        final = rank_state(tmp_path / "run", PERIODS, 4)
        assert math.isfinite(float(global_flat(final).sum()))


def test_m4_islands_of_two_ranks_die_whole_a_leader_mid_exchange_then_a_follower_of_the_reporter(
    tmp_path,
):
    """R = 2: island 2's leader dies inside the reduce-scatter and its follower's next gradient
    average fails; later the follower of island 0 (whose leader writes metrics.jsonl) dies at an
    inner step and takes its leader with it. Each island leaves once, as one."""
    (exchange_pass,) = draw(1, 1, 2)
    (step_pass,) = draw(1, H * 3 + 1, H * 4 - 1)
    stdout = train(
        tmp_path,
        scenario(4),
        f"all-reduce:{exchange_pass}:2,inner-step:{step_pass}:0.1",
        ranks_per_island=2,
    )
    assert "islands [0, 1, 3] (M = 3)" in stdout and "islands [1, 3] (M = 2)" in stdout
    assert "island 0 died (signal 9)" in stdout and "island 2 died (signal 9)" in stdout
    check_trial(tmp_path / "run", 4, {0, 2}, ranks_per_island=2)
