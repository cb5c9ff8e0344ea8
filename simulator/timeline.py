"""A worker's launches and applies as flat tuples, made once per schedule shape.

``workers.sync_actions`` gives the order in which a worker meets its schedule's launches and
applies; a run of one simulated worker (``Lockstep.play_one``, ``one_learner.py``) needs nothing of
an action but which exchange it is, and how many inner steps it computes first. Those depend on the
schedule's keys alone, not on the physics: a planner prices one (schedule, H, P) at three wire
precisions and a search at a dozen bandwidths, so ``timeline_of`` computes them once per schedule
and ``ScheduleSpec`` (its ``bits`` aside: they price a payload, ``Schedule.sync_points``, and place
no exchange) and keeps the last few. The tuples are made from ``sync_actions`` itself, so a run
played from them meets its actions in the event model's order.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING

from .workers import LAUNCH, sync_actions

if TYPE_CHECKING:
    from islands.scenarios.model import ScheduleSpec
    from islands.schedules import Schedule

SHAPES_KEPT = 32  # timelines kept: a planner's candidates come by H, then bits, then fragments


@dataclass(frozen=True)
class Timeline:
    """One worker's run from outer step 0, in the order it meets its actions.

    ``actions[k]`` is launch i as ``i`` and its apply as ``~i`` (that is, -1 - i); before action k
    the worker computes ``steps[k]`` inner steps (0.0: none), the target's distance from its position
    as the engine computes it. Launch i carries ``fragments[i]`` of ``outer_steps[i]``.
    ``merged_steps`` is the inner steps merged by the applies, summed in the engine's order."""

    actions: tuple[int, ...]
    steps: tuple[float, ...]
    fragments: tuple[int, ...]
    outer_steps: tuple[int, ...]
    merged_steps: float


def timeline_of(schedule: Schedule, spec: ScheduleSpec) -> Timeline:
    """``schedule``'s timeline under ``spec`` (shared by every ``bits``)."""
    return shaped(schedule, replace(spec, bits=0) if spec.bits else spec)


@lru_cache(maxsize=SHAPES_KEPT)
def shaped(schedule: Schedule, spec: ScheduleSpec) -> Timeline:
    actions: list[int] = []
    steps: list[float] = []
    fragments: list[int] = []
    outer_steps: list[int] = []
    launched: dict[tuple[int, int], int] = {}
    position = applied_position = merged_steps = 0.0
    for action, point in sync_actions(schedule.sync_steps(spec, 0)):
        target = point.launch_step if action is LAUNCH else point.apply_step
        steps.append(target - position if target > position else 0.0)
        position = target if target > position else position
        key = (point.outer_step, point.fragment)
        if action is LAUNCH:
            launched[key] = len(fragments)
            actions.append(len(fragments))
            fragments.append(point.fragment)
            outer_steps.append(point.outer_step)
        else:
            actions.append(~launched.pop(key))
            merged_steps += position - applied_position
            applied_position = position
    return Timeline(tuple(actions), tuple(steps), tuple(fragments), tuple(outer_steps), merged_steps)
