"""Schedules by algorithm name. Each module provides ``sync_points`` (every collective, in order),
``period_steps`` (inner steps per outer step) and ``transfers_may_overlap`` (whether the flow-level
network model is needed)."""

from types import ModuleType

from . import ddp, diloco, streaming
from .base import SyncPoint

SCHEDULES: dict[str, ModuleType] = {"ddp": ddp, "diloco": diloco, "streaming": streaming}

__all__ = ["SCHEDULES", "SyncPoint"]
