"""A replica must fit its accelerators (``scenarios/memory.py``): refused in one line with the memory
it needs, worked out here by hand; admitted once FSDP shards it over enough of them."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from helpers.scenarios import make_scenario
from hypothesis import given
from hypothesis import strategies as st

from islands.scenarios import ScenarioError
from islands.scenarios.accelerators import MEMORY_GB, PEAK_BF16_FLOPS
from islands.scenarios.memory import (
    bytes_per_param,
    inner_bytes_per_param,
    needed_gb,
    outer_bytes_per_param,
)
from islands.scenarios.trainer_keys import trainer_spec
from islands.schedules import SCHEDULES

SEVENTY_B: dict[str, Any] = {
    "name": "70b",
    "model": {"parameters": 70e9, "bytes_per_param": 2, "tokens_per_step": 1e6},
    "schedule": {"algorithm": "diloco", "inner_steps": 100, "outer_steps": 3},
    "island": [
        {"name": name, "gpu": "RTX4090", "gpus": 1, "mfu": 0.4, "bandwidth_gbps": 1.0}
        for name in ("home", "office")
    ],
}
# bf16 weights 2 B + gradients 2 B + fp32 master 4 B + AdamW's m 4 B and v 4 B = 16 B per parameter
MIXED_PRECISION_ADAMW_BYTES = 2 + 2 + 4 + 4 + 4
# DiLoCo with Nesterov adds the fp32 global copy 4 B and the outer momentum 4 B
DILOCO_BYTES = MIXED_PRECISION_ADAMW_BYTES + 4 + 4


def seventy_b(overrides: list[str]) -> Any:
    return make_scenario(overrides, copy.deepcopy(SEVENTY_B))


def test_a_70b_model_on_one_24_gb_gpu_is_refused_with_the_memory_it_needs():
    need_gb = 70e9 * DILOCO_BYTES / 1e9  # 1,680 GB on one RTX 4090 of 24 GB
    assert need_gb == 1680
    with pytest.raises(ScenarioError) as caught:
        seventy_b([])
    error = caught.value
    assert error.key == "island.0.gpus"
    assert error.rule.startswith(
        f"a replica of island 'home' does not fit: it needs {need_gb:g} GB per accelerator "
        "(7e+10 parameters x 24 B of weights, gradients and optimizer state, on 1 "
        "accelerator) and one accelerator has 24 GB (RTX4090, from its datasheet); give "
        "gpus >= 70 (FSDP shards the state over them)"
    )
    assert "\n" not in str(error)


def test_the_70b_model_on_8_x_80_gb_needs_more_than_they_hold_and_fits_on_enough_of_them():
    """8 x 80 GB hold 640 GB: the model's mixed-precision AdamW state alone is 70e9 x 16 B = 1,120 GB,
    140 GB on each of 8 accelerators under DDP. FSDP over 14 H100s (80 GB each) holds it; DiLoCo's
    outer state (8 B more per parameter) needs 21."""
    eight = ["island.*.gpu=H100", "island.*.gpus=8", "schedule.algorithm=ddp"]
    with pytest.raises(
        ScenarioError,
        match=r"it needs 140 GB per accelerator .* sharded over 8 accelerators\) and "
        r"one accelerator has 80 GB \(H100, from its datasheet\); give gpus >= 14",
    ):
        seventy_b(eight)
    assert 70e9 * MIXED_PRECISION_ADAMW_BYTES / 14 / 1e9 == 80
    assert (
        seventy_b(["island.*.gpu=H100", "island.*.gpus=14", "schedule.algorithm=ddp"]).worker_count
        == 2
    )
    assert 70e9 * DILOCO_BYTES / 21 / 1e9 == 80
    assert seventy_b(["island.*.gpu=H100", "island.*.gpus=21"]).worker_count == 2
    with pytest.raises(ScenarioError, match=r"it needs 84 GB per accelerator"):  # 1,680 GB / 20
        seventy_b(["island.*.gpu=H100", "island.*.gpus=20"])


def test_memory_gb_gives_or_overrides_the_accelerators_memory():
    # 1,680 GB over 8 accelerators = 210 GB each: a B200 (180 GB) is refused, one said to hold 256 GB admitted
    with pytest.raises(
        ScenarioError, match=r"needs 210 GB .* has 180 GB \(B200, from its datasheet\)"
    ):
        seventy_b(["island.*.gpu=B200", "island.*.gpus=8"])
    assert (
        seventy_b(["island.*.gpu=B200", "island.*.gpus=8", "island.*.memory_gb=256"]).worker_count
        == 2
    )
    assert (
        seventy_b(["island.*.gpu=MI325X", "island.*.gpus=8"]).worker_count == 2
    )  # 256 GB on its datasheet
    with pytest.raises(
        ScenarioError,
        match=r"island.1.gpus: a replica of island 'office' .* has 200 GB "
        r"\(island.memory_gb\)",
    ):
        seventy_b(["island.*.gpu=MI325X", "island.*.gpus=8", "island.1.memory_gb=200"])


def test_a_step_time_alone_or_an_added_accelerator_has_no_memory_to_check():
    """1e9 parameters under DiLoCo need 24 GB: with step_time_s and no gpu (the helper's scenario), or
    an accelerator added in [accelerators], nothing is known to compare with; memory_gb gives it."""
    assert make_scenario().worker_count == 4
    assert make_scenario(["island.0.memory_gb=24"]).worker_count == 4
    with pytest.raises(ScenarioError, match=r"island.0.gpus: .* needs 24 GB .* has 23 GB"):
        make_scenario(["island.0.memory_gb=23"])
    added = copy.deepcopy(SEVENTY_B)
    added["accelerators"] = {"X1": 1e15}
    for island in added["island"]:
        island["gpu"] = "X1"
    assert make_scenario([], added).worker_count == 2


def test_the_outer_state_by_schedule_and_optimizer():
    adamw, nesterov = trainer_spec(outer_optimizer="adamw"), trainer_spec()
    plain_sgd = trainer_spec(outer_optimizer="nesterov", outer_momentum=0.0)
    assert outer_bytes_per_param(SCHEDULES["ddp"], nesterov) == 0  # no outer step
    assert outer_bytes_per_param(SCHEDULES["diloco"], nesterov) == 4 + 4  # global copy, momentum
    assert outer_bytes_per_param(SCHEDULES["streaming"], adamw) == 4 + 8  # global copy, two moments
    assert outer_bytes_per_param(SCHEDULES["diloco"], trainer_spec(outer_optimizer="average")) == 4
    assert (
        outer_bytes_per_param(SCHEDULES["diloco"], plain_sgd) == 4
    )  # torch keeps no buffer at momentum 0
    assert (
        outer_bytes_per_param(SCHEDULES["eager"], nesterov) == 4 + 4 + 4
    )  # and its own last delta
    assert (
        outer_bytes_per_param(SCHEDULES["decoupled"], adamw) == 4
    )  # the syncer (a CPU process) steps


def test_the_inner_state_by_precision_and_optimizer():
    assert inner_bytes_per_param(2, "adamw") == 16  # bf16: 2 + 2 + fp32 master 4 + moments 4 + 4
    assert inner_bytes_per_param(4, "adamw") == 16  # fp32: 4 + 4 + moments 4 + 4, no master copy
    assert inner_bytes_per_param(8, "adamw") == 32  # fp64: 8 + 8 + moments in fp64, 8 + 8
    assert inner_bytes_per_param(1, "adamw") == 1 + 1 + 4 + 8  # fp8 weights with an fp32 master
    assert inner_bytes_per_param(2, "sgd") == 2 + 2 + 4  # plain SGD keeps no moments
    with pytest.raises(
        ScenarioError, match=r"needs 8 GB per accelerator \(1e\+09 parameters x 8 B"
    ):
        make_scenario(
            ["trainer.inner_optimizer=sgd", "schedule.algorithm=ddp", "island.0.memory_gb=7.9"]
        )


@given(
    parameters=st.floats(1, 1e14),
    more=st.floats(1, 1e6),
    gpus=st.integers(1, 1_000_000),
    precision=st.sampled_from((0.5, 1, 2, 4, 8)),
    algorithm=st.sampled_from(sorted(SCHEDULES)),
    optimizer=st.sampled_from(("nesterov", "average", "adamw")),
)
def test_the_memory_grows_with_the_parameters_and_is_divided_by_the_gpus(
    parameters, more, gpus, precision, algorithm, optimizer
):
    per_param = bytes_per_param(
        precision, SCHEDULES[algorithm], trainer_spec(outer_optimizer=optimizer)
    )
    assert (
        per_param >= 2 * precision + 8
    )  # weights, gradients and AdamW's two fp32 moments at least
    one = needed_gb(parameters, per_param, 1)
    assert needed_gb(parameters * more, per_param, 1) >= one
    assert needed_gb(parameters, per_param, gpus) == pytest.approx(one / gpus, rel=1e-12)


def test_the_table_gives_every_accelerator_a_peak_and_a_memory():
    assert set(MEMORY_GB) == set(PEAK_BF16_FLOPS)
    assert {"B200", "GB200", "MI325X"} <= set(MEMORY_GB)
    assert (MEMORY_GB["B200"], MEMORY_GB["GB200"], MEMORY_GB["MI325X"]) == (180, 186, 256)
