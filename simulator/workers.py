"""What the engine knows about each worker it runs, and the order in which a worker meets its
schedule's launches and applies (``sync_actions``)."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

import simpy

from islands.scenarios import Worker
from islands.schedules import SyncStep

from .compute import StepClock
from .network.collectives import PendingCollective

LAUNCH, APPLY = object(), object()
Step = TypeVar(
    "Step", bound=SyncStep
)  # a sync step, priced (SyncPoint: the engine's) or not (a timeline's)


class Exchange(Protocol):
    """A worker's exchange in flight: a pending collective, or a learner's report to Decoupled
    DiLoCo's syncer (``events.syncer.Report``). ``done`` fires when it is over."""

    done: simpy.Event


@dataclass(eq=False)
class WorkerState:
    """What the engine knows about one worker while it runs."""

    worker: Worker
    clock: StepClock
    steps_scale: float = 1.0  # adaptive H: this worker's inner steps per scheduled step
    count: int = 1  # the identical replicas it stands for, itself included
    present: bool = False
    process: simpy.Process | None = None
    activity: tuple[str, float, int, int] | None = None  # (kind, since_s, fragment, outer_step)
    unsynced_compute_s: float = 0.0  # compute not yet merged by a sync: lost if it departs
    position_at_apply: float = 0.0
    merged_steps: float = 0.0
    late: dict[int, PendingCollective] = field(
        default_factory=dict
    )  # deadline barrier: syncs it missed, by outer step
    exchanging: Exchange | None = None  # its latest exchange: the next one starts after it


Start = Callable[
    [WorkerState, int], None
]  # start a worker's process from an outer step (the engine's)


def sync_actions(points: Iterable[Step]) -> Iterator[tuple[object, Step]]:
    """The launches and applies of ``points`` (in launch order) in the order a worker meets them: by
    position in inner steps, a launch before an apply at the same position (a blocking sync
    launches, then waits), so an exchange stays in flight over any launches before its apply step.
    Lazy: a run's points are never all in memory."""
    due: list[tuple[float, int, Step]] = []
    for index, point in enumerate(points):
        while due and due[0][0] < point.launch_step:
            yield APPLY, heapq.heappop(due)[2]
        yield LAUNCH, point
        heapq.heappush(due, (point.apply_step, index, point))
    while due:
        yield APPLY, heapq.heappop(due)[2]
