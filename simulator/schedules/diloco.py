"""DiLoCo (Douillard et al. 2023, arXiv:2311.08105): H inner steps, then a blocking all-reduce of the
pseudo-gradient (the whole model, parameters * bits / 8 bytes), then the next interval."""

from __future__ import annotations

from typing import Iterator

from islands.scenarios import Scenario

from .base import SyncPoint


def sync_points(scenario: Scenario) -> Iterator[SyncPoint]:
    h = scenario.schedule.inner_steps
    for outer in range(scenario.schedule.outer_steps):
        boundary = (outer + 1) * h
        yield SyncPoint(outer_step=outer, fragment=0, launch_step=boundary, apply_step=boundary,
                        payload_bytes=scenario.payload_bytes,
                        values=scenario.model.parameters)


def period_steps(scenario: Scenario) -> int:
    """Inner steps per outer step: H."""
    return scenario.schedule.inner_steps


def transfers_may_overlap(scenario: Scenario) -> bool:
    return False
