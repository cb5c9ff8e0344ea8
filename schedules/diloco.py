"""DiLoCo (Douillard et al. 2023, arXiv:2311.08105): H inner steps, then a blocking all-reduce of the
pseudo-gradient (the whole model), an outer step, and the next interval."""

from __future__ import annotations

from typing import Iterator

from .base import Schedule, SyncStep


class DiLoCo(Schedule):
    name = "diloco"
    label = "DiLoCo"
    barriers = ("wait", "deadline", "adaptive")
    reads = ("inner_steps",)

    def sync_steps(self, schedule, first_outer: int = 0) -> Iterator[SyncStep]:
        h = schedule.inner_steps
        for outer in range(first_outer, schedule.outer_steps):
            boundary = (outer + 1) * h
            yield SyncStep(outer_step=outer, fragment=0, launch_step=boundary, apply_step=boundary)

    def period_steps(self, schedule) -> int:
        """Inner steps per outer step: H."""
        return schedule.inner_steps
