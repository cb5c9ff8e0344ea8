"""The launcher's island processes and the scenario's events played against the run's clock.

An elastic run and a Decoupled DiLoCo run both start each island's processes through a ``Fleet``: a
``leave`` event SIGKILLs the island's processes at once (no cleanup, as a crashed machine); a ``join``
is served by processes started ahead of time with a launch spec's ``join_at_s`` (at launch for an island with
``present = false``, right after the kill for a returning one), which wait for the run's clock to read
the event's time. An island lives and dies whole: when one of its processes dies the others are killed.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable

from ..config import RunPlan


class Fleet:
    """The launcher's island processes (each island's, in local rank order) and the events still to
    play. ``start(rank, join_at_s, incarnation)`` starts one process."""

    def __init__(self, plan: RunPlan, start: Callable[[int, float | None, int], subprocess.Popen]):
        self.plan = plan
        self.start = start
        self.events = plan.events()
        self.running: dict[int, list[subprocess.Popen]] = {}
        self.starts: dict[int, int] = {}
        self.clock_seen = False
        present = set(plan.initial_members())
        for island in range(plan.islands):
            join_at = None if island in present else self.next_join(island, -1.0)
            if island in present or join_at is not None:
                self.start_island(island, join_at)

    def start_island(self, island: int, join_at: float | None) -> None:
        incarnation = self.starts.get(island, 0)
        self.starts[island] = incarnation + 1
        r = self.plan.ranks_per_island
        self.running[island] = [
            self.start(rank, join_at, incarnation) for rank in range(island * r, island * r + r)
        ]

    def kill_island(self, island: int) -> None:
        for child in self.running.pop(island):
            if child.poll() is None:
                child.send_signal(signal.SIGKILL)
            child.wait()

    def next_join(self, island: int, after_s: float) -> float | None:
        return next(
            (
                at
                for at, index, kind in self.events
                if index == island and kind == "join" and at > after_s
            ),
            None,
        )

    def play(self, now_s: float) -> None:
        """Kill the islands whose leave is due, starting the processes of their next join. Events before
        the first reading of the clock belong to the run a ``--resume`` continues: they are skipped."""
        if not self.clock_seen:
            self.clock_seen = True
            self.events = [event for event in self.events if event[0] >= now_s]
        while self.events and self.events[0][0] <= now_s:
            at_s, island, kind = self.events.pop(0)
            children = self.running.get(island)
            if (
                kind != "leave"
                or children is None
                or all(child.poll() is not None for child in children)
            ):
                continue
            self.kill_island(island)
            print(
                f"islands train: island {island} killed (SIGKILL) at {now_s:.2f} s (event at {at_s:g} s)",
                flush=True,
            )
            join_at = self.next_join(island, at_s)
            if join_at is not None:
                self.start_island(island, join_at)

    def status(self) -> int | None:
        """The first failing exit code, 0 once every process is done, None while some run. An island
        one of whose processes was killed by a signal died, as islands may: its other processes are
        killed too, and the others carry on without it."""
        for island, children in list(self.running.items()):
            dead = [
                child.returncode
                for child in children
                if child.poll() is not None and child.returncode < 0
            ]
            if dead:
                print(f"islands train: island {island} died (signal {-dead[0]})", flush=True)
                self.kill_island(island)
        codes = [child.poll() for children in self.running.values() for child in children]
        failed = [code for code in codes if code not in (None, 0)]
        if failed:
            return failed[0]
        return 0 if all(code == 0 for code in codes) else None
