"""Top-k payloads, drawn at random: the encoder writes exactly the declared bytes, the decoder gives
back the kept top-k of each chunk within the quantiser's bound and zeros elsewhere, error feedback
leaves beta e + delta - sent, and a damaged payload is refused (``BadPayload``), never anything else.
"""

from __future__ import annotations

import torch
from hypothesis import given
from hypothesis import strategies as st

from islands.scenarios.trainer_keys import trainer_spec
from islands.schedules.compression import VALUE_BITS, TopK
from islands.trainer.core.outer import Fragment
from islands.trainer.exchange.sparse import BadPayload, TopKCodec

BF16_STEP = 2**-8  # bf16 keeps 8 significant bits: a value rounds by at most |x| / 2^8


@st.composite
def layouts(draw) -> TopK:
    chunk = draw(st.integers(1, 300))
    return TopK(chunk, draw(st.integers(1, chunk)), draw(st.sampled_from(VALUE_BITS)))


@st.composite
def distinct_vectors(draw, max_values: int = 700) -> torch.Tensor:
    """Values of distinct magnitudes, so each chunk's top-k is one set: a random permutation of
    1..n (times 2^-4, exact in fp32 and bf16), each with a random sign."""
    n = draw(st.integers(1, max_values))
    order = draw(st.permutations(range(1, n + 1)))
    signs = draw(st.lists(st.sampled_from((-1.0, 1.0)), min_size=n, max_size=n))
    return torch.tensor([s * m / 16 for s, m in zip(signs, order)], dtype=torch.float32)


def top_places(x: torch.Tensor, layout: TopK) -> set[int]:
    """Each chunk's ``topk`` places of largest magnitude, by sorting (not the encoder's topk)."""
    places: set[int] = set()
    for start in range(0, x.numel(), layout.chunk_values):
        chunk = x[start : start + layout.chunk_values].abs().tolist()
        kept = sorted(range(len(chunk)), key=lambda i: -chunk[i])[: layout.topk]
        places.update(start + i for i in kept)
    return places


@given(layouts(), distinct_vectors())
def test_the_payload_is_the_declared_bytes_and_decodes_to_what_was_sent(layout, x):
    codec = TopKCodec(layout, x.numel())
    payload, sent = codec.encode(x)
    assert payload.dtype == torch.uint8 and payload.numel() == layout.payload_bytes(x.numel())
    assert torch.equal(codec.decode(payload), sent)


@given(layouts(), distinct_vectors())
def test_the_kept_values_are_each_chunks_top_k_within_the_quantisers_bound(layout, x):
    _, sent = TopKCodec(layout, x.numel()).encode(x)
    kept = sorted(top_places(x, layout))
    others = [i for i in range(x.numel()) if i not in set(kept)]
    assert torch.count_nonzero(sent[others]) == 0
    error = (sent[kept] - x[kept]).abs()
    if layout.bits == 32:
        assert torch.equal(sent[kept], x[kept])
    elif layout.bits == 16:
        assert (error <= x[kept].abs() * BF16_STEP).all()
    else:  # a bin of 2^bits between the smallest and largest kept value, decoded to its mean
        width = (x[kept].max() - x[kept].min()) / 2**layout.bits
        assert (error <= width * (1 + 1e-5) + 1e-6).all()


@given(
    layouts(),
    distinct_vectors(max_values=300),
    st.sampled_from((0.5, 0.9, 0.95)),
    st.integers(0, 2**32 - 1),
)
def test_error_feedback_keeps_beta_e_plus_delta_minus_what_was_sent(layout, delta, beta, seed):
    fragment = Fragment(0, [torch.nn.Parameter(torch.zeros(delta.numel()))], trainer_spec(), beta)
    assert fragment.error is not None
    before = torch.randn(delta.numel(), generator=torch.Generator().manual_seed(seed))
    fragment.error.copy_(before)
    expected = before * beta + delta
    compressed = fragment.accumulate(delta)
    assert torch.equal(compressed, expected)
    _, sent = TopKCodec(layout, delta.numel()).encode(compressed)
    fragment.keep_unsent(sent)
    assert torch.equal(fragment.error, expected - sent)


@given(layouts(), distinct_vectors(max_values=300), st.data())
def test_a_damaged_payload_is_refused_or_decodes_to_finite_values(layout, x, data):
    """Any byte changed, any length cut or added: ``BadPayload`` or a finite vector, no other error."""
    codec = TopKCodec(layout, x.numel())
    payload, _ = codec.encode(x)
    damaged = payload.clone()
    at = data.draw(st.integers(0, payload.numel() - 1))
    damaged[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, payload.numel() + 8))
    damaged = (
        damaged[:cut]
        if cut <= payload.numel()
        else torch.cat([damaged, torch.zeros(cut - payload.numel(), dtype=torch.uint8)])
    )
    try:
        decoded = codec.decode(damaged)
    except BadPayload as refused:
        assert str(refused) and "\n" not in str(refused)
    else:
        assert damaged.numel() == codec.size_bytes and torch.isfinite(decoded).all()


@given(layouts(), distinct_vectors(max_values=300))
def test_a_payload_cut_at_any_byte_is_refused_for_its_size(layout, x):
    codec = TopKCodec(layout, x.numel())
    payload, _ = codec.encode(x)
    for length in range(payload.numel()):
        try:
            codec.decode(payload[:length])
        except BadPayload as refused:
            assert str(refused) == f"its payload is {length} bytes, not {payload.numel()}"
        else:
            raise AssertionError(f"a payload cut to {length} bytes was decoded")
