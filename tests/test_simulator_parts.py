"""The engine's parts, each with one job: who is present (``Fleet``), the completed outer steps
(``Progress``), the trace's rows (``TraceLog``), the exchanges behind one interface (``Exchanges``);
and the layout that keeps them so: one writer each, no syncer branch in the engine's loop."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import simpy
from helpers.scenarios import make_scenario

from islands.simulator import RunSetup
from islands.simulator.budget import estimate
from islands.simulator.compute import step_clock
from islands.simulator.events.engine import Simulation
from islands.simulator.events.exchanges import Collectives, Exchanges, StagedCollectives
from islands.simulator.events.progress import Progress
from islands.simulator.events.syncer import Syncer
from islands.simulator.events.tracelog import TraceLog
from islands.simulator.fleet import Fleet
from islands.simulator.workers import WorkerState

SIMULATOR = Path(__file__).resolve().parents[1] / "simulator"


def worker_state(rank: int = 0) -> WorkerState:
    worker = make_scenario().workers()[rank]
    return WorkerState(worker, step_clock(worker, 0))


def test_progress_counts_the_laggard_and_rolls_back():
    env = simpy.Environment()
    progress = Progress(env, 3, [0, 1])
    progress.learner_done(0, 1)
    assert progress.completed_outer == 0  # learner 1 has done none
    progress.learner_done(1, 0)
    assert progress.completed_outer == 1 and progress.learner_outer == {0: 2, 1: 1}
    env.run(until=5.0)
    progress.outer_step_done(2)
    assert progress.complete and progress.interval_start_s == 5.0
    progress.roll_back(1)
    assert progress.completed_outer == 1 and not progress.complete
    progress.finish()
    progress.finish()  # a second end changes nothing
    assert progress.over


def test_a_wait_is_idle_before_the_collective_started_and_stall_after():
    env = simpy.Environment()
    trace, state = TraceLog(env), worker_state()
    env.run(until=10.0)
    trace.wait(state, 4.0, 7.0, 0, 2)
    trace.wait(state, 8.0, None, 1, 2)  # never started: all idle
    assert [(row.time_start_s, row.time_end_s, row.kind) for row in trace.rows] == [
        (4.0, 7.0, "idle"),
        (7.0, 10.0, "stall"),
        (8.0, 10.0, "idle"),
    ]


def test_closing_a_compute_records_it_and_counts_it_unsynced():
    env = simpy.Environment()
    trace, state = TraceLog(env), worker_state()
    trace.open(state, "compute", -1, 0)
    env.run(until=2.5)
    trace.close(state)
    trace.close(state)  # nothing open: no row
    assert [(row.time_start_s, row.time_end_s, row.kind) for row in trace.rows] == [
        (0.0, 2.5, "compute")
    ]
    assert state.unsynced_compute_s == 2.5 and state.activity is None


def test_the_fleet_admits_and_forgets_members():
    workers = make_scenario().workers()[:3]
    fleet = Fleet(workers, [(worker, 1) for worker in workers], [1.0] * 3, seed=0)
    for rank in (2, 0, 1):
        fleet.admit(rank)
    fleet.state_of[0].present = fleet.state_of[2].present = True
    fleet.forget(1)
    assert fleet.members == {0, 2} and fleet.present_members() == [0, 2] and not fleet.grouped


@pytest.mark.parametrize(
    ("overrides", "kind"),
    [
        ([], Collectives),
        (["network.collective=hierarchical"], StagedCollectives),
        (["schedule.algorithm=decoupled"], Syncer),
    ],
)
def test_each_schedule_exchanges_through_one_interface(overrides, kind):
    scenario = make_scenario(overrides)
    simulation = Simulation(RunSetup.of(scenario), estimate(scenario))
    assert type(simulation.exchanges) is kind and isinstance(simulation.exchanges, Exchanges)


def tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def writers(attribute: str, methods: tuple[str, ...] = ()) -> set[str]:
    """The simulator's files that assign ``x.attribute`` (or call one of ``methods`` on it)."""
    found = set()
    for path in sorted(SIMULATOR.rglob("*.py")):
        for node in ast.walk(tree(path)):
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AugAssign)
                else []
            )
            if any(isinstance(t, ast.Attribute) and t.attr == attribute for t in targets):
                found.add(path.name)
            call = node.func if isinstance(node, ast.Call) else None
            if (
                isinstance(call, ast.Attribute)
                and call.attr in methods
                and isinstance(call.value, ast.Attribute)
                and call.value.attr == attribute
            ):
                found.add(path.name)
    return found


def test_each_part_has_one_writer():
    assert writers("members", ("add", "discard", "remove", "clear")) == {"fleet.py"}
    assert writers("completed_outer") == {"progress.py"}
    rows = {
        path.name for path in SIMULATOR.rglob("*.py") if "Row(" in path.read_text(encoding="utf-8")
    }
    assert rows == {
        "tracelog.py",
        "lockstep.py",
        "one_learner.py",
        "learners.py",
    }  # a fast path's rows are a replay's own


def test_the_engine_is_the_process_loop_with_no_syncer_branch():
    source = (SIMULATOR / "events" / "engine.py").read_text(encoding="utf-8")
    assert len(source.splitlines()) <= 300
    assert "self.syncer" not in source and "syncer is None" not in source
