"""How far a run has got: its completed outer steps (the one writer of them) and its end.

A coupled schedule completes an outer step when the collective of its last fragment is done
(``outer_step_done``); Decoupled DiLoCo's learners each keep their own count and the run's is the
laggard's (``learner_done``); a non-elastic restart rolls it back to the last checkpoint
(``roll_back``). The run ends (``finished``) once every outer step is complete and no worker runs;
a run that ends otherwise says why in one line (``endings.py``).
"""

from __future__ import annotations

from collections.abc import Iterable

import simpy


class Progress:
    """The completed outer steps of one run, each learner's own, and the event that ends the run."""

    def __init__(self, env: simpy.Environment, synced_outer_steps: int, ranks: Iterable[int]):
        self.env = env
        self.synced_outer_steps = synced_outer_steps  # the run is done when this many are complete
        self.completed_outer = 0
        self.interval_start_s = (
            0.0  # when the last outer step completed (a deadline barrier's origin)
        )
        self.learner_outer = dict.fromkeys(
            ranks, 0
        )  # Decoupled DiLoCo: each learner's next outer step
        self.finished = env.event()

    @property
    def complete(self) -> bool:
        return self.completed_outer == self.synced_outer_steps

    @property
    def over(self) -> bool:
        """The run has ended: nothing that happens from now on counts."""
        return self.finished.triggered

    def outer_step_done(self, outer_step: int) -> None:
        """The collective of ``outer_step``'s last fragment is done: its interval starts now."""
        self.completed_outer = outer_step + 1
        self.interval_start_s = self.env.now

    def learner_done(self, rank: int, outer_step: int) -> None:
        """A learner applied the last fragment of ``outer_step``; the run's count is the laggard's."""
        self.learner_outer[rank] = outer_step + 1
        self.completed_outer = min(self.learner_outer.values())

    def roll_back(self, outer_step: int) -> None:
        """Every worker restarts from ``outer_step`` (the last checkpoint)."""
        self.completed_outer = outer_step

    def reach(self, completed_outer: int) -> None:
        """A run played without events (``lockstep.py``) completed this many."""
        self.completed_outer = completed_outer

    def finish(self) -> None:
        if not self.finished.triggered:
            self.finished.succeed()
