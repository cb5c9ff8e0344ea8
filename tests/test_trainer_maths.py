"""The trainer's maths on tiny hand-computed tensors: pseudo-gradients, outer optimizers, merge,
fragments and the learning-rate schedule (in-process, no torch.distributed)."""

import math

import pytest
import torch
from torch import nn

from islands.scenarios.trainer_keys import trainer_spec
from islands.schedules import SCHEDULES
from islands.schedules.layout import layer_of
from islands.trainer.core.loop import learning_rate
from islands.trainer.core.model import GPT, GPTConfig
from islands.trainer.core.outer import Fragment, split_fragments


def one_tensor_fragment(values, **spec):
    param = nn.Parameter(torch.tensor(values))
    return Fragment(0, [param], trainer_spec(**spec)), param


def move_local(param, values):
    with torch.no_grad():
        param.copy_(torch.tensor(values))


def test_pseudo_gradient_is_global_minus_local():
    fragment, param = one_tensor_fragment([1.0, 2.0])
    move_local(param, [0.5, 2.5])
    assert fragment.pseudo_gradient().tolist() == [0.5, -0.5]


def test_nesterov_outer_steps_match_hand_computation():
    # b1 = d1; theta1 = theta0 - 0.7 (d1 + 0.9 b1) = [1, 2] - 0.7 * 1.9 * [0.5, -0.5] = [0.335, 2.665]
    fragment, param = one_tensor_fragment([1.0, 2.0], outer_lr=0.7, outer_momentum=0.9)
    move_local(param, [0.5, 2.5])
    fragment.apply(fragment.pseudo_gradient(), alpha=0.0)
    assert fragment.global_params[0].tolist() == pytest.approx([0.335, 2.665])
    assert param.tolist() == pytest.approx([0.335, 2.665])
    # d2 = [0.1, -0.2]; b2 = 0.9 b1 + d2 = [0.55, -0.65]; theta2 = theta1 - 0.7 (d2 + 0.9 b2)
    move_local(param, [0.335 - 0.1, 2.665 + 0.2])
    fragment.apply(fragment.pseudo_gradient(), alpha=0.0)
    assert fragment.global_params[0].tolist() == pytest.approx(
        [0.335 - 0.7 * 0.595, 2.665 + 0.7 * 0.785]
    )


def test_plain_averaging_lands_on_the_mean_of_the_local_weights():
    fragment, param = one_tensor_fragment([1.0, 2.0], outer_optimizer="average", outer_lr=0.7)
    mean_delta = (
        torch.tensor([1.0, 0.0]) + torch.tensor([0.0, -2.0])
    ) / 2  # locals [0, 2] and [1, 4]
    fragment.apply(mean_delta, alpha=0.0)
    assert fragment.global_params[0].tolist() == [0.5, 3.0]


def test_alpha_mixes_local_and_merged_global():
    fragment, param = one_tensor_fragment([1.0, 2.0], outer_optimizer="average")
    move_local(param, [3.0, 2.0])
    fragment.apply(torch.tensor([0.0, 0.0]), alpha=0.25)  # global stays [1, 2]
    assert param.tolist() == [0.25 * 3 + 0.75 * 1, 2.0]
    assert fragment.applied == 1


def test_outer_adamw_first_step_moves_each_weight_by_lr():
    # Adam's first step is lr * m_hat / (sqrt(v_hat) + eps) = lr * sign(g) for |g| >> eps
    fragment, param = one_tensor_fragment([1.0, 2.0], outer_optimizer="adamw", outer_lr=0.1)
    fragment.apply(torch.tensor([0.5, -3.0]), alpha=0.0)
    assert fragment.global_params[0].tolist() == pytest.approx([0.9, 2.1], abs=1e-6)


def test_fragments_are_strided_layer_groups():
    streaming = SCHEDULES["streaming"]

    def fragment_of(name, n_layer, fragments):
        return streaming.fragment_of_layer(layer_of(name, n_layer), fragments)

    assert [fragment_of(f"blocks.{i}.mlp.fc.weight", 4, 2) for i in range(4)] == [0, 1, 0, 1]
    assert fragment_of("wte.weight", 4, 2) == 0 and fragment_of("wpe.weight", 4, 2) == 0
    assert fragment_of("ln_f.weight", 4, 2) == 1 and fragment_of("ln_f.weight", 3, 2) == 0
    model = GPT(GPTConfig(block_size=8, n_layer=4, n_head=1, n_embd=8))
    groups = split_fragments(model, 4, 2, streaming)
    assert sum(p.numel() for group in groups for p in group) == sum(
        p.numel() for p in model.parameters()
    )
    block = sum(p.numel() for p in model.blocks[0].parameters())
    assert (
        sum(p.numel() for p in groups[1]) == 2 * block + 2 * 8
    )  # blocks 1 and 3, ln_f weight and bias


def test_learning_rate_warmup_then_cosine():
    assert learning_rate(0, 100, 1.0, 10, 0.1) == pytest.approx(0.1)
    assert learning_rate(9, 100, 1.0, 10, 0.1) == pytest.approx(1.0)
    assert learning_rate(55, 100, 1.0, 10, 0.1) == pytest.approx(
        0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi / 2))
    )
    assert learning_rate(100, 100, 1.0, 10, 0.1) == pytest.approx(0.1)
