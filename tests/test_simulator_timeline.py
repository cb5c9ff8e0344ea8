"""A schedule's ``Timeline`` (``simulator/fast/timeline.py``) holds the worker's launches and applies in
``sync_actions``' order, with the steps computed before each, and one timeline serves every wire
precision."""

from __future__ import annotations

import pytest

from islands.scenarios import load
from islands.schedules import schedule_of
from islands.simulator.fast.timeline import Kept, Timeline, timeline_of
from islands.simulator.workers import LAUNCH, sync_actions

SHAPES = {
    "ddp, backward overlap": [
        "schedule.algorithm=ddp",
        "schedule.outer_steps=30",
        "schedule.backward_overlap=0.5",
    ],
    "diloco": ["schedule.outer_steps=4"],
    "streaming, P=16 not dividing H": [
        "schedule.algorithm=streaming",
        "schedule.inner_steps=100",
        "schedule.fragments=16",
        "schedule.overlap_steps=3",
        "schedule.outer_steps=3",
    ],
    "eager, backward overlap": [
        "schedule.algorithm=eager",
        "schedule.inner_steps=20",
        "schedule.fragments=5",
        "schedule.outer_steps=6",
        "schedule.backward_overlap=0.25",
    ],
    "decoupled, tau past the next launch": [
        "schedule.algorithm=decoupled",
        "schedule.inner_steps=24",
        "schedule.fragments=24",
        "schedule.overlap_steps=2",
        "schedule.outer_steps=3",
    ],
}


@pytest.mark.parametrize("case", SHAPES)
def test_a_timeline_is_the_workers_order_of_launches_and_applies(case):
    scenario = load("worked-example", SHAPES[case])
    schedule = schedule_of(scenario)
    timeline = timeline_of(schedule, scenario.schedule)
    expected = list(sync_actions(schedule.sync_points(scenario)))
    assert len(timeline.actions) == len(expected) == 2 * len(timeline.fragments)
    position = 0.0
    for action, steps, (kind, point) in zip(timeline.actions, timeline.steps, expected):
        launch = action if action >= 0 else ~action
        assert (action >= 0) == (kind is LAUNCH)
        assert (timeline.outer_steps[launch], timeline.fragments[launch]) == (
            point.outer_step,
            point.fragment,
        )
        target = point.launch_step if kind is LAUNCH else point.apply_step
        assert steps == max(target - position, 0.0)
        position = max(position, target)
    # every step is computed once and merged by the last apply: H x outer steps (DDP: one per step)
    assert sum(timeline.steps) == pytest.approx(schedule.total_steps(scenario.schedule))
    assert timeline.merged_steps == pytest.approx(schedule.total_steps(scenario.schedule))


def test_one_timeline_serves_every_wire_precision_and_bandwidth():
    made = [
        timeline_of(schedule_of(s), s.schedule)
        for s in (
            load(
                "worked-example",
                [
                    "schedule.algorithm=eager",
                    f"schedule.bits={bits}",
                    f"island.0.bandwidth_gbps={gbps}",
                ],
            )
            for bits in (4, 8, 16)
            for gbps in (0.5, 2.0)
        )
    ]
    assert all(timeline is made[0] for timeline in made)  # made once, kept
    other = load("worked-example", ["schedule.algorithm=eager", "schedule.fragments=5"])
    assert timeline_of(schedule_of(other), other.schedule) != made[0]


def test_the_timelines_kept_hold_at_most_their_actions_the_latest_first():
    def timeline(launches: int) -> Timeline:
        return Timeline(
            tuple(range(launches)) + tuple(~i for i in range(launches)),
            (0.0,) * 2 * launches,
            (0,) * launches,
            tuple(range(launches)),
            0.0,
        )

    kept = Kept(actions=10)
    kept.keep("a", timeline(2))
    kept.keep("b", timeline(3))
    assert kept.get("a") is not None  # used: now the latest
    kept.keep("c", timeline(2))  # 14 actions: the least recently used goes
    assert kept.get("b") is None and kept.get("a") is not None and kept.get("c") is not None
    assert kept.held == 8
    kept.keep("d", timeline(6))  # larger than all it may hold: not kept
    assert kept.get("d") is None and kept.held == 8
