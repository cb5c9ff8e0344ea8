"""DeMo's DCT before the top-k (``schedule.transform = "dct"``): the basis in closed form, a chunk
whose energy is in k coefficients sent exactly, error feedback keeping input = sent + residual, the
mean of gathered payloads decoded once (linearity), the same bytes as without the DCT in both
executors, and the keys refused where they do nothing. Islands run as threads of one process."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from helpers.inprocess import finish_all, global_weights, in_threads, plan_for, trainers_for
from helpers.scenarios import make_scenario
from hypothesis import given
from hypothesis import strategies as st

from islands.errors import UserError
from islands.scenarios.trainer_keys import trainer_spec
from islands.schedules import schedule_of
from islands.schedules.compression import DCT, VALUE_BITS, TopK, dct_block, payload_bytes
from islands.simulator import simulate
from islands.trainer.core.outer import Fragment
from islands.trainer.exchange.robust import Verdict
from islands.trainer.exchange.sparse import BadPayload, TopKCodec, mean_of
from islands.trainer.exchange.transform import ChunkDCT, basis

CPU = torch.device("cpu")
FP32_TOLERANCE = 1e-5  # two fp32 matrix products each way: a few ulps of the largest value


def dct_codec(chunk: int, topk: int, bits: int, values: int) -> TopKCodec:
    return TopKCodec(TopK(chunk, topk, bits, DCT), values)


# --- the basis and the block --------------------------------------------------------------------------


def test_the_dct_basis_of_two_and_four_values_in_closed_form():
    half = 1 / math.sqrt(2)
    assert torch.allclose(basis(2, CPU), torch.tensor([[half, half], [half, -half]]))
    # row k of length 4: s_k cos(pi (2j + 1) k / 8), s_0 = 1/2, s_k = 1/sqrt(2)
    a, b = math.cos(math.pi / 8) * half, math.cos(3 * math.pi / 8) * half
    expected = torch.tensor(
        [[0.5, 0.5, 0.5, 0.5], [a, b, -b, -a], [0.5, -0.5, -0.5, 0.5], [b, -a, a, -b]]
    )
    assert torch.allclose(basis(4, CPU), expected, atol=1e-7)


@pytest.mark.parametrize("size", [1, 2, 7, 64, 97, 192])
def test_the_dct_basis_is_orthonormal(size):
    b = basis(size, CPU).double()
    assert torch.allclose(b @ b.T, torch.eye(size, dtype=torch.float64), atol=1e-6)


def test_a_chunk_is_as_square_a_block_as_its_size_allows():
    assert dct_block(4096) == (64, 64)  # DeMo's 64 per dimension
    assert dct_block(640) == (20, 32)  # 25 does not divide 640; 20 is the largest divisor <= 25.3
    assert dct_block(192) == (12, 16)
    assert dct_block(97) == (1, 97)  # prime: a 1-D DCT
    assert dct_block(1) == (1, 1)


def test_a_constant_chunk_is_one_coefficient_sqrt_n_times_its_value():
    # B_r 1 B_c^T = (sqrt(r) e_0)(sqrt(c) e_0)^T: 0.5 x sqrt(64 x 64) = 32 at place 0
    transform = ChunkDCT(TopK(4096, 1, 32).chunks(4096))
    coefficients = transform.forward(torch.full((4096,), 0.5))
    assert coefficients[0].item() == pytest.approx(32.0, rel=1e-6)
    assert coefficients[1:].abs().max().item() < 1e-5


def test_the_docs_worked_example_sixteen_halves_travel_whole_in_five_bytes():
    """docs/how-to/compression.md: a chunk of 16 values of 0.5, k = 1 at 32 bits: 32 + 4 bits, 5
    bytes either way; without the DCT one 0.5 arrives, with it all sixteen (one coefficient, 2)."""
    x = torch.full((16,), 0.5)
    plain, dct = TopKCodec(TopK(16, 1, 32), 16), dct_codec(16, 1, 32, 16)
    (plain_payload, plain_sent), (dct_payload, dct_sent) = plain.encode(x), dct.encode(x)
    assert plain_payload.numel() == dct_payload.numel() == 5
    assert int(torch.count_nonzero(plain_sent)) == 1 and plain_sent.sum().item() == 0.5
    assert dct.coefficients(dct_payload)[0].item() == pytest.approx(2.0, rel=1e-6)
    assert torch.allclose(dct.decode(dct_payload), x, atol=FP32_TOLERANCE)
    assert torch.allclose(dct_sent, x, atol=FP32_TOLERANCE)


# --- a chunk sent exactly, error feedback, linearity --------------------------------------------------


def sparse_in_dct(layout: TopK, values: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, its coefficients): in every chunk ``layout.topk`` coefficients of +-0.75, the rest 0, and
    x their inverse DCT; two distinct kept values, which 1-bit bins decode exactly."""
    generator = torch.Generator().manual_seed(seed)
    coefficients = torch.zeros(values)
    start = 0
    for shape, count in layout.chunks(values):
        for _ in range(count):
            places = torch.randperm(shape.size, generator=generator)[: shape.kept] + start
            signs = torch.randint(0, 2, (shape.kept,), generator=generator) * 2 - 1
            coefficients[places] = 0.75 * signs.float()
            start += shape.size
    return ChunkDCT(layout.chunks(values)).inverse(coefficients), coefficients


@pytest.mark.parametrize("bits", [32, 16, 1])
def test_a_chunk_whose_energy_is_in_k_coefficients_is_sent_exactly(bits):
    layout = TopK(64, 3, bits, DCT)
    values = 64 * 5 + 30  # five 8 x 8 chunks and a 5 x 6 tail
    x, coefficients = sparse_in_dct(layout, values, seed=1)
    codec = TopKCodec(layout, values)
    payload, sent = codec.encode(x)
    assert payload.numel() == layout.payload_bytes(values)
    assert torch.allclose(codec.coefficients(payload), coefficients, atol=FP32_TOLERANCE)
    assert torch.allclose(sent, x, atol=FP32_TOLERANCE)  # 0.75 is exact in bf16 and in 1-bit bins
    assert torch.allclose(codec.decode(payload), x, atol=FP32_TOLERANCE)


def test_error_feedback_keeps_input_equal_to_sent_plus_residual_in_both_domains():
    layout = TopK(64, 4, 32, DCT)
    delta = torch.randn(64 * 4, generator=torch.Generator().manual_seed(2))
    fragment = Fragment(0, [torch.nn.Parameter(torch.zeros(delta.numel()))], trainer_spec(), 0.9)
    assert fragment.error is not None
    fragment.error.copy_(torch.randn(delta.numel(), generator=torch.Generator().manual_seed(3)))
    compressed = fragment.accumulate(delta).clone()  # e <- 0.9 e + delta
    codec = TopKCodec(layout, delta.numel())
    payload, sent = codec.encode(compressed)
    fragment.keep_unsent(sent)
    assert torch.allclose(fragment.error + sent, compressed, atol=FP32_TOLERANCE)
    # in the coefficient domain: the kept coefficients leave the buffer whole, the others stay
    transform = ChunkDCT(layout.chunks(delta.numel()))
    kept = codec.coefficients(payload) != 0
    residual, before = transform.forward(fragment.error), transform.forward(compressed)
    assert int(kept.sum()) == 4 * 4
    assert residual[kept].abs().max() < FP32_TOLERANCE
    assert torch.allclose(residual[~kept], before[~kept], atol=FP32_TOLERANCE)


def gathered_mean(codec: TopKCodec, payloads: list[torch.Tensor]) -> torch.Tensor:
    merged = mean_of(
        dict(enumerate(payloads)),
        codec,
        Verdict((True,) * len(payloads), {}),
        torch.zeros(codec.values),
        0,
        0,
    )
    assert merged.verdict.count == len(payloads)
    return merged.mean


def test_the_decode_of_the_gathered_mean_is_the_mean_of_the_decodes():
    """Over every worker the mean is linear: the inverse DCT of the coefficients' mean is the mean of
    the decodes. Over the senders each coefficient is divided by its own count, so the decode is the
    inverse DCT of those per-place means."""
    values = 64 * 3 + 17
    xs = [torch.randn(values, generator=torch.Generator().manual_seed(s)) for s in range(3)]
    workers = TopKCodec(TopK(64, 8, 2, DCT), values, "workers")
    payloads = [workers.encode(x)[0] for x in xs]
    expected = sum(workers.decode(p) for p in payloads) / 3
    assert torch.allclose(gathered_mean(workers, payloads), expected, atol=FP32_TOLERANCE)
    senders = TopKCodec(TopK(64, 8, 2, DCT), values, "senders")
    coefficients = [senders.coefficients(p) for p in payloads]
    kept = sum((c != 0).float() for c in coefficients).clamp(min=1)
    expected = senders.restore(sum(coefficients) / kept)
    assert torch.allclose(gathered_mean(senders, payloads), expected, atol=FP32_TOLERANCE)


def test_a_payload_whose_values_transform_back_past_fp32_is_refused():
    codec = dct_codec(4, 2, 32, 4)
    payload, _ = codec.encode(torch.tensor([1.0, 0.0, 0.0, 0.0]))
    # two kept values of 3e38: each finite, their norm 4.2e38 past fp32's 3.4e38
    huge = torch.tensor([3e38, 3e38], dtype=torch.float32).view(torch.uint8)
    with pytest.raises(BadPayload, match="norm, 4.24e\\+38, is past fp32's largest number"):
        codec.decode(torch.cat([huge, payload[8:]]))


# --- bytes: the same function with or without the DCT ------------------------------------------------


@given(
    st.integers(1, 300).flatmap(lambda c: st.tuples(st.just(c), st.integers(1, c))),
    st.sampled_from(VALUE_BITS),
    st.integers(1, 700),
    st.integers(0, 2**32 - 1),
)
def test_a_dct_payload_is_the_declared_bytes_and_decodes_to_what_was_sent(shape, bits, n, seed):
    chunk, topk = shape
    layout = TopK(chunk, topk, bits, DCT)
    codec = TopKCodec(layout, n)
    x = torch.randn(n, generator=torch.Generator().manual_seed(seed))
    payload, sent = codec.encode(x)
    assert payload.numel() == layout.payload_bytes(n) == TopK(chunk, topk, bits).payload_bytes(n)
    assert torch.allclose(codec.decode(payload), sent, atol=FP32_TOLERANCE)
    with pytest.raises(BadPayload, match=f"its payload is {payload.numel() - 1} bytes"):
        codec.decode(payload[:-1])


@given(
    st.integers(1, 300).flatmap(lambda c: st.tuples(st.just(c), st.integers(1, c))),
    st.sampled_from(VALUE_BITS),
    st.integers(1, 300),
    st.data(),
)
def test_a_damaged_dct_payload_is_refused_or_decodes_to_finite_values(shape, bits, n, data):
    """Any bytes changed: ``BadPayload`` or finite values after the inverse DCT, never Inf."""
    codec = TopKCodec(TopK(*shape, bits, DCT), n)
    payload, _ = codec.encode(torch.randn(n, generator=torch.Generator().manual_seed(n)))
    damaged = payload.clone()
    for _ in range(data.draw(st.integers(1, 8))):
        damaged[data.draw(st.integers(0, payload.numel() - 1))] = data.draw(st.integers(0, 255))
    try:
        decoded = codec.decode(damaged)
    except BadPayload as refused:
        assert str(refused) and "\n" not in str(refused)
    else:
        assert torch.isfinite(decoded).all()


def test_the_simulator_prices_the_same_bytes_with_the_dct():
    plain = make_scenario(["schedule.compression=topk", "schedule.bits=1", "schedule.topk=4"])
    dct = make_scenario(
        [
            "schedule.compression=topk",
            "schedule.bits=1",
            "schedule.topk=4",
            "schedule.transform=dct",
        ]
    )
    assert TopK.of(dct.schedule) == TopK(4096, 4, 1, DCT)
    # 1e9 values: 244,140 chunks of 4096 and a tail of 2,560 (4 x 12-bit places each): 244,141 x 4
    # x (1 + 12) = 12,695,332 bits = 1,586,917 B (rounded up), + 2 bins x 4 B
    assert payload_bytes(1e9, dct.schedule) == payload_bytes(1e9, plain.schedule) == 1_586_925
    priced = [p.payload_bytes for p in schedule_of(dct).sync_points(dct)]
    assert priced == [1_586_925] * 3


DCT_RUN = {
    "algorithm": "diloco",
    "compression": "topk",
    "transform": "dct",
    "chunk_values": 256,
    "topk": 16,
    "bits": 2,
    "error_feedback": 0.95,
}


def test_a_dct_runs_measured_bytes_are_the_simulated_ones():
    plan = plan_for(DCT_RUN, islands=3)
    trainers = trainers_for(plan)
    in_threads(trainers, lambda t: t.run())
    measured = finish_all(trainers)
    values = sum(p.numel() for p in trainers[0].params)  # 10,944: 42 16 x 16 chunks, a 12 x 16 tail
    scenario = replace(plan.scenario, model=replace(plan.scenario.model, parameters=values))
    # 43 chunks x 16 kept x (2 + 8) bits = 6880 bits = 860 B, + 4 bins x 4 B: the DCT's coefficients
    # travel as the values would; 2 payloads per round (M - 1 around the ring), 2 rounds
    assert values == 10_944 and TopK(256, 16, 2, DCT).payload_bytes(values) == 876
    sent = [row[5] for t in trainers for row in t.recorder.rows if row[4] == "comm"]
    assert sent == [2 * 876] * (2 * 3)
    assert measured["bytes_per_worker"] == simulate(scenario).summary["bytes_per_worker"] == 3504


def test_a_dct_run_keeping_every_coefficient_at_fp32_is_plain_diloco():
    """The orthonormal DCT loses nothing: keeping all of each chunk's coefficients at 32 bits, the
    trainer's global weights are dense DiLoCo's (to fp32 rounding), so the transform and its inverse
    are both applied, and in the right order."""
    whole = {**DCT_RUN, "topk": 256, "bits": 32, "error_feedback": 0.0}
    dense = {"algorithm": "diloco", "bits": 32}
    runs = []
    for schedule in (whole, dense):
        trainers = trainers_for(plan_for(schedule, islands=2))
        in_threads(trainers, lambda t: t.run())
        runs.append(global_weights(trainers[0]))
    assert torch.allclose(runs[0], runs[1], atol=1e-5)
    assert not torch.equal(runs[0], runs[1])  # the coefficients did travel, not the values


# --- the keys ------------------------------------------------------------------------------------------


def test_a_dct_without_compression_is_refused_in_one_line():
    with pytest.raises(UserError) as refused:
        make_scenario(["schedule.transform=dct"])
    assert str(refused.value) == (
        'test.toml: schedule.transform: has no effect without compression = "topk" (set '
        'compression = "topk", or remove it)'
    )


def test_a_dct_of_chunks_past_4096_values_is_refused_in_one_line():
    with pytest.raises(UserError) as refused:
        make_scenario(
            ["schedule.compression=topk", "schedule.transform=dct", "schedule.chunk_values=8192"]
        )
    assert str(refused.value) == (
        'test.toml: schedule.chunk_values: must be at most 4096 with transform = "dct" (got 8192): '
        "each chunk size's DCT basis is kept in memory, up to chunk_values^2 fp32 values where the "
        "size is prime"
    )
