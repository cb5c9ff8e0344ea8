"""The narrow collective interface the trainer talks to (``comm.py`` holds its implementations)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import torch


class Group(Protocol):
    rank: int
    size: int

    def all_to_all(self, chunks: list[torch.Tensor]) -> list[torch.Tensor]:
        """Send ``chunks[j]`` to member j; return what each member j sent to this one."""

    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """Every member's ``tensor`` (same shape on all members), in member order."""

    def gather_from(
        self, tensor: torch.Tensor, senders: Sequence[int]
    ) -> list[torch.Tensor | None]:
        """Every member of ``senders`` sends its ``tensor`` (same shape on all) to every other member
        at once; in member order, the senders' tensors (this member's own where it is one) and None
        for the others (a direct gather, ``network.gather = "direct"``)."""

    def all_reduce_sum_(self, tensor: torch.Tensor) -> None:
        """Replace ``tensor`` by its sum over the members."""

    def broadcast_(self, tensor: torch.Tensor, src: int = 0) -> None:
        """Replace ``tensor`` by member ``src``'s."""

    def all_gather_object(self, value: Any) -> list[Any]:
        """Every member's picklable ``value``, in member order."""

    def barrier(self) -> None:
        """Return once every member has called it."""


class Summing(Protocol):
    """What averages the gradients inside an island each step: a group's sum and size (an elastic
    island's ranks, ``runtime.island.IslandRanks``, offer these alone)."""

    size: int

    def all_reduce_sum_(self, tensor: torch.Tensor) -> None:
        """Replace ``tensor`` by its sum over the members."""
