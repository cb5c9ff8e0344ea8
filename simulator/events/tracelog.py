"""The trace as the run makes it: one row per span of one activity of one worker.

A worker's current activity (``WorkerState.activity``: compute, a wait, idle or stall since some
instant) is opened with ``open`` and recorded when it ends with ``close``; spans whose ends are known
at once (a collective's comm rows, a download) are added with ``add``. A wait for a collective is
split where the collective started: ``idle`` before (others are late), ``stall`` after (``wait``).
Every row of an event run goes through this one appender.
"""

from __future__ import annotations

from collections.abc import Callable

import simpy

from islands.trace import Row

from ..workers import WorkerState


def never_started(_key: tuple[int, int]) -> float | None:
    return None


class TraceLog:
    """The rows of one run, and the closing of the workers' activities."""

    def __init__(self, env: simpy.Environment):
        self.env = env
        self.rows: list[Row] = []
        # when the collective of (outer step, fragment) started, if it has: set by the engine to its exchanges'
        self.wait_started_s: Callable[[tuple[int, int]], float | None] = never_started

    def add(
        self,
        start_s: float,
        end_s: float,
        rank: int,
        island: str,
        kind: str,
        bytes_sent: float,
        fragment: int,
        outer_step: int,
    ) -> None:
        self.rows.append(Row(start_s, end_s, rank, island, kind, bytes_sent, fragment, outer_step))

    def open(self, state: WorkerState, kind: str, fragment: int, outer_step: int) -> None:
        """The worker starts ``kind`` now."""
        state.activity = (kind, self.env.now, fragment, outer_step)

    def cancel(self, state: WorkerState) -> None:
        """The worker's wait is over and its exchange records it (it knows the wait's parts)."""
        state.activity = None

    def close(self, state: WorkerState) -> None:
        """Record the worker's current activity from its start to now, and clear it."""
        if state.activity is None:
            return
        kind, since_s, fragment, outer_step = state.activity
        state.activity = None
        now = self.env.now
        if kind == "wait":
            self.wait(
                state, since_s, self.wait_started_s((outer_step, fragment)), fragment, outer_step
            )
            return
        if now > since_s:
            self.add(
                since_s,
                now,
                state.worker.rank,
                state.worker.island,
                kind,
                0.0,
                fragment,
                outer_step,
            )
        if kind == "compute":
            state.unsynced_compute_s += now - since_s

    def wait(
        self,
        state: WorkerState,
        since_s: float,
        started_s: float | None,
        fragment: int,
        outer_step: int,
    ) -> None:
        """Waiting before the collective started is ``idle`` (others are late), after it ``stall``."""
        rank, island, now = state.worker.rank, state.worker.island, self.env.now
        boundary = now if started_s is None else min(now, max(since_s, started_s))
        if boundary > since_s:
            self.add(since_s, boundary, rank, island, "idle", 0.0, fragment, outer_step)
        if now > boundary:
            self.add(boundary, now, rank, island, "stall", 0.0, fragment, outer_step)

    def close_all(self, states: list[WorkerState]) -> None:
        """The run is over: close every present worker's activity."""
        for state in states:
            if state.present:
                self.close(state)
