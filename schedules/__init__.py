"""Schedules, declared once for both executors (``base.py`` says what a declaration holds).

``SCHEDULES`` is the registry: ``schedule.algorithm`` names one of its entries. Adding a schedule is
one new module here and one entry below; nothing else in islands names an algorithm."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import (
    ADOPT,
    ALL_GATHER,
    ALL_REDUCE,
    AVERAGE,
    EAGER,
    GRADIENT,
    PSEUDO_GRADIENT,
    SYNCER,
    Schedule,
    SyncPoint,
    SyncStep,
    collective_of,
)
from .ddp import DDP
from .decoupled import Decoupled
from .diloco import DiLoCo
from .eager import Eager
from .streaming import Streaming

if TYPE_CHECKING:
    from islands.scenarios.model import Scenario

SCHEDULES: dict[str, Schedule] = {
    schedule.name: schedule for schedule in (DDP(), DiLoCo(), Streaming(), Eager(), Decoupled())
}


def schedule_of(scenario: Scenario) -> Schedule:
    """The declaration of the scenario's ``schedule.algorithm``."""
    return SCHEDULES[scenario.schedule.algorithm]


def switch_to(algorithm: str) -> tuple[str, ...]:
    """The ``--set`` overrides that run a scenario as ``algorithm``: what only some schedules read, and
    the loader refuses on the others, goes back to its default where ``algorithm`` does not read it:
    a quorum to 1, the ``[syncer]`` of Decoupled DiLoCo to an empty table under a coupled schedule."""
    declared = SCHEDULES[algorithm]
    quorum = () if "quorum" in declared.reads else ("schedule.quorum=1",)
    syncer = ("syncer={}",) if declared.coupled else ()
    return (f"schedule.algorithm={algorithm}", *quorum, *syncer)


__all__ = [
    "ADOPT",
    "ALL_GATHER",
    "ALL_REDUCE",
    "AVERAGE",
    "DDP",
    "EAGER",
    "GRADIENT",
    "PSEUDO_GRADIENT",
    "SCHEDULES",
    "SYNCER",
    "DiLoCo",
    "Decoupled",
    "Eager",
    "Schedule",
    "Streaming",
    "SyncPoint",
    "SyncStep",
    "collective_of",
    "schedule_of",
    "switch_to",
]
