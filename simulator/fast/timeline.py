"""A worker's launches and applies as flat tuples, made once per schedule shape.

``workers.sync_actions`` gives the order in which a worker meets its schedule's launches and
applies; a run of one simulated worker (``Lockstep.play_one``, ``one_learner.py``) needs nothing of
an action but which exchange it is, and how many inner steps it computes first. Those depend on the
schedule's keys alone, not on the physics: a planner prices one (schedule, H, P) at three wire
precisions and a search at a dozen bandwidths, so ``timeline_of`` computes them once per schedule
and ``ScheduleSpec`` (its ``bits`` aside: they price a payload, ``Schedule.sync_points``, and place
no exchange) and keeps the last ones, up to a number of actions in all. The tuples are made from
``sync_actions`` itself, so a run played from them meets its actions in the event model's order.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..workers import LAUNCH, sync_actions

if TYPE_CHECKING:
    from islands.scenarios.model import ScheduleSpec
    from islands.schedules import Schedule

# Actions of the timelines kept, all together (an action costs about 90 bytes: 40 MB at most): a
# planner's largest (DDP at 10,000 steps, Eager at H = 10 and P = 10) have 20,000 each.
KEPT_ACTIONS = 400_000


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


class Kept:
    """The timelines made last, up to ``KEPT_ACTIONS`` actions in all (a larger one is not kept)."""

    def __init__(self, actions: int):
        self.actions = actions
        self.timelines: OrderedDict[tuple, Timeline] = OrderedDict()
        self.held = 0  # their actions

    def get(self, key: tuple) -> Timeline | None:
        timeline = self.timelines.get(key)
        if timeline is not None:
            self.timelines.move_to_end(key)
        return timeline

    def keep(self, key: tuple, timeline: Timeline) -> None:
        if len(timeline.actions) > self.actions:
            return
        self.timelines[key] = timeline
        self.held += len(timeline.actions)
        while self.held > self.actions:
            self.held -= len(self.timelines.popitem(last=False)[1].actions)


KEPT = Kept(KEPT_ACTIONS)


def timeline_of(schedule: Schedule, spec: ScheduleSpec) -> Timeline:
    """``schedule``'s timeline under ``spec`` (shared by every ``bits``)."""
    key = (schedule, replace(spec, bits=0) if spec.bits else spec)
    timeline = KEPT.get(key)
    if timeline is None:
        timeline = shaped(*key)
        KEPT.keep(key, timeline)
    return timeline


def shaped(schedule: Schedule, spec: ScheduleSpec) -> Timeline:
    """The timeline, made from ``sync_actions``."""
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
    return Timeline(
        tuple(actions), tuple(steps), tuple(fragments), tuple(outer_steps), merged_steps
    )
