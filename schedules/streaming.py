"""Streaming DiLoCo (Douillard et al. 2025, arXiv:2501.18512).

The model is split into P fragments of strided layer groups (``Schedule.fragment_of_layer``). Inside
every H-step period fragment p is due at step floor((p + 1) * H / P) of the period (staggered, so the
fragments' syncs are spread as evenly as whole steps allow; the paper's 10B set-up has H = 100 and
P = 16: 6 or 7 steps apart). Its all-reduce is launched tau = ``overlap_steps`` steps before
it is due, training continues meanwhile, and the worker waits at the due step only if the fragment
has not arrived (the torchft convention: ``fragment_sync_delay`` = tau). With tau = 0 each
fragment's sync blocks; tau < H / P, so a fragment is always applied before its next launch.
``backward_overlap`` = f launches it a further fraction f of a step early, during the backward pass
of the step that finishes its pseudo-gradient (as ``diloco.py`` explains). After
the outer step the worker mixes the global fragment into its local one with ``trainer.fragment_alpha``.
"""

from __future__ import annotations

from collections.abc import Iterator

from .base import Schedule, SyncStep, fragments_fit_period
from .compression import COMPRESSIONS


class Streaming(Schedule):
    name = "streaming"
    label = "Streaming DiLoCo"
    reads: tuple[str, ...] = ("inner_steps", "fragments", "overlap_steps", "backward_overlap")
    compressions: tuple[str, ...] = COMPRESSIONS

    def sync_steps(self, schedule, first_outer: int = 0) -> Iterator[SyncStep]:
        h, p = schedule.inner_steps, schedule.fragments
        lead = schedule.overlap_steps + schedule.backward_overlap
        for outer in range(first_outer, schedule.outer_steps):
            for fragment in range(p):
                due = outer * h + (fragment + 1) * h // p
                yield SyncStep(
                    outer_step=outer, fragment=fragment, launch_step=due - lead, apply_step=due
                )

    def period_steps(self, schedule) -> int:
        """Inner steps per outer step: H."""
        return schedule.inner_steps

    def fragments(self, schedule) -> int:
        return schedule.fragments

    def merge_alpha(self, scenario) -> float:
        return scenario.trainer.fragment_alpha

    def transfers_may_overlap(self, schedule) -> bool:
        return schedule.overlap_steps > 0 or schedule.fragments > 1

    def check(self, schedule) -> tuple[str, str] | None:
        return fragments_fit_period(schedule) or self.check_overlap(schedule)

    def check_overlap(self, schedule) -> tuple[str, str] | None:
        """tau < floor(H / P), the shortest gap between two due steps: a fragment is applied before
        the next one is launched."""
        window = schedule.inner_steps // schedule.fragments
        if schedule.overlap_steps >= window:
            return (
                "schedule.overlap_steps",
                f"must be below inner_steps / fragments = {window} (got {schedule.overlap_steps})",
            )
        return None
