"""Decoupled DiLoCo's merge rules (``trainer/decoupled/merge.py``), computed by hand."""

import math

import pytest
import torch

from islands.trainer.decoupled.merge import merge, radial_directional, token_weight, weighted_mean


def test_token_weight_is_tokens_times_tokens_per_step():
    assert token_weight(1000, 10) == 1000 * 100
    assert token_weight(2000, 10) == 4 * token_weight(
        1000, 10
    )  # twice the steps: four times the weight
    assert token_weight(0, 0) == 0.0  # a learner that did nothing weighs zero


def test_weighted_mean_by_hand():
    merged = weighted_mean([torch.tensor([1.0, 0.0]), torch.tensor([0.0, 4.0])], [3.0, 1.0])
    assert torch.allclose(merged, torch.tensor([0.75, 1.0]))


def test_radial_directional_keeps_the_norm_of_orthogonal_deltas():
    """Four orthogonal deltas of norm 2: the mean has norm 2 / sqrt(4) = 1, RDA keeps 2."""
    deltas = [2.0 * torch.eye(4)[i] for i in range(4)]
    weights = [1.0] * 4
    assert torch.linalg.vector_norm(weighted_mean(deltas, weights)).item() == pytest.approx(1.0)
    merged = radial_directional(deltas, weights)
    assert torch.linalg.vector_norm(merged).item() == pytest.approx(2.0)
    assert torch.allclose(merged, torch.full((4,), 1.0))  # along the mean direction


def test_radial_directional_weighs_norms_and_directions():
    """Norms 1 and 3 weighted 3:1: radius (3*1 + 1*3)/4 = 1.5; directions x and y weighted 3:1."""
    merged = radial_directional([torch.tensor([1.0, 0.0]), torch.tensor([0.0, 3.0])], [3.0, 1.0])
    direction = torch.tensor([3.0, 1.0]) / math.sqrt(10)
    assert torch.allclose(merged, 1.5 * direction)


def test_opposite_deltas_fall_back_to_the_mean():
    merged = radial_directional([torch.tensor([1.0, 0.0]), torch.tensor([-1.0, 0.0])], [1.0, 1.0])
    assert torch.equal(merged, torch.zeros(2))


def test_rda_per_tensor_with_embeddings_averaged():
    """A fragment of two tensors (2 values each): the first is an embedding (mean), the second RDA."""
    a, b = torch.tensor([2.0, 0.0, 2.0, 0.0]), torch.tensor([0.0, 2.0, 0.0, 2.0])
    merged = merge([a, b], [1.0, 1.0], "radial_directional", [2, 2], [True, False])
    assert torch.allclose(merged[:2], torch.tensor([1.0, 1.0]))  # mean: norm sqrt(2)
    assert torch.allclose(merged[2:], torch.full((2,), math.sqrt(2)))  # RDA: norm 2
    assert torch.equal(
        merge([a, b], [1.0, 1.0], "mean", [2, 2], [True, False]), weighted_mean([a, b], [1.0, 1.0])
    )
