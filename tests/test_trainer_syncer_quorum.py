"""The trainer's syncer decides merges by the rule the simulator plays (docs/decoupled.md): the
quorum counts one round's reports; a report whose round is merged is answered at once and joins the
next merge; once every learner that may still report has a report waiting, it merges what it has.
In process: a real ``Syncer`` on a tiny model, a fake store, reports pushed by hand."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers.multiprocess import TINY

from islands.scenarios import from_dict
from islands.trainer.core.tracing import Clock
from islands.trainer.decoupled.syncer_process import Syncer
from islands.trainer.decoupled.wire import key, to_bytes, unpack
from islands.trainer.exchange.quantize import encode
from islands.trainer.kinds import make_run_plan

OUTER = 3


class FakeStore:
    """What the syncer's merge path touches: replies and ready flags, and the uploaded pieces."""

    def __init__(self):
        self.values: dict[str, bytes] = {}
        self.queues: dict[str, list[bytes]] = {}

    def queue_push(self, name: str, value: bytes) -> None:
        self.queues.setdefault(name, []).append(value)

    def set(self, name: str, value) -> None:
        self.values[name] = value

    def multi_get(self, names: list[str]) -> list[bytes]:
        return [self.values[name] for name in names]

    def delete_key(self, name: str) -> None:
        del self.values[name]


def syncer(tmp_path: Path, learners: int, quorum: int) -> Syncer:
    document = {
        "name": "quorum",
        "model": {"parameters": 1e5},
        "schedule": {
            "algorithm": "decoupled",
            "inner_steps": 10,
            "outer_steps": OUTER,
            "fragments": 1,
            "overlap_steps": 2,
            "quorum": quorum,
            "grace_window": 0.0,
            "bits": 16,
        },
        "island": [
            {"name": f"l{i}", "step_time_s": 0.05, "bandwidth_gbps": 1.0} for i in range(learners)
        ],
    }
    plan = make_run_plan(from_dict(document, overrides=TINY))
    made = Syncer(plan, FakeStore(), tmp_path)
    made.clock = Clock()
    for island, learner in made.learners.items():
        learner.incarnation, learner.present = f"i{island}", True
    return made


def report(made: Syncer, island: int, outer_step: int) -> None:
    """Learner ``island`` reports fragment 0 of ``outer_step`` with a zero pseudo-gradient."""
    values = made.fragments[0].flat.numel()
    data = to_bytes(encode(torch.zeros(made.fragments[0].padded), made.bits))
    made.store.set(key("up", island, f"i{island}", outer_step, 0), data)
    made.report(
        {
            "island": island,
            "incarnation": f"i{island}",
            "seq": outer_step,
            "pieces": 1,
            "outer_step": outer_step,
            "fragment": 0,
            "values": values,
            "tokens": 10,
            "steps": 10,
            "slack_s": 1.0,
        }
    )


def answered(made: Syncer, island: int) -> list[int]:
    """The outer steps learner ``island`` has had a global fragment back for, in order."""
    return [
        unpack(message)[0]["outer_step"]
        for message in made.store.queues.get(key("to", island, f"i{island}"), [])
    ]


def test_a_quorum_of_two_of_three_merges_without_the_straggler_and_answers_it_late(tmp_path):
    made = syncer(tmp_path, 3, 2)
    report(made, 0, 0)
    assert (
        answered(made, 0) == [] and made.deadline == {}
    )  # one report: below the quorum, no window
    report(made, 1, 0)
    assert 0 in made.deadline  # the quorum: the window (0 s) starts
    made.merge(0)  # as the loop does once the window is over
    assert answered(made, 0) == answered(made, 1) == [0]
    report(made, 2, 0)  # the straggler's round 0: merged already
    assert answered(made, 2) == [0] and made.counts["late_reports"] == 1
    assert made.counts["merges"] == 1 and len(made.late[0]) == 1  # it joins the next merge
    report(made, 0, 1)
    report(made, 1, 1)
    made.merge(0)
    assert made.counts["merges"] == 2 and made.late[0] == []


def test_once_the_others_are_done_the_straggler_is_merged_below_the_quorum(tmp_path):
    made = syncer(tmp_path, 3, 3)
    for outer in range(OUTER - 1):  # lockstep: K = M = 3, each round merged once all three report
        for island in range(3):
            report(made, island, outer)
    report(made, 0, OUTER - 1)
    report(made, 1, OUTER - 1)  # round 2 has two reports of three
    assert made.counts["merges"] == 2 and answered(made, 0) == [0, 1]
    made.learners[2].present = False  # the third is gone: both learners left have a report waiting
    made.consider_all()
    assert answered(made, 0) == answered(made, 1) == [0, 1, 2]
    assert made.counts["merges"] == 3 and made.counts["merges_below_quorum"] == 1


def test_a_learner_whose_last_report_is_answered_is_not_waited_for(tmp_path):
    made = syncer(tmp_path, 2, 2)
    made.learners[0].outer_done = OUTER  # its last report was answered: it sends no more
    report(made, 1, OUTER - 1)
    assert answered(made, 1) == [OUTER - 1] and made.counts["merges_below_quorum"] == 1


@pytest.mark.parametrize("quorum", [1, 2])
def test_late_reports_left_at_the_end_go_into_the_final_model(tmp_path, quorum):
    made = syncer(tmp_path, 2, quorum)
    made.open_round[0] = OUTER  # every round merged without learner 1
    made.learners[0].outer_done = OUTER
    report(made, 1, OUTER - 1)  # late, and its last: nobody is left to report
    assert answered(made, 1) == [OUTER - 1]
    assert made.late[0] == [] and made.counts["merges"] == 1
    assert made.counts["merges_below_quorum"] == (1 if quorum == 2 else 0)
