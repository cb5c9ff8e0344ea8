"""DiLoCo (Douillard et al. 2023, arXiv:2311.08105): H inner steps, then a blocking all-reduce of the
pseudo-gradient (the whole model), an outer step, and the next interval.

``backward_overlap`` = f starts the all-reduce when a fraction f of the H-th step's compute remains: a
layer's pseudo-gradient is final once the backward pass has produced its last gradient and the inner
optimizer has stepped it, so an implementation that steps each layer during the backward pass (and
sends it at once) hides up to the backward pass, 2/3 of a step by Kaplan et al.'s 2ND forward + 4ND
backward. The Streaming DiLoCo paper's simulated bandwidth tables match this
(docs/explanation/published-tables.md)."""

from __future__ import annotations

from collections.abc import Iterator

from .base import Schedule, SyncStep
from .compression import COMPRESSIONS


class DiLoCo(Schedule):
    name = "diloco"
    label = "DiLoCo"
    barriers = ("wait", "deadline", "adaptive")
    reads = ("inner_steps", "backward_overlap")
    compressions: tuple[str, ...] = COMPRESSIONS

    def sync_steps(self, schedule, first_outer: int = 0) -> Iterator[SyncStep]:
        h, lead = schedule.inner_steps, schedule.backward_overlap
        for outer in range(first_outer, schedule.outer_steps):
            boundary = (outer + 1) * h
            yield SyncStep(
                outer_step=outer, fragment=0, launch_step=boundary - lead, apply_step=boundary
            )

    def period_steps(self, schedule) -> int:
        """Inner steps per outer step: H."""
        return schedule.inner_steps
