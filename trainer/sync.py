"""Averaging across islands on a background thread, so training continues while bytes move.

An island with R ranks splits each tensor into R shares; local rank l averages share l with the
rank l of every other island (the ``cross`` group, quantised, see ``quantize.average``) and the
island's ranks then all-gather their averaged shares over the fast intra-island group. Inside an
island the ranks hold identical replicas, so no intra-island reduction is needed first.

Every exchange first meets the other islands at a one-value barrier: the time spent there is the
wait for the slowest island (``idle`` in the trace); the clock reading after it is when the
collective really started (the ``comm`` row's start).
"""

from __future__ import annotations

import math
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import torch

from .comm import Group
from .quantize import average
from .tracing import Clock


@dataclass(frozen=True)
class Exchange:
    mean: torch.Tensor
    started_s: float
    done_s: float
    sent_bytes: int


def share(x: torch.Tensor, index: int, parts: int) -> torch.Tensor:
    """Share ``index`` of ``parts`` equal shares of ``x`` (zero-padded at the end)."""
    length = math.ceil(x.numel() / parts)
    start = min(index * length, x.numel())
    piece = x[start: start + length]
    if piece.numel() == length:
        return piece
    padded = torch.zeros(length, dtype=x.dtype, device=x.device)
    padded[: piece.numel()] = piece
    return padded


class Exchanger:
    """Averages flat fp32 tensors over the islands, one at a time, on one background thread."""

    def __init__(self, cross: Group, intra: Group | None, bits: int, clock: Clock):
        self.cross = cross
        self.intra = intra
        self.bits = bits
        self.clock = clock
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="islands-sync")

    def launch(self, flat: torch.Tensor) -> Future:
        """Start averaging ``flat``; the future's result is an ``Exchange``."""
        return self.pool.submit(self.exchange, flat)

    def exchange(self, flat: torch.Tensor) -> Exchange:
        self.cross.barrier()
        started_s = self.clock.now()
        if self.intra is None:
            mean, sent = average(flat, self.cross, self.bits)
        else:
            mine, sent = average(share(flat, self.intra.rank, self.intra.size), self.cross, self.bits)
            mean = torch.cat(self.intra.all_gather(mine))[: flat.numel()]
        return Exchange(mean=mean, started_s=started_s, done_s=self.clock.now(), sent_bytes=sent)

    def close(self) -> None:
        self.pool.shutdown(wait=True)
