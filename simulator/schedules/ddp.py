"""DDP: one blocking all-reduce of the full gradient after every step.

``backward_overlap`` = f lets the all-reduce start when a fraction f of the step's compute remains
(gradient bucketing during the backward pass), so a step takes max(step, (1 - f) * step + work + comm),
work being the exchange work on the gradient (``network.exchange_cpu_s_per_value`` x parameters).
"""

from __future__ import annotations

from typing import Iterator

from islands.scenarios import Scenario

from .base import SyncPoint


def sync_points(scenario: Scenario) -> Iterator[SyncPoint]:
    overlap = scenario.schedule.backward_overlap
    for step in range(scenario.schedule.outer_steps):
        yield SyncPoint(outer_step=step, fragment=0, launch_step=step + 1 - overlap, apply_step=step + 1,
                        payload_bytes=scenario.payload_bytes,
                        values=scenario.model.parameters)


def period_steps(scenario: Scenario) -> int:
    """Inner steps per outer step: one."""
    return 1


def transfers_may_overlap(scenario: Scenario) -> bool:
    return False
