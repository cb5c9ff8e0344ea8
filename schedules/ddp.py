"""DDP: one blocking all-reduce of the full gradient after every step.

``backward_overlap`` = f lets the all-reduce start when a fraction f of the step's compute remains
(gradient bucketing during the backward pass), so a step takes max(step, (1 - f) * step + work + comm),
work being the exchange work on the gradient (``network.exchange_cpu_s_per_value`` x parameters).
"""

from __future__ import annotations

from collections.abc import Iterator

from .base import GRADIENT, Schedule, SyncStep


class DDP(Schedule):
    name = "ddp"
    label = "DDP"
    exchanged = GRADIENT
    reads = ("backward_overlap",)

    def sync_steps(self, schedule, first_outer: int = 0) -> Iterator[SyncStep]:
        overlap = schedule.backward_overlap
        for step in range(first_outer, schedule.outer_steps):
            yield SyncStep(
                outer_step=step, fragment=0, launch_step=step + 1 - overlap, apply_step=step + 1
            )

    def period_steps(self, schedule) -> int:
        """Inner steps per outer step: one."""
        return 1
