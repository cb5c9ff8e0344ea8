"""Who is in a run: the workers the engine runs and their states, the members that the next
collective expects, and the workers whose processes run.

``members`` changes only here (``admit``, ``forget``): a worker is a member from the start, or from
when a joiner is admitted (``churn.py``, ``syncer.py``), until the others notice its departure.
"""

from __future__ import annotations

import math

from islands.scenarios import Scenario, Worker

from .compute import step_clock
from .workers import WorkerState


class Fleet:
    """The workers of one run: every worker, the ones simulated (an island's lead may stand for its
    identical replicas: ``replicas.py``), their states, the members and the running."""

    def __init__(
        self,
        workers: list[Worker],
        groups: list[tuple[Worker, int]],
        steps_scales: list[float],
        seed: int,
    ):
        self.workers = workers
        self.replica_counts = {worker.rank: count for worker, count in groups}
        self.grouped = len(groups) < len(workers)  # some worker stands for several
        self.states = [
            WorkerState(worker, step_clock(worker, seed), steps_scales[worker.rank], count)
            for worker, count in groups
        ]
        self.state_of = {state.worker.rank: state for state in self.states}
        self.ranks = sorted(self.state_of)  # the simulated workers' ranks, lowest first
        self.members: set[int] = set()  # the workers every new collective expects
        self.running: set[int] = set()  # the workers whose processes walk their schedule

    def admit(self, rank: int) -> None:
        """``rank`` is a member: every collective formed from now on expects it."""
        self.members.add(rank)

    def forget(self, rank: int) -> None:
        """The others noticed that ``rank`` left: no new collective expects it."""
        self.members.discard(rank)

    def present_members(self) -> list[int]:
        """The members present now, in rank order."""
        return sorted(rank for rank in self.members if self.state_of[rank].present)

    def any_present_member(self) -> bool:
        """Whether a member is present now (stops at the first)."""
        state_of = self.state_of
        return any(state_of[rank].present for rank in self.members)


def steps_scales(scenario: Scenario, workers: list[Worker]) -> list[float]:
    """Per worker, inner steps done per scheduled step: 1, or under adaptive H floor(H*slowest/own)/H."""
    if scenario.schedule.barrier != "adaptive":
        return [1.0] * len(workers)
    h = scenario.schedule.inner_steps
    slowest_s = max(worker.step_time_s for worker in workers)
    return [max(1, math.floor(h * slowest_s / worker.step_time_s + 1e-9)) / h for worker in workers]
