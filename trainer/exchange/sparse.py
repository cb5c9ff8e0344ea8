"""Top-k payloads on the wire: encode a worker's vector, decode and check a peer's, gather their mean.

The layout and its size are declared once in ``schedules/compression.py`` (``TopK``), which the
simulator prices; ``TopKCodec`` writes exactly ``TopK.payload_bytes`` bytes. One payload is a bit
stream, then the side table:

* the kept values' codes, ``bits`` each, chunk after chunk and in each chunk by place: the fp32 or
  bf16 bits themselves, or a bin number (2^bits equal-width bins between the smallest and largest
  kept value);
* the places, chunk after chunk: ceil(log2 chunk_values) bits each (ascending in a chunk), or the
  chunk's bitmap, or nothing where the chunk keeps all its values;
* zero bits up to a whole byte; then the side table, the 2^bits bin means as fp32 (bins only).

Fields are little-endian bit by bit. A decoded value in bin j is the mean of the kept values that fell
in it, so it is off by at most the bin's width, (max - min) / 2^bits of the kept values.

Under ``transform = "dct"`` the numbers kept, quantised and placed are each chunk's DCT coefficients
(``transform.py``), in the same layout: the payload is the same bytes. ``coefficients`` reads a
payload back to them, ``decode`` to values; ``encode``'s ``sent`` is its kept coefficients
transformed back, what error feedback takes out of the buffer.

The exchange: every member announces its payload's size with its screening numbers
(``robust.contribution_stats``, ``announce``), then the payloads are gathered: around the ring
(``gather_mean``, ``Group.all_gather``: each member sends M - 1 payloads, what
``simulator/network/collectives.py`` prices as ``RingAllGather``), straight from the round's chosen
members (``direct_mean``, ``Group.gather_from``), or through an object store (``gathering.py``); and
``mean_of`` averages the accepted members' payloads (their coefficients, then one inverse
transform: it is linear). A payload of the wrong size, with NaN or Inf in its values or side table,
a place outside its chunk (or repeated, or a bitmap keeping the wrong count), values whose norm is
past fp32's range (the inverse DCT could make them Inf), or missing from the store at the deadline,
is refused with its reason in the verdict (the trainer logs it, ``Trainer.note_exclusions``) and
never merged.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from islands.schedules.compression import BINNED_BITS, ChunkShape, TopK
from islands.schedules.gather import DIRECT, RING, uploads

from .group import Group
from .robust import Verdict, contribution_stats, screen
from .transform import transform_of

BYTE_BITS = 8
SENDERS = "senders"  # ``trainer.topk_mean``: each place over the members that kept it
CODE_BYTES = 8  # an int64 code's bytes
FP32_EXACT_BITS = 24  # fp32 holds every integer below 2^24
MISSING = "its payload was not in the store by the deadline (trainer.timeout_s)"
FP32_BITS, BF16_BITS = 32, 16
# a payload's values within this norm stay finite through an orthonormal transform: none is larger
FP32_MAX = torch.finfo(torch.float32).max


class BadPayload(Exception):
    """A peer's payload that cannot be merged; the message says why."""


def bits_of(codes: torch.Tensor, width: int) -> torch.Tensor:
    """Each of ``codes`` (non-negative integers below 2^width, width at most 32) as ``width`` bits,
    lowest first, on the CPU: each code's little-endian bytes unpacked (numpy's ``unpackbits``, six
    times faster than shifting int64 tensors: a decode unpacks every byte of a peer's payload)."""
    nbytes = -(-width // BYTE_BITS)
    little = codes.detach().long().cpu().numpy().astype("<u8")
    as_bytes = little.view(np.uint8).reshape(-1, CODE_BYTES)[:, :nbytes]
    bits = np.unpackbits(as_bytes, axis=1, bitorder="little")[:, :width]
    return torch.from_numpy(np.ascontiguousarray(bits).reshape(-1))


def codes_of(bits: torch.Tensor, width: int) -> torch.Tensor:
    """The integers that ``bits_of`` wrote ``width`` bits each (int64): each row of bits times the
    powers of two, as one matrix product, exact (every partial sum is an integer below 2^width, which
    fp32 holds up to 24 bits and fp64 up to 53)."""
    exact = torch.float32 if width <= FP32_EXACT_BITS else torch.float64
    powers = torch.pow(2.0, torch.arange(width, dtype=exact, device=bits.device))
    return (bits.view(-1, width).to(exact) @ powers).long()


def packed(bits: torch.Tensor) -> torch.Tensor:
    """A bit stream as bytes, zero bits up to a whole byte."""
    return torch.from_numpy(np.packbits(bits.cpu().numpy(), bitorder="little"))


def signed(codes: torch.Tensor, width: int) -> torch.Tensor:
    """Unsigned ``width``-bit integers read as two's complement."""
    return torch.where(codes >= 2 ** (width - 1), codes - 2**width, codes)


@dataclass(frozen=True)
class Segment:
    """Chunks of one shape side by side: ``count`` of them from value ``start`` on."""

    shape: ChunkShape
    count: int
    start: int

    @property
    def end(self) -> int:
        return self.start + self.shape.size * self.count


class TopKCodec:
    """Encodes and decodes the top-k payload of a vector of ``values`` values; ``mean_over``
    (``trainer.topk_mean``): how ``mean_of`` averages a kept place, over the members that kept it
    ("senders") or over every accepted member ("workers")."""

    def __init__(self, layout: TopK, values: int, mean_over: str = SENDERS):
        self.layout, self.values, self.mean_over = layout, values, mean_over
        self.size_bytes = layout.payload_bytes(values)
        self.kept = layout.kept(values)
        self.transform = transform_of(layout, values)

    def segments(self) -> Iterator[Segment]:
        start = 0
        for shape, count in self.layout.chunks(self.values):
            yield Segment(shape, count, start)
            start += shape.size * count

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(payload, sent): the payload of finite fp32 ``x`` (on the CPU, uint8) and what it decodes
        to, in place of ``x`` (zeros where nothing was kept; under a DCT, the kept coefficients
        transformed back)."""
        flat = self.transform.forward(x.detach().float().flatten())
        places, index_bits = [], []
        for segment in self.segments():
            rows = flat[segment.start : segment.end].view(segment.count, segment.shape.size)
            chosen = rows.abs().topk(segment.shape.kept, dim=1).indices.sort(dim=1).values
            offsets = torch.arange(segment.count, device=flat.device) * segment.shape.size
            places.append((chosen + offsets.unsqueeze(1) + segment.start).flatten())
            index_bits.append(self.places_bits(segment.shape, chosen))
        place = torch.cat(places)
        codes, decoded, table = self.quantised(flat[place])
        stream = torch.cat([bits_of(codes, self.layout.bits).cpu(), *(b.cpu() for b in index_bits)])
        payload = torch.cat([packed(stream), table.cpu().view(torch.uint8)])
        sent = torch.zeros_like(flat)
        sent[place] = decoded
        return payload, self.transform.inverse(sent).view_as(x)

    def places_bits(self, shape: ChunkShape, chosen: torch.Tensor) -> torch.Tensor:
        """The places of each chunk's kept values: none, a bitmap, or ascending indices."""
        if shape.index_bits == 0:
            return torch.zeros(0, dtype=torch.uint8)
        if shape.bitmap:
            mask = torch.zeros(chosen.shape[0], shape.size, dtype=torch.uint8, device=chosen.device)
            return mask.scatter_(1, chosen, 1).flatten()
        return bits_of(chosen.flatten(), self.layout.index_width)

    def quantised(self, kept: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(codes, decoded values, side table) of the kept values at ``bits``."""
        bits = self.layout.bits
        if bits == FP32_BITS:
            return kept.view(torch.int32).long() & 0xFFFFFFFF, kept, torch.zeros(0)
        if bits == BF16_BITS:
            halves = kept.to(torch.bfloat16)
            return halves.view(torch.int16).long() & 0xFFFF, halves.float(), torch.zeros(0)
        bins = 2**bits
        low, high = kept.double().min(), kept.double().max()
        width = (high - low) / bins
        codes = (
            ((kept.double() - low) / width).floor().clamp(0, bins - 1).long()
            if width > 0
            else torch.zeros_like(kept, dtype=torch.long)
        )
        sums = torch.zeros(bins, dtype=torch.float64, device=kept.device).scatter_add_(
            0, codes, kept.double()
        )
        counts = torch.zeros(bins, dtype=torch.float64, device=kept.device).scatter_add_(
            0, codes, torch.ones_like(sums[codes])
        )
        table = torch.where(counts > 0, sums / counts.clamp(min=1), 0.0).float()
        return codes, table[codes], table

    def decode(self, payload: torch.Tensor) -> torch.Tensor:
        """The dense fp32 vector a payload stands for; ``BadPayload`` where it cannot be merged."""
        return self.restore(self.coefficients(payload))

    def restore(self, coefficients: torch.Tensor) -> torch.Tensor:
        """The values of dense ``coefficients`` (the mean of several payloads' too: it is linear)."""
        return self.transform.inverse(coefficients)

    def coefficients(self, payload: torch.Tensor) -> torch.Tensor:
        """The dense numbers a payload carries, before the inverse transform (the values themselves
        without one); ``BadPayload`` where it cannot be merged."""
        return self.kept_of(payload)[0]

    def kept_of(self, payload: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(the dense numbers a payload carries, the places it kept); ``BadPayload`` where it cannot
        be merged."""
        if payload.numel() != self.size_bytes:
            raise BadPayload(f"its payload is {payload.numel()} bytes, not {self.size_bytes}")
        data = payload.cpu()
        table_bytes = self.layout.table_bytes
        table = data[self.size_bytes - table_bytes :].clone().view(torch.float32)
        if not torch.isfinite(table).all():
            raise BadPayload("NaN or Inf in its payload's side table")
        stream_bytes = data[: self.size_bytes - table_bytes]
        stream = bits_of(stream_bytes, BYTE_BITS)
        values = self.values_of(
            codes_of(stream[: self.kept * self.layout.bits], self.layout.bits), table
        )
        offset = self.kept * self.layout.bits
        places = []
        for segment in self.segments():
            chosen, offset = self.read_places(segment, stream, offset)
            offsets = torch.arange(segment.count) * segment.shape.size
            places.append((chosen + offsets.unsqueeze(1) + segment.start).flatten())
        dense = torch.zeros(self.values, dtype=torch.float32)
        kept = torch.cat(places)
        dense[kept] = values
        norm = float(dense.double().norm())
        if norm > FP32_MAX:
            raise BadPayload(f"its values' norm, {norm:.3g}, is past fp32's largest number")
        return dense, kept

    def values_of(self, codes: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        """The kept values from their codes; ``BadPayload`` for NaN or Inf."""
        bits = self.layout.bits
        if bits == FP32_BITS:
            values = signed(codes, FP32_BITS).to(torch.int32).view(torch.float32)
        elif bits == BF16_BITS:
            values = signed(codes, BF16_BITS).to(torch.int16).view(torch.bfloat16).float()
        else:
            values = table[codes]
        if bits > BINNED_BITS and not torch.isfinite(values).all():
            raise BadPayload("NaN or Inf among its payload's values")
        return values

    def read_places(
        self, segment: Segment, stream: torch.Tensor, offset: int
    ) -> tuple[torch.Tensor, int]:
        """(each chunk's places, [count, kept], ascending; the stream's next offset)."""
        shape, count = segment.shape, segment.count
        if shape.index_bits == 0:
            return torch.arange(shape.size).repeat(count, 1), offset
        if shape.bitmap:
            mask = stream[offset : offset + count * shape.size].view(count, shape.size)
            kept = mask.long().sum(dim=1)
            if (kept != shape.kept).any():
                wrong = int(kept[kept != shape.kept][0])
                raise BadPayload(f"a chunk's bitmap keeps {wrong} values, not {shape.kept}")
            return mask.nonzero()[:, 1].view(count, shape.kept), offset + count * shape.size
        width = self.layout.index_width
        length = count * shape.kept * width
        chosen = codes_of(stream[offset : offset + length], width).view(count, shape.kept)
        if (chosen >= shape.size).any():
            raise BadPayload(
                f"place {int(chosen.max())} is outside its chunk of {shape.size} values"
            )
        if (chosen[:, 1:] <= chosen[:, :-1]).any():
            raise BadPayload("a chunk's places repeat or are out of order")
        return chosen, offset + length


def fitted(payload: torch.Tensor, size_bytes: int) -> torch.Tensor:
    """``payload`` cut or zero-padded to ``size_bytes``: the ring carries equal messages, and a
    member's announced size (not this) says whether its payload is whole."""
    if payload.numel() == size_bytes:
        return payload
    out = torch.zeros(size_bytes, dtype=torch.uint8)
    out[: min(size_bytes, payload.numel())] = payload[:size_bytes]
    return out


def refused(verdict: Verdict, reasons: dict[int, str]) -> Verdict:
    """``verdict`` with the members of ``reasons`` left out too."""
    return Verdict(
        tuple(ok and member not in reasons for member, ok in enumerate(verdict.accepted)),
        {**verdict.reasons, **reasons},
    )


@dataclass(frozen=True)
class Gathered:
    """A top-k exchange's result: the accepted members' mean, this member's ``sent`` (zeros where
    its payload was not merged), the bytes it sent and the verdict."""

    mean: torch.Tensor
    sent: torch.Tensor
    sent_bytes: int
    verdict: Verdict


@dataclass(frozen=True)
class Entry:
    """A member's entry in a top-k round: its payload, the codec that reads the round's payloads,
    the screening's verdict and what its own payload decodes to (``announce``)."""

    payload: torch.Tensor
    codec: TopKCodec
    verdict: Verdict
    sent: torch.Tensor


def announce(
    group: Group, x: torch.Tensor, codec: TopKCodec, contributes: bool, norm_factor: float
) -> tuple[torch.Tensor, torch.Tensor, Verdict]:
    """Encode ``x`` (zeros for a member without a finite contribution) and share the screening
    numbers and the payload's size: (payload, sent, verdict with wrong sizes refused)."""
    stats = contribution_stats(x, contributes)
    usable = contributes and bool(stats[0].item())
    payload, sent = codec.encode(x if usable else torch.zeros_like(x))
    size = torch.tensor([float(payload.numel())], dtype=torch.float64, device=stats.device)
    shared = group.all_gather(torch.cat([stats, size]))
    verdict = screen(shared, norm_factor)
    wrong = {
        member: f"its payload is {int(numbers[3].item())} bytes, not {codec.size_bytes}"
        for member, numbers in enumerate(shared)
        if verdict.accepted[member] and int(numbers[3].item()) != codec.size_bytes
    }
    return payload, sent, refused(verdict, wrong)


def gather_mean(group: Group, entry: Entry) -> Gathered:
    """All-gather the payloads around the ring and average the accepted members' decoded ones."""
    codec = entry.codec
    gathered = group.all_gather(fitted(entry.payload, codec.size_bytes))
    sent_bytes = uploads(RING, group.size, True) * codec.size_bytes
    return mean_of(
        dict(enumerate(gathered)), codec, entry.verdict, entry.sent, group.rank, sent_bytes
    )


def direct_mean(group: Group, entry: Entry, picked: tuple[int, ...]) -> Gathered:
    """The round's ``picked`` members send their payloads straight to every other member
    (``Group.gather_from``); the accepted ones of them are averaged."""
    codec = entry.codec
    gathered = group.gather_from(fitted(entry.payload, codec.size_bytes), picked)
    sent_bytes = uploads(DIRECT, group.size, group.rank in picked) * codec.size_bytes
    payloads = {member: gathered[member] for member in picked}
    return picked_mean(payloads, entry, picked, group.rank, sent_bytes)


def picked_mean(
    payloads: dict[int, torch.Tensor | None],
    entry: Entry,
    picked: tuple[int, ...],
    rank: int,
    sent_bytes: int,
) -> Gathered:
    """The mean of the round's ``picked`` members' ``payloads`` (``mean_of``)."""
    verdict = only(entry.verdict, picked)
    return mean_of(payloads, entry.codec, verdict, entry.sent, rank, sent_bytes)


def only(verdict: Verdict, picked: tuple[int, ...]) -> Verdict:
    """``verdict`` with the members outside the round's ``picked`` left out, with no reason given:
    they are not excluded, only not drawn."""
    return Verdict(
        tuple(ok and member in picked for member, ok in enumerate(verdict.accepted)),
        verdict.reasons,
    )


def mean_of(
    payloads: dict[int, torch.Tensor | None],
    codec: TopKCodec,
    verdict: Verdict,
    sent: torch.Tensor,
    rank: int,
    sent_bytes: int,
) -> Gathered:
    """The mean of the accepted members' decoded ``payloads`` (zeros if none): one that is missing
    (None) or cannot be decoded is refused with its reason, never merged. Their coefficients are
    averaged and transformed back once: each place over the members whose payload kept it
    (``codec.mean_over`` "senders", SparseLoCo's released code: ``scatter_reduce(..., "mean",
    include_self=False)``, so a place one member of M kept moves by its whole value), or over every
    accepted member, zeros included ("workers", Covenant-72B's eq. 2 as written: 1/M of it)."""
    total, senders, reasons = torch.zeros(codec.values), torch.zeros(codec.values), {}
    for member, data in payloads.items():
        if not verdict.accepted[member]:
            continue
        if data is None:
            reasons[member] = MISSING
            continue
        try:
            dense, kept = codec.kept_of(data)
        except BadPayload as bad:
            reasons[member] = str(bad)
            continue
        total += dense
        senders[kept] += 1
    final = refused(verdict, reasons)
    over = senders.clamp(min=1) if codec.mean_over == SENDERS else max(1, final.count)
    mean = codec.restore(total / over)
    own = sent if final.accepted[rank] else torch.zeros_like(sent)
    return Gathered(mean.to(sent.device), own, sent_bytes, final)
