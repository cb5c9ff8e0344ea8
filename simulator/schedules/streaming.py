"""Streaming DiLoCo (Douillard et al. 2025, arXiv:2501.18512).

The model is split into P equal fragments. Inside every H-step period fragment p is due at step
(p + 1) * H / P of the period (staggered, so the fragments' syncs are spread evenly). Its all-reduce
is launched tau = ``overlap_steps`` steps before it is due, training continues meanwhile, and the
worker waits at the due step only if the fragment has not arrived (the torchft convention:
``fragment_sync_delay`` = tau). With tau = 0 each fragment's sync blocks; the validator requires
tau < H / P, so a fragment is always applied before its next launch.
"""

from __future__ import annotations

from typing import Iterator

from islands.scenarios import Scenario

from .base import SyncPoint


def sync_points(scenario: Scenario) -> Iterator[SyncPoint]:
    schedule = scenario.schedule
    h, p, tau = schedule.inner_steps, schedule.fragments, schedule.overlap_steps
    fragment_bytes, fragment_values = scenario.payload_bytes / p, scenario.model.parameters / p
    for outer in range(schedule.outer_steps):
        for fragment in range(p):
            due = outer * h + (fragment + 1) * h // p
            yield SyncPoint(outer_step=outer, fragment=fragment, launch_step=due - tau, apply_step=due,
                            payload_bytes=fragment_bytes, values=fragment_values)


def period_steps(scenario: Scenario) -> int:
    """Inner steps per outer step: H."""
    return scenario.schedule.inner_steps


def transfers_may_overlap(scenario: Scenario) -> bool:
    return scenario.schedule.overlap_steps > 0 or scenario.schedule.fragments > 1
