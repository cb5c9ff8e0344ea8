"""What a chunk goes through before its top-k: nothing, or DeMo's orthonormal DCT-II.

DeMo (Peng et al. 2024, arXiv:2411.19870; bloc97/DeMo ``demo.py``, Psyche ``distro.rs``) cuts each
weight matrix into blocks of up to 64 x 64, takes every block's 2-D DCT-II with the orthonormal
scaling, sends the top-k coefficients of each block by magnitude, and its receivers apply the
inverse DCT to what they gathered; the sender takes its own sent coefficients, transformed back, out
of its momentum. islands cuts the flat fragment into chunks (``schedules/compression.py``), so here a
chunk of n values is an r x c block of consecutive values (``dct_block``: 64 runs of 64 values at
n = 4096), which is DeMo's block where a tensor's rows are 64 values long.

The orthonormal DCT-II of length N is the matrix

    B[k, j] = s_k cos(pi (2 j + 1) k / (2 N)),   s_0 = sqrt(1 / N),  s_k = sqrt(2 / N) (k > 0),

with B B^T = I, and a block X (r x c) has the coefficients Y = B_r X B_c^T, whose inverse is
X = B_r^T Y B_c: two matrix products each way, r + c multiply-adds per value. The bases are cached per
size and device (``basis``), computed in float64 and kept as fp32.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from functools import lru_cache
from typing import Protocol

import torch

from islands.schedules.compression import DCT, NONE, ChunkShape, TopK, dct_block

CACHED_BASES = 8  # sizes kept: a fragment's full chunks and its tail, for a few fragments


@lru_cache(maxsize=CACHED_BASES)
def basis(size: int, device: torch.device) -> torch.Tensor:
    """The orthonormal DCT-II matrix of length ``size`` (fp32 on ``device``): row k is frequency k."""
    j = torch.arange(size, dtype=torch.float64)
    k = j.unsqueeze(1)
    scale = torch.full((size, 1), math.sqrt(2 / size), dtype=torch.float64)
    scale[0] = math.sqrt(1 / size)
    return (scale * torch.cos(math.pi * (2 * j + 1) * k / (2 * size))).float().to(device)


class Transform(Protocol):
    """Maps a flat vector, chunk by chunk, to the numbers whose top-k travel, and back."""

    def forward(self, flat: torch.Tensor) -> torch.Tensor: ...

    def inverse(self, coefficients: torch.Tensor) -> torch.Tensor: ...


class Identity:
    """The values themselves travel (``schedule.transform = "none"``)."""

    def forward(self, flat: torch.Tensor) -> torch.Tensor:
        return flat

    def inverse(self, coefficients: torch.Tensor) -> torch.Tensor:
        return coefficients


class ChunkDCT:
    """The 2-D DCT-II of every chunk of a flat vector, each seen as its ``dct_block``."""

    def __init__(self, runs: list[tuple[ChunkShape, int]]):
        """``runs``: the vector's chunks as (shape, how many), in order (``TopK.chunks``)."""
        self.runs = runs

    def blocks(
        self, flat: torch.Tensor
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """Each run of equal chunks as (count x rows x columns view, B_rows, B_columns)."""
        start = 0
        for shape, count in self.runs:
            rows, columns = dct_block(shape.size)
            end = start + shape.size * count
            view = flat[start:end].view(count, rows, columns)
            yield view, basis(rows, flat.device), basis(columns, flat.device)
            start = end

    def forward(self, flat: torch.Tensor) -> torch.Tensor:
        """Every chunk's coefficients Y = B_r X B_c^T, flattened row by row in its place."""
        parts = [b_rows @ x @ b_columns.T for x, b_rows, b_columns in self.blocks(flat)]
        return torch.cat([part.flatten() for part in parts])

    def inverse(self, coefficients: torch.Tensor) -> torch.Tensor:
        """Every chunk's values X = B_r^T Y B_c from its coefficients."""
        parts = [b_rows.T @ y @ b_columns for y, b_rows, b_columns in self.blocks(coefficients)]
        return torch.cat([part.flatten() for part in parts])


def transform_of(layout: TopK, values: int) -> Transform:
    """The layout's transform of a vector of ``values`` values."""
    if layout.transform == NONE:
        return Identity()
    assert layout.transform == DCT, layout.transform
    return ChunkDCT(layout.chunks(values))
