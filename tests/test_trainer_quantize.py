"""Wire formats and the quantised average: exact values on known tensors, error bounds, bytes."""

import pytest
import torch

from islands.trainer.core.inprocess import run_threads
from islands.trainer.exchange.comm import ThreadHub
from islands.trainer.exchange.quantize import BLOCK_VALUES, average, decode, encode, encoded_bytes


def known_block():
    x = torch.zeros(BLOCK_VALUES)
    x[:4] = torch.tensor([1.0, -0.6, 0.25, 0.1])
    return x


def roundtrip(x, bits):
    return decode(encode(x, bits), bits, x.numel())


def test_int8_codes_are_round_x_over_absmax_times_127():
    out = roundtrip(known_block(), 8)
    # scale 1 / 127: -0.6 * 127 = -76.2 -> -76; 0.25 * 127 = 31.75 -> 32; 0.1 * 127 = 12.7 -> 13
    assert out[:4].tolist() == pytest.approx([1.0, -76 / 127, 32 / 127, 13 / 127])


def test_int4_codes_are_round_x_over_absmax_times_7():
    out = roundtrip(known_block(), 4)
    # scale 1 / 7: -0.6 * 7 = -4.2 -> -4; 0.25 * 7 = 1.75 -> 2; 0.1 * 7 = 0.7 -> 1
    assert out[:4].tolist() == pytest.approx([1.0, -4 / 7, 2 / 7, 1 / 7])


def test_fp32_is_exact_and_bf16_keeps_8_significant_bits():
    x = torch.randn(4 * BLOCK_VALUES, generator=torch.Generator().manual_seed(0))
    assert torch.equal(roundtrip(x, 32), x)
    assert ((roundtrip(x, 16) - x).abs() <= x.abs() * 2**-8).all()


@pytest.mark.parametrize("bits,q_max", [(8, 127), (4, 7)])
def test_integer_formats_err_by_at_most_half_a_step(bits, q_max):
    x = torch.randn(8 * BLOCK_VALUES, generator=torch.Generator().manual_seed(1)) * 3
    error = (roundtrip(x, bits) - x).abs().view(-1, BLOCK_VALUES)
    half_step = x.abs().view(-1, BLOCK_VALUES).amax(dim=1, keepdim=True) / (2 * q_max)
    assert (error <= half_step * (1 + 1e-6)).all()
    assert error.max() > half_step.min() / 4  # the bound is not vacuous: rounding really happens


def test_encoded_bytes_shrink_with_bits():
    assert [encoded_bytes(256, bits) for bits in (32, 16, 8, 4)] == [1024, 512, 256 + 8, 128 + 8]
    assert [encode(torch.ones(256), bits).numel() for bits in (32, 16, 8, 4)] == [
        1024,
        512,
        264,
        136,
    ]


def average_in_threads(tensors, bits):
    members = ThreadHub(len(tensors)).members()
    return run_threads(len(tensors), lambda rank: average(tensors[rank], members[rank], bits))


@pytest.mark.parametrize("bits", [32, 16, 8, 4])
def test_quantised_average_sends_two_passes_of_encoded_chunks(bits):
    # 1000 values over M = 3: padded to 3 chunks of 384 (3 blocks each); each member sends
    # (M - 1) chunks in the reduce-scatter and its chunk to M - 1 members in the all-gather.
    tensors = [torch.randn(1000, generator=torch.Generator().manual_seed(r)) for r in range(3)]
    results = average_in_threads(tensors, bits)
    expected_bytes = 2 * 2 * encoded_bytes(384, bits)
    assert [sent for _, sent in results] == [expected_bytes] * 3
    assert expected_bytes == pytest.approx(2 * 2 / 3 * encoded_bytes(1152, bits))
    assert all(torch.equal(results[0][0], mean) for mean, _ in results)


def test_fp32_average_is_exact_and_int8_close():
    tensors = [torch.arange(300.0) * (r + 1) for r in range(2)]
    exact = torch.arange(300.0) * 1.5
    assert torch.equal(average_in_threads(tensors, 32)[0][0], exact)
    int8 = average_in_threads(tensors, 8)[0][0]
    # two roundings of at most half a step each, the step being the block's max / 127 (<= 448.5 / 127)
    assert (int8 - exact).abs().max() <= 2 * (2 * 299) / 254 + 1e-4
    assert not torch.equal(int8, exact)
