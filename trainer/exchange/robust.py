"""Refusing bad contributions: screening each island's pseudo-gradient, and robust aggregation.

Screening (every sync, all aggregations): before the exchange every island shares two numbers about
its delta, whether it is finite and its L2 norm. A delta with NaN or Inf is excluded; so is one whose
norm exceeds ``norm_factor`` times the median norm of the other finite deltas (``norm_factor`` = 0
turns the norm rule off). Every island computes the same verdict from the same numbers, an excluded
island sends zeros, and the mean is taken over the accepted islands only, so the global model stays
finite whatever one island sends.

Robust aggregation (``trainer.aggregation``) for fleets that are not trusted beyond that: the
coordinate-wise median, or the trimmed mean that drops the ``trim_fraction`` largest and smallest
values of each coordinate. Both need every accepted delta in full, so they all-gather the encoded
deltas: each island sends (M-1) whole payloads instead of a ring's 2(M-1)/M.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import torch

from islands.numbers import is_finite_number

from .group import Group
from .quantize import decode, encode, padded_length

NORM_CHUNK_VALUES = 1 << 16
NOT_FINITE = "NaN or Inf in the pseudo-gradient"
JOINING = "joining: it holds no state yet and only receives the average"


@dataclass(frozen=True)
class AggregationRule:
    """``trainer.screen_norm_factor``, ``trainer.aggregation``, ``trainer.trim_fraction`` and
    ``trainer.topk_mean``."""

    norm_factor: float = 10.0
    aggregation: str = "mean"
    trim_fraction: float = 0.25
    topk_mean: str = "senders"


@dataclass(frozen=True)
class Verdict:
    """Which islands' deltas enter this round's average, and why the others do not."""

    accepted: tuple[bool, ...]
    reasons: dict[int, str]

    @property
    def count(self) -> int:
        return sum(self.accepted)


def contribution_stats(delta: torch.Tensor, contributes: bool = True) -> torch.Tensor:
    """[1 if finite else 0, L2 norm (0 when not finite), 1 if it contributes at all] as fp64, the
    numbers islands share (a joiner that has no state yet contributes nothing, ``joining.py``)."""
    if not contributes:
        return torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64, device=delta.device)
    squares = sum_of_squares(delta)
    finite = is_finite_number(squares)
    norm = math.sqrt(squares) if finite else 0.0
    return torch.tensor(
        [1.0 if finite else 0.0, norm, 1.0], dtype=torch.float64, device=delta.device
    )


def sum_of_squares(x: torch.Tensor) -> float:
    """Sum of the squares of ``x``'s values in fp64, ``NORM_CHUNK_VALUES`` at a time: no fp64 copy of
    the whole tensor (one the size of a fragment would cost fresh pages at every exchange). Not finite
    exactly when a value is not: a finite fp32 value squares to at most 1.2e77 in fp64."""
    return sum(
        chunk.double().square().sum().item()
        for chunk in x.detach().flatten().split(NORM_CHUNK_VALUES)
    )


def screen(stats: list[torch.Tensor], norm_factor: float) -> Verdict:
    """The verdict on every member's delta from everyone's ``contribution_stats``."""
    finite = [bool(s[0].item()) for s in stats]
    norms = [float(s[1].item()) for s in stats]
    contributes = [bool(s[2].item()) for s in stats]
    reasons: dict[int, str] = {}
    for member, norm in enumerate(norms):
        if not contributes[member]:
            reasons[member] = JOINING
            continue
        if not finite[member]:
            reasons[member] = NOT_FINITE
            continue
        others = [
            n
            for other, n in enumerate(norms)
            if other != member and finite[other] and contributes[other]
        ]
        if norm_factor > 0 and others and norm > norm_factor * statistics.median(others):
            reasons[member] = (
                f"norm {norm:.4g} > {norm_factor:g} x the others' median "
                f"{statistics.median(others):.4g}"
            )
    return Verdict(tuple(member not in reasons for member in range(len(stats))), reasons)


def trimmed_count(values: int, fraction: float) -> int:
    """Values dropped at each end: floor(fraction * n), leaving at least one."""
    return min(math.floor(fraction * values), (values - 1) // 2)


def combine(rows: torch.Tensor, aggregation: str, trim_fraction: float) -> torch.Tensor:
    """Coordinate-wise median (lower median for an even count) or trimmed mean of ``rows``."""
    if aggregation == "median":
        return rows.median(dim=0).values
    trim = trimmed_count(rows.shape[0], trim_fraction)
    ordered = rows.sort(dim=0).values
    return ordered[trim : rows.shape[0] - trim].mean(dim=0)


def robust_average(
    x: torch.Tensor,
    group: Group,
    bits: int,
    verdict: Verdict,
    aggregation: str,
    trim_fraction: float,
) -> tuple[torch.Tensor, int]:
    """Median or trimmed mean of the accepted members' ``x`` (all-gathered, encoded in ``bits``);
    returns (result, bytes sent)."""
    values = x.numel()
    padded = torch.zeros(padded_length(values, 1), dtype=torch.float32, device=x.device)
    padded[:values] = x.flatten()
    gathered = group.all_gather(encode(padded, bits))
    rows = torch.stack(
        [
            decode(data, bits, padded.numel())[:values]
            for member, data in enumerate(gathered)
            if verdict.accepted[member]
        ]
    )
    sent_bytes = (group.size - 1) * gathered[0].numel()
    return combine(rows, aggregation, trim_fraction).view_as(x), sent_bytes
