"""Optimizer offload (``island.offload = "optimizer"``, ``scenarios/offload.py`` and ``memory.py``): a
70B model on 8 x 80 GB is admitted once its optimizer lives in host memory, refused without it and on
one 24 GB GPU, the host memory checked where given, and a derived step time grows by the offload's
time, each figure worked out here by hand."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest
from helpers.docs_text import DOCS, code_blocks, command_examples
from helpers.scenarios import make_scenario
from hypothesis import given
from hypothesis import strategies as st

from islands.cli import main
from islands.scenarios import ScenarioError, load
from islands.scenarios.accelerators import HOST_LINK_GB_PER_S, MEMORY_GB, PEAK_BF16_FLOPS
from islands.scenarios.offload import offload_step_s
from islands.trainer.kinds import make_run_plan

H100_PEAK, H100_LINK_BYTES_PER_S = (
    989e12,
    64e9,
)  # datasheet: dense bf16; PCIe Gen5 128 GB/s both ways
EIGHT_H100: dict[str, Any] = {
    "name": "70b-on-h100s",
    "model": {"parameters": 70e9, "bytes_per_param": 2, "tokens_per_step": 1e6},
    "schedule": {"algorithm": "diloco", "inner_steps": 100, "outer_steps": 3},
    "island": [
        {"name": name, "gpu": "H100", "gpus": 8, "mfu": 0.4, "bandwidth_gbps": 10.0}
        for name in ("us", "eu")
    ],
}
OFFLOAD = ["island.*.offload=optimizer", "island.*.host_optimizer_params_per_s=2e9"]
DDP = ["schedule.algorithm=ddp"]
# Per parameter in bf16 with AdamW: weights 2 B stay on the accelerators; the host keeps the gradients
# 2 B, the fp32 master copy 4 B and the two moments 8 B; DiLoCo with Nesterov adds its fp32 global copy
# 4 B and its momentum 4 B there too.
WEIGHTS_BYTES = 2
HOST_BYTES_DDP = 2 + 4 + 8
HOST_BYTES_DILOCO = HOST_BYTES_DDP + 4 + 4


def seventy_b(overrides: list[str], document: dict[str, Any] = EIGHT_H100) -> Any:
    return make_scenario(overrides, copy.deepcopy(document))


def refusal(overrides: list[str], document: dict[str, Any] = EIGHT_H100) -> ScenarioError:
    with pytest.raises(ScenarioError) as caught:
        seventy_b(overrides, document)
    assert "\n" not in str(caught.value)
    return caught.value


@pytest.mark.parametrize(
    ("schedule", "state_bytes"), [(DDP, 2 + 2 + 4 + 8), ([], 2 + 2 + 4 + 8 + 4 + 4)]
)
def test_70b_on_8_x_80_gb_is_refused_without_offload_and_admitted_with_it(schedule, state_bytes):
    need_gb = 70e9 * state_bytes / 8 / 1e9  # DDP 140 GB, DiLoCo 210 GB per H100 of 80 GB
    error = refusal(schedule)
    assert error.key == "island.0.gpus"
    assert (
        f"it needs {need_gb:g} GB per accelerator (7e+10 parameters x {state_bytes} B of weights, "
        "gradients and optimizer state, sharded over 8 accelerators) and one accelerator has 80 GB "
        f"(H100, from its datasheet); give gpus >= {math.ceil(need_gb * 8 / 80)} (FSDP shards the "
        'state over them), offload = "optimizer" (17.5 GB of weights per accelerator), or a '
        "smaller model"
    ) in error.rule
    assert 70e9 * WEIGHTS_BYTES / 8 / 1e9 == 17.5 <= MEMORY_GB["H100"]
    assert seventy_b(schedule + OFFLOAD).worker_count == 2


def test_70b_on_one_24_gb_gpu_is_refused_even_with_offload():
    """The weights alone, 70e9 x 2 B = 140 GB, outgrow one RTX 4090 of 24 GB: six of them would hold it."""
    error = refusal(["island.*.gpu=RTX4090", "island.*.gpus=1", *OFFLOAD])
    assert error.key == "island.0.gpus"
    assert error.rule == (
        "a replica of island 'us' does not fit: it needs 140 GB per accelerator (7e+10 parameters "
        'x 2 B of weights, on 1 accelerator; offload = "optimizer" keeps the rest in host memory) '
        "and one accelerator has 24 GB (RTX4090, from its datasheet); give gpus >= 6 (FSDP shards "
        "the weights over them), or a smaller model (activations not counted: see docs/limits.md)"
    )
    assert math.ceil(140 / 24) == 6


def test_the_host_memory_holds_the_offloaded_state_outer_state_included():
    """DDP offloads 70e9 x 14 B = 980 GB, DiLoCo 70e9 x 22 B = 1,540 GB: a worker of 1,000 GB of host
    memory holds DDP's, not DiLoCo's; 2,048 GB (a DGX H100's 2 TB) holds both."""
    assert 70e9 * HOST_BYTES_DDP / 1e9 == 980 and 70e9 * HOST_BYTES_DILOCO / 1e9 == 1540
    assert seventy_b([*DDP, *OFFLOAD, "island.*.host_memory_gb=1000"]).worker_count == 2
    assert seventy_b([*OFFLOAD, "island.*.host_memory_gb=2048"]).worker_count == 2
    error = refusal([*OFFLOAD, "island.0.host_memory_gb=2048", "island.1.host_memory_gb=1000"])
    assert error.key == "island.1.host_memory_gb"
    assert error.rule == (
        "the offloaded state of a replica of island 'eu' does not fit its host: it needs 1540 GB "
        "(7e+10 parameters x 22 B of gradients and optimizer state, the weights staying on the "
        "accelerators) and the worker's hosts have 1000 GB; give a worker with more host memory, "
        "or a smaller model"
    )


@pytest.mark.parametrize(
    ("overrides", "host_bytes"),
    [
        (DDP, 2 + 4 + 8),  # gradients, fp32 master copy, AdamW's moments
        ([*DDP, "trainer.inner_optimizer=sgd"], 2 + 4),  # plain SGD keeps no moments
        (["trainer.outer_optimizer=adamw"], 2 + 4 + 8 + 4 + 8),  # the outer AdamW's two moments
        (["schedule.algorithm=eager"], 2 + 4 + 8 + 4 + 4 + 4),  # and Eager's own last delta
        (["schedule.algorithm=decoupled"], 2 + 4 + 8 + 4),  # a learner's global copy only
    ],
)
def test_the_host_keeps_every_byte_but_the_weights(overrides, host_bytes):
    error = refusal([*overrides, *OFFLOAD, "island.*.host_memory_gb=1"])
    assert (
        f"it needs {70e9 * host_bytes / 1e9:g} GB (7e+10 parameters x {host_bytes} B" in error.rule
    )


def test_the_paper_trained_13b_on_one_32_gb_v100_and_so_does_the_check():
    """ZeRO-Offload (section 6.2.1) trained 13B parameters on one 32 GB V100: its 26 GB of fp16 weights
    fit; gradients on the accelerator as well (52 GB) would not, which is why they go to the host."""
    paper: dict[str, Any] = {
        "name": "zero-offload-13b",
        "model": {"parameters": 13e9, "bytes_per_param": 2},
        "schedule": {"algorithm": "ddp", "outer_steps": 3},
        "island": [{"name": "v100", "replicas": 2, "step_time_s": 30.0, "bandwidth_gbps": 100.0}],
    }
    assert 13e9 * 2 / 1e9 == 26 <= 32 < 13e9 * (2 + 2) / 1e9
    assert seventy_b(["island.0.memory_gb=32", "island.0.offload=optimizer"], paper).islands
    error = refusal(["island.0.memory_gb=32"], paper)
    assert "it needs 208 GB per accelerator" in error.rule  # 13e9 x 16 B without offload


def compute_s(tokens_per_step: float) -> float:
    """6 x 70e9 x tokens / (8 x 989 TFLOP/s x 0.4), the step's compute without offload."""
    return 6 * 70e9 * tokens_per_step / (8 * H100_PEAK * 0.4)


def test_a_derived_step_adds_the_hosts_optimizer_step_where_it_outlasts_the_copy_up():
    """1e6 tokens: 132.7 s of compute. Each H100 copies 70e9 x 2 B / 8 = 17.5 GB each way at 64 GB/s,
    0.273 s: down hidden by the backward pass (88.5 s), up within the host's step of 70e9 / 2e9 =
    35 s, which shows whole."""
    shard_s = 70e9 * 2 / 8 / H100_LINK_BYTES_PER_S
    assert shard_s == pytest.approx(0.2734375) and 4 / 6 * compute_s(1e6) > shard_s
    expected = compute_s(1e6) + 70e9 / 2e9
    for schedule in (DDP, []):
        islands = seventy_b(schedule + OFFLOAD).islands
        assert [island.step_time_s for island in islands] == pytest.approx(
            [expected] * 2, rel=1e-12
        )
    assert expected == pytest.approx(167.7098, rel=1e-6)


def test_a_slow_host_link_shows_past_the_backward_pass_and_the_hosts_step():
    """1e4 tokens: 1.327 s of compute, 0.885 s of it backward. At 1 GB/s a shard takes 17.5 s each way:
    down shows 17.5 - 0.885 s, up the 17.5 s that outlast the host's step of 70e9 / 1e12 = 0.07 s."""
    compute = compute_s(1e4)
    shard_s = 70e9 * 2 / 8 / 1e9
    expected = compute + (shard_s - 4 / 6 * compute) + max(0.07, shard_s)
    scenario = seventy_b(
        [
            "model.tokens_per_step=1e4",
            "island.*.offload=optimizer",
            "island.*.host_optimizer_params_per_s=1e12",
            "island.*.host_link_gb_per_s=1",
        ]
    )
    assert scenario.islands[0].step_time_s == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(1.327 + 16.615 + 17.5, abs=1e-3)


@given(
    parameters=st.floats(1, 1e14),
    bytes_per_param=st.sampled_from((1, 2, 4)),
    gpus=st.integers(1, 10_000),
    compute=st.floats(1e-6, 1e5),
    link=st.floats(1e6, 1e13),
    rate=st.floats(1e3, 1e16),
)
def test_the_offload_costs_at_least_the_hosts_step_and_the_copy_up_and_at_most_all_three(
    parameters, bytes_per_param, gpus, compute, link, rate
):
    shard_s = parameters * bytes_per_param / gpus / link
    added = offload_step_s(parameters, bytes_per_param, gpus, compute, link, rate)
    assert added >= max(parameters / rate, shard_s) * (1 - 1e-12)
    assert added <= (parameters / rate + 2 * shard_s) * (1 + 1e-12)


def test_a_given_step_time_is_measured_and_gains_nothing():
    measured = copy.deepcopy(EIGHT_H100)
    for island in measured["island"]:
        del island["gpu"], island["mfu"]
        island.update(step_time_s=170.0, memory_gb=80.0, offload="optimizer")
    assert [island.step_time_s for island in seventy_b([], measured).islands] == [170.0, 170.0]
    error = refusal(["island.0.host_optimizer_params_per_s=2e9"], measured)
    assert error.key == "island.0.host_optimizer_params_per_s"
    assert error.rule.startswith("has no effect beside step_time_s: a given step time is measured")
    error = refusal(["island.1.host_link_gb_per_s=64"], measured)
    assert error.key == "island.1.host_link_gb_per_s"


def test_keys_that_do_nothing_are_refused():
    error = refusal(["island.*.gpus=32", "island.0.host_memory_gb=2048"])  # 52.5 GB per H100
    assert error.key == "island.0.host_memory_gb"
    assert error.rule.startswith('has no effect without offload = "optimizer"')
    bare = make_scenario(["island.0.offload=optimizer", "island.0.host_memory_gb=1000"])
    assert bare.worker_count == 4  # the host memory is something to check
    with pytest.raises(ScenarioError, match=r"island.0.offload: has no effect here: the step time"):
        make_scenario(["island.0.offload=optimizer"])  # a given step time and no memory known


def test_a_derived_step_needs_the_hosts_rate_and_a_host_link():
    error = refusal(["island.*.offload=optimizer"])
    assert error.key == "island.0.host_optimizer_params_per_s"
    assert "no datasheet gives it: time optimizer.step() on the host" in error.rule
    b200 = ["island.*.gpu=B200", *OFFLOAD]
    error = refusal(b200)
    assert error.key == "island.0.host_link_gb_per_s"
    assert "no datasheet figure for the host link of 'B200'" in error.rule
    assert seventy_b([*b200, "island.*.host_link_gb_per_s=64"]).islands[0].step_time_s == (
        pytest.approx(6 * 70e9 * 1e6 / (8 * 2.25e15 * 0.4) + 35, rel=1e-12)
    )


def test_the_host_link_table_cites_accelerators_of_the_table():
    assert set(HOST_LINK_GB_PER_S) <= set(PEAK_BF16_FLOPS)
    assert {"B200", "GB200"}.isdisjoint(HOST_LINK_GB_PER_S)  # no plain datasheet figure: the user's
    assert (HOST_LINK_GB_PER_S["H100"], HOST_LINK_GB_PER_S["A100"]) == (64, 32)


BAD_VALUES = {
    "offload": st.sampled_from(["cpu", "Optimizer", "", "nvme", 1, 1.5, True, ["optimizer"]]),
    "host_memory_gb": st.sampled_from(
        [0, -1.0, math.nan, math.inf, -math.inf, 1e10, 10**400, "big", True, [1]]
    ),
    "host_link_gb_per_s": st.sampled_from(
        [0, -64.0, math.nan, math.inf, 1e5, 10**400, "pcie", False, {"gbps": 1}]
    ),
    "host_optimizer_params_per_s": st.sampled_from(
        [0, -1e9, math.nan, math.inf, 1e17, 10**400, "fast", True, []]
    ),
}


@given(key=st.sampled_from(sorted(BAD_VALUES)), data=st.data())
def test_a_bad_value_of_an_offload_key_is_one_line_naming_it(key, data):
    value = data.draw(BAD_VALUES[key])
    document = copy.deepcopy(EIGHT_H100)
    for island in document["island"]:
        island.update(offload="optimizer", host_optimizer_params_per_s=2e9)
    document["island"][1][key] = value
    with pytest.raises(ScenarioError) as caught:
        make_scenario([], document)
    assert caught.value.key == f"island.1.{key}"
    assert "\n" not in str(caught.value)


def test_a_paced_run_waits_out_the_same_derived_step_time():
    """``islands train`` with trainer.pace_islands pads each step to the island's step time: the one
    the simulator plays, the offload's time in it."""
    scenario = seventy_b([*OFFLOAD, "trainer.pace_islands=true"])
    plan = make_run_plan(scenario)
    assert (
        plan.pace_s(0)
        == scenario.islands[0].step_time_s
        == pytest.approx(compute_s(1e6) + 35, rel=1e-12)
    )


PAGE = DOCS / "how-to" / "offload.md"


def test_the_how_to_pages_example_prints_what_the_page_shows(tmp_path, monkeypatch, capsys):
    """docs/how-to/offload.md: its scenario, saved as the page says, and every command it shows on it."""
    text = PAGE.read_text()
    toml = next(block for block in code_blocks(text) if block.startswith('name = "70b-two-dgx"'))
    (tmp_path / "70b.toml").write_text(toml)
    monkeypatch.chdir(tmp_path)
    examples = [e for e in command_examples(text) if e.args[:2] == ("simulate", "70b.toml")]
    assert len(examples) == 4
    for example in examples:
        code = main(list(example.args))
        out, err = capsys.readouterr()
        if example.error:
            assert (code, err.strip()) == (2, example.error)
        else:
            assert (code, out.rstrip("\n").splitlines()) == (0, [*example.shown])


def test_the_how_to_pages_arithmetic(tmp_path):
    """132.7 s of compute, 17.5 GB shards at 64 GB/s (0.27 s, hidden in 88.5 s of backward), 70 s of
    host step: 202.7 s a step, 202,709.8 s for 1,000; 44.2 s on 24 H100s without offload."""
    text = PAGE.read_text()
    toml = next(block for block in code_blocks(text) if block.startswith('name = "70b-two-dgx"'))
    compute = compute_s(1e6)
    assert (round(compute, 1), round(4 / 6 * compute, 1)) == (132.7, 88.5)
    assert round(70e9 * 2 / 8 / H100_LINK_BYTES_PER_S, 2) == 0.27
    step = compute + 70e9 / 1e9
    path = tmp_path / "70b.toml"
    path.write_text(toml)
    scenario = load(path)
    assert [island.step_time_s for island in scenario.islands] == pytest.approx([step] * 2)
    assert (round(step, 1), round(1000 * step, 1)) == (202.7, 202709.8)
    assert round(compute * 8 / 24, 1) == 44.2
    for shown in ("132.7 + 70 = 202.7 s", "202,709.8 s", "44.2 s", "88.5 s", "0.27 s"):
        assert shown in " ".join(text.split())
