"""Elastic runs whose islands have 2 ranks each (``trainer/runtime/island.py``): an island leaves and joins as a
whole. MULTI-PROCESS: each run starts 6-8 processes and has a hard timeout; the unit tests below
start none."""

import json
import os
import subprocess
import sys
import threading
import time
from datetime import timedelta
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
from helpers.churn_runs import LATE_JOINER, PERIODS, SCENARIO, SETS, outputs, train
from helpers.multiprocess import global_flat, rank_state

from islands.errors import UserError
from islands.scenarios import from_dict
from islands.trainer.core import faults
from islands.trainer.core.checkpoint import PeerFailed
from islands.trainer.core.world import Ending
from islands.trainer.elastic.membership import LeftOut
from islands.trainer.elastic.world import ElasticWorld
from islands.trainer.kinds import make_run_plan
from islands.trainer.runtime.island import IslandRanks
from islands.trainer.runtime.island_processes import Fleet

R = 2
SETS_R2 = [*SETS, f"trainer.ranks_per_island={R}"]


def ranks(islands):
    return [island * R + local for island in islands for local in range(R)]


def assert_replicas(run, period, islands):
    """Every rank of ``islands`` holds the same finite global weights, and an island's ranks the same
    local model."""
    states = {rank: rank_state(run, period, rank) for rank in ranks(islands)}
    first = global_flat(states[ranks(islands)[0]])
    assert torch.isfinite(first).all()
    assert all(torch.equal(first, global_flat(state)) for state in states.values())
    for island in islands:
        leader, follower = (states[rank]["model"] for rank in ranks([island]))
        assert all(torch.equal(leader[name], follower[name]) for name in leader)


def test_a_two_rank_island_leaves_mid_interval_and_a_two_rank_island_joins(tmp_path):
    """Island 1 (ranks 2 and 3) is SIGKILLed mid-interval by the launcher; island 3 (ranks 6 and 7)
    joins later: its leader downloads the state and hands it to its follower, and both train."""
    stdout = train(tmp_path, SCENARIO + LATE_JOINER, sets=SETS_R2)
    run = tmp_path / "run"
    assert (
        "island 1 killed (SIGKILL)" in stdout
        and "membership: epoch 1, islands [0, 2] (M = 2)" in stdout
    )
    assert "islands [0, 2, 3] (M = 3)" in stdout
    final = sorted(path.name for path in (run / "checkpoints" / f"period-{PERIODS:06d}").iterdir())
    assert final == [f"rank-{rank:04d}.pt" for rank in ranks([0, 2, 3])]
    assert_replicas(run, PERIODS, [0, 2, 3])
    summary, churn, trace = outputs(run)
    assert summary["leaves"] == 1 and summary["joins"] == 1 and summary["outer_steps"] == PERIODS
    assert [leave["island"] for leave in churn["leaves"]] == [1]
    assert [join["island"] for join in churn["joins"]] == [3] and 0 < churn["joins"][0][
        "join_s"
    ] < 5
    rows = [row.split(",") for row in trace]
    downloads = [r for r in rows if r[4] == "comm" and r[6] == "-1"]
    assert [int(r[2]) for r in downloads] == [3]  # the island's leader downloaded, once
    assert any(r[2] == "3" and r[4] == "compute" for r in rows)
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, PERIODS * 10 + 1))


def test_killing_one_rank_takes_down_its_island_and_a_resume_hands_the_state_to_both_ranks(
    tmp_path,
):
    """Island 1's follower (local rank 1) dies at an inner step: its leader's next gradient average
    fails and the island leaves as one (leaves = 1). Resumed from the next checkpoint, which island 1
    is missing from, its leader takes the state from a live island and hands it to its follower."""
    periods = 4
    sets = [*SETS_R2, "trainer.checkpoint_every=1", f"schedule.outer_steps={periods}"]
    stdout = train(tmp_path, SCENARIO, "--stop-after", "2", kill_at="inner-step:14:1.1", sets=sets)
    run = tmp_path / "run"
    assert "island 1 died (signal 9)" in stdout and "islands [0, 2] (M = 2)" in stdout
    summary, churn, _ = outputs(run)
    assert summary["leaves"] == 1 and [leave["island"] for leave in churn["leaves"]] == [1]
    assert not any(
        (run / "checkpoints" / "period-000002" / f"rank-{rank:04d}.pt").exists()
        for rank in ranks([1])
    )
    stdout = train(tmp_path, SCENARIO, "--resume", str(run), sets=sets)
    assert "membership: epoch 2, islands [0, 1, 2] (M = 3)" in stdout
    assert_replicas(run, periods, [0, 1, 2])
    summary, churn, _ = outputs(run)
    assert summary["leaves"] == 1 and summary["outer_steps"] == periods
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, periods * 10 + 1))


@pytest.mark.parametrize(
    "setting, local_rank, killed",
    [
        ("inner-step:1:1", "0", True),
        ("inner-step:1:1", "1", True),
        ("inner-step:1:1.1", "1", True),
        ("inner-step:1:1.1", "0", False),
        ("inner-step:1:2.1", "1", False),
    ],
)
def test_a_kill_entry_names_an_island_or_one_of_its_ranks(monkeypatch, setting, local_rank, killed):
    monkeypatch.setenv("LOCAL_RANK", local_rank)
    assert any(kill.hits("inner-step", 1) for kill in faults.parse_kills(setting)) == killed


class FakeProcess:
    def __init__(self, rank, incarnation):
        self.rank, self.incarnation, self.returncode = rank, incarnation, None

    def poll(self):
        return self.returncode

    def send_signal(self, number):
        self.returncode = -number

    def wait(self):
        return self.returncode


def test_the_launcher_kills_and_restarts_an_island_whole():
    """A leave kills both ranks of the island and its return starts both again, as a new incarnation;
    one rank dying by a signal takes its island-mate down with it."""
    document = {
        "name": "t",
        "model": {"parameters": 1e5},
        "trainer": {"ranks_per_island": R},
        "schedule": {"algorithm": "diloco", "inner_steps": 5, "outer_steps": 2},
        "island": [{"name": "a", "replicas": 2, "step_time_s": 0.1, "bandwidth_gbps": 1.0}],
        "event": [
            {"at_s": 1.0, "island": "a-1", "kind": "leave"},
            {"at_s": 2.0, "island": "a-1", "kind": "join"},
        ],
    }
    fleet = Fleet(
        make_run_plan(from_dict(document)),
        lambda rank, join_at, incarnation: FakeProcess(rank, incarnation),
    )
    first = fleet.running[1]
    assert [(p.rank, p.incarnation) for p in first] == [(2, 0), (3, 0)]
    fleet.play(0.0)  # the first reading of the run clock
    fleet.play(1.5)
    assert all(p.returncode == -9 for p in first)
    assert [(p.rank, p.incarnation) for p in fleet.running[1]] == [(2, 1), (3, 1)]
    leader, follower = fleet.running[0]
    follower.returncode = -9
    assert fleet.status() is None and 0 not in fleet.running and leader.returncode == -9


def island_of_threads(act):
    """One island of two ranks as threads, each calling ``act(ranks)`` with its ``IslandRanks``; returns
    what each got (a value or the exception it raised)."""
    store = dist.HashStore()
    got = [None, None]

    def rank(local):
        try:
            got[local] = act(IslandRanks(store, "island/0/test", 0, local, 2))
        except Exception as error:  # what the test compares
            got[local] = error

    threads = [threading.Thread(target=rank, args=(local,)) for local in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return got


def shared(decide):
    """``island_of_threads``'s ``act``: ``ElasticWorld.shared(decide)`` on a world that has only its ranks."""

    def act(ranks):
        world = ElasticWorld(SimpleNamespace(ranks_per_island=R), ranks.rank, None, ranks=ranks)
        return world.shared(lambda: decide(world))

    return act


def test_followers_hear_what_their_leader_decided_and_never_decide_themselves():
    decided = []

    def decide(world):
        decided.append(world.ranks.rank)
        nested = world.shared(lambda: 2.0)  # the leader's alone: nobody hears it
        return torch.arange(3.0) * nested

    leader, follower = island_of_threads(shared(decide))
    assert (
        decided == [0]
        and torch.equal(leader, follower)
        and torch.equal(follower, torch.tensor([0.0, 2.0, 4.0]))
    )


@pytest.mark.parametrize("raised, heard", [(LeftOut, LeftOut), (UserError, PeerFailed)])
def test_followers_go_their_leaders_way_when_it_is_left_out_or_refuses_the_run(raised, heard):
    def decide(world):
        raise raised("island 0: the reason")

    leader, follower = island_of_threads(shared(decide))
    assert (
        type(leader) is raised
        and type(follower) is heard
        and str(follower) == "island 0: the reason"
    )


def test_a_follower_ends_only_once_its_leader_has_written_the_outputs():
    """The launcher kills an island when one of its ranks dies by a signal: a follower that ended at once
    and died on its way out took its leader down before it wrote summary.json (a run that exited 0
    without one)."""
    events = []

    def write(ending):
        time.sleep(0.3)  # the leader gathers the rows and writes the outputs
        events.append("written")
        return {"outer_steps": PERIODS}

    def finish(ranks):
        world = ElasticWorld(SimpleNamespace(ranks_per_island=R), ranks.rank, None, ranks=ranks)
        world.gather_and_write = write
        summary = world.finish(Ending(PERIODS, [], {}, None))
        events.append(ranks.rank)
        return summary

    assert island_of_threads(finish) == [{"outer_steps": PERIODS}, None]
    assert events[0] == "written" and sorted(events[1:]) == [0, 1]


RANK_SCRIPT = """
import os, sys, torch, torch.distributed as dist
from datetime import timedelta
from islands.trainer.runtime.island import IslandRanks
store = dist.TCPStore("127.0.0.1", int(sys.argv[1]), is_master=False, timeout=timedelta(seconds=30))
ranks = IslandRanks(store, "island/1/test", 1, int(sys.argv[2]), 2)
if ranks.rank == 1:
    os._exit(0)  # gone without a word, as a crashed process
ranks.all_reduce_sum_(torch.zeros(1))
print("not reached")
"""


END_SCRIPT = """
import os, sys, torch, torch.distributed as dist
from datetime import timedelta
from islands.trainer.runtime.island import IslandRanks
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one CPU, as on a loaded machine
store = dist.TCPStore("127.0.0.1", int(sys.argv[1]), is_master=False, timeout=timedelta(seconds=30))
ranks = IslandRanks(store, "island/0/test", 0, int(sys.argv[2]), 2)
ranks.itself = ranks  # in a reference cycle, as the trainer holds it: not freed before the interpreter exits
for step in range(3):  # training steps, each with its gradient average
    ranks.all_reduce_sum_(torch.zeros(1))
print(ranks.tell("done") if ranks.leads else ranks.hear())
ranks.close()
"""


def island_processes(script):
    """An island's two ranks as processes running ``script`` (arguments: the store's port, the local
    rank); their exit codes and outputs."""
    store = dist.TCPStore(
        "127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=30)
    )
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(store.port), str(local)],
            text=True,
            stdout=subprocess.PIPE,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
        for local in range(2)
    ]
    outputs = [rank.communicate(timeout=60)[0] for rank in ranks]
    return [rank.returncode for rank in ranks], outputs


def test_a_rank_whose_island_mate_is_gone_kills_itself():
    """Without any launcher (torchrun's case): the island's next collective fails on the dead rank's
    closed sockets, and the survivor SIGKILLs itself so that its island leaves as one."""
    codes, outputs = island_processes(RANK_SCRIPT)
    assert codes == [-9, 0]
    assert "island 1: an island-mate is gone" in outputs[0] and "not reached" not in outputs[0]


def test_a_rank_that_closes_its_island_s_group_exits_cleanly_right_after_the_last_word():
    """Left to the interpreter's exit, gloo's worker thread frees the last broadcast's tensors once the
    interpreter is shutting down whenever the main thread runs on first (on one CPU nearly always, on a
    loaded machine now and then), and the process aborts ("terminate called"): a death by a signal,
    which the launcher takes for the whole island's (``IslandRanks.close``)."""
    codes, outputs = island_processes(END_SCRIPT)
    assert codes == [0, 0] and [output.split() for output in outputs] == [["None"], ["done"]]
