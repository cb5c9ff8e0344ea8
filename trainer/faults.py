"""Deterministic deaths for the fault-tolerance tests: a process SIGKILLs itself at a named point.

``ISLANDS_KILL_AT = "POINT:COUNT:ISLAND"`` makes island ISLAND's process kill itself (SIGKILL: no
cleanup, no exception, as a crashed machine) the COUNT-th time (1-based) it passes POINT. Points:
``checkpoint-write`` (its checkpoint file is written to the temporary name, not yet renamed) and
``all-reduce`` (the reduce-scatter half of a cross-island average is done, the all-gather is not).
Unset, every check is one dictionary look-up.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from typing import Any

import torch

from .comm import Group

VARIABLE = "ISLANDS_KILL_AT"
passes: Counter = Counter()


def kill_point(point: str, island: int) -> None:
    """SIGKILL this process if ``ISLANDS_KILL_AT`` names this point, this island and this pass."""
    setting = os.environ.get(VARIABLE)
    if not setting:
        return
    name, count, target = setting.split(":")
    if name != point or int(target) != island:
        return
    passes[point] += 1
    if passes[point] == int(count):
        os.kill(os.getpid(), signal.SIGKILL)


class KillableGroup:
    """A cross-island group that passes ``all-reduce`` after each all-to-all (the reduce-scatter)."""

    def __init__(self, inner: Group, island: int):
        self.inner = inner
        self.island = island
        self.rank = inner.rank
        self.size = inner.size

    def all_to_all(self, chunks: list[torch.Tensor]) -> list[torch.Tensor]:
        received = self.inner.all_to_all(chunks)
        kill_point("all-reduce", self.island)
        return received

    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        return self.inner.all_gather(tensor)

    def all_reduce_sum_(self, tensor: torch.Tensor) -> None:
        self.inner.all_reduce_sum_(tensor)

    def broadcast_(self, tensor: torch.Tensor, src: int = 0) -> None:
        self.inner.broadcast_(tensor, src)

    def all_gather_object(self, value: Any) -> list[Any]:
        return self.inner.all_gather_object(value)

    def barrier(self) -> None:
        self.inner.barrier()


def killable(group: Group, island: int) -> Group:
    """``group`` wrapped for the ``all-reduce`` point when ``ISLANDS_KILL_AT`` is set, else itself."""
    return KillableGroup(group, island) if os.environ.get(VARIABLE) else group
