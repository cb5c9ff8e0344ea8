"""How Decoupled DiLoCo's syncer merges the learners' pseudo-gradients of one fragment.

Weights (Douillard et al. 2026, as the paper's token weighting is transcribed: quantity x quality):
a learner that trained c_tokens tokens in c_steps inner steps since the global fragment it started
from weighs

    w_m = c_tokens * (c_tokens / c_steps)

so a learner that did more work, or took larger batches, counts for more, and one that was down
(no steps) for nothing.

Merge rules (``trainer.aggregation``):

* ``mean``: the weighted mean sum_m w_m Delta_m / sum_m w_m;
* ``radial_directional`` (RDA): per tensor, the weighted mean norm times the direction of the
  weighted mean of unit directions,

      RDA = (sum_m w_m |v_m| / sum_m w_m) * phi(sum_m w_m phi(v_m) / sum_m w_m),  phi(x) = x / |x|, phi(0) = 0

  which keeps the merged norm at the learners' norm however many learners there are (M nearly
  orthogonal deltas of norm R would average to about R / sqrt(M)). The embeddings are merged by the
  weighted mean (their deltas are not near-orthogonal), and a tensor whose mean direction vanishes
  falls back to the mean.

Each Delta_m is the learner's own pseudo-gradient against the global fragment it held (what it
sent): the syncer adds every learner's progress to the global model as it is now, however stale the
learner's starting point.
"""

from __future__ import annotations

import torch

MEAN = "mean"
RADIAL_DIRECTIONAL = "radial_directional"


def token_weight(tokens: float, steps: float) -> float:
    """w = tokens x tokens per step; zero for a learner that did no step."""
    return tokens * tokens / steps if steps > 0 else 0.0


def weighted_mean(deltas: list[torch.Tensor], weights: list[float]) -> torch.Tensor:
    total = sum(weights)
    merged = torch.zeros_like(deltas[0])
    for delta, weight in zip(deltas, weights):
        merged.add_(delta, alpha=weight / total)
    return merged


def unit(x: torch.Tensor) -> torch.Tensor:
    norm = torch.linalg.vector_norm(x.double()).item()
    return x / norm if norm > 0 else torch.zeros_like(x)


def radial_directional(deltas: list[torch.Tensor], weights: list[float]) -> torch.Tensor:
    """RDA of one tensor's deltas (the formula above)."""
    total = sum(weights)
    radius = (
        sum(w * torch.linalg.vector_norm(d.double()).item() for d, w in zip(deltas, weights))
        / total
    )
    direction = unit(weighted_mean([unit(d) for d in deltas], weights))
    if not direction.any():
        return weighted_mean(deltas, weights)
    return direction * radius


def merge(
    deltas: list[torch.Tensor],
    weights: list[float],
    rule: str,
    tensor_sizes: list[int],
    embeddings: list[bool],
) -> torch.Tensor:
    """One fragment's merged pseudo-gradient. ``deltas`` are flat over the fragment's tensors, of
    ``tensor_sizes`` values each; ``embeddings`` marks the tensors RDA leaves to the mean."""
    if rule == MEAN:
        return weighted_mean(deltas, weights)
    parts = []
    for index, pieces in enumerate(zip(*(delta.split(tensor_sizes) for delta in deltas))):
        combine = weighted_mean if embeddings[index] else radial_directional
        parts.append(combine(list(pieces), weights))
    return torch.cat(parts)
