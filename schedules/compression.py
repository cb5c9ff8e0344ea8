"""Compressed exchanges, declared once: what a top-k payload holds and how many bytes it is on the wire.

``schedule.compression = "topk"`` (SparseLoCo, Sarfi et al. 2025, arXiv:2508.15706; DeMo, Peng et al.
2024, arXiv:2411.19870) sends, of each fragment's pseudo-gradient, the ``topk`` values of largest
magnitude in every chunk of ``chunk_values`` consecutive values, each with its place in the chunk:

* the fragment is one flat vector (its tensors in ``named_parameters`` order, as every exchange of
  islands flattens them), cut into ceil(N / C) chunks of C = ``chunk_values`` values; the last, the
  tail, holds the N mod C values left over (when C does not divide N) and keeps min(k, its size);
* values at ``bits``: 32 (fp32) or 16 (bf16) as they are, or 8, 4, 2, 1 bits as one of 2^bits bins:
  equal-width bins between the smallest and the largest kept value, each decoded as the mean of the
  kept values that fell in it; the 2^bits means travel as fp32 with the payload (the side table,
  ``table_bytes``; SparseLoCo's quantiser too decodes a bin to the mean of its values);
* places: ceil(log2 C) bits per kept value (12 at C = 4096), or a bitmap of the chunk's values where
  that is smaller (k x ceil(log2 C) > C: more than 1/12 of a 4,096-value chunk kept), or nothing
  where the chunk keeps every value.

So a fragment of N = q C values (no tail) is q x k x (bits + ceil(log2 C)) bits, rounded up to whole
bytes, plus the side table: ``payload_bytes``, the one function both executors size a payload by
(``Schedule.sync_points`` prices it; the trainer's encoder, ``trainer/exchange/sparse.py``, writes exactly
that many bytes, and a test holds them equal). Sparse payloads cannot be summed on the wire, so they
are gathered (``base.collective_of``): around the ring, each member sending (M - 1) payloads, or as
``network.gather`` says, peer to peer or through an object store (``gather.py``).

The worker keeps an error-feedback buffer e (``error_feedback`` = beta; 0: none): it sends the top-k
of e <- beta e + delta and keeps e - sent for the next round (``trainer/core/outer.py``).

``schedule.transform = "dct"`` (DeMo) takes the top-k of each chunk's DCT coefficients instead of its
values: the chunk of n values, seen as an r x c block (``dct_block``: r the largest divisor of n at
most sqrt(n), so 64 x 64 at n = 4096, DeMo's chunk of 64 per dimension), goes through the
orthonormal 2-D DCT-II, and the kept coefficients travel as the values would, at the same bits with
the same places and side table. So the DCT changes which numbers travel, never how many bytes:
``payload_bytes`` is the same function with or without it. A receiver averages the coefficients and
applies the inverse DCT once (the transform is linear); error feedback takes out what was sent, its
coefficients transformed back (``trainer/exchange/transform.py``). Its compute, r + c multiply-adds per
value each way, is priced with the rest of the exchange work (``network.exchange_cpu_s_per_value``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from islands.units import BITS_PER_BYTE

if TYPE_CHECKING:
    from islands.scenarios.model import Scenario, ScheduleSpec

NONE = "none"
TOPK = "topk"
COMPRESSIONS = (NONE, TOPK)
DCT = "dct"
TRANSFORMS = (NONE, DCT)  # what a chunk goes through before its top-k
DENSE_BITS = (32, 16, 8, 4)  # the dense wire formats (``trainer/exchange/quantize.py``)
VALUE_BITS = (32, 16, 8, 4, 2, 1)  # a kept value's formats; 8 and below are bins with a side table
BINNED_BITS = 8  # at most this many bits, a value is a bin number
TABLE_VALUE_BYTES = 4  # each bin's mean, fp32
DEFAULT_CHUNK_VALUES = 4096  # SparseLoCo's 64 x 64 chunks
DEFAULT_TOPK = 64  # SparseLoCo's k: 1.56% of a chunk
MAX_DCT_CHUNK_VALUES = 4096  # DeMo's 64 x 64; a chunk's DCT basis is at most this squared, fp32


@dataclass(frozen=True)
class ChunkShape:
    """One chunk of ``size`` values as it travels: ``kept`` values and ``index_bits`` of places."""

    size: int
    kept: int
    index_bits: int
    bitmap: bool  # the places as a bitmap of ``size`` bits (else ``kept`` indices, or none)


@dataclass(frozen=True)
class TopK:
    """The top-k payload's layout: ``topk`` of every ``chunk_values`` values at ``bits`` each, of
    the values themselves or of their ``transform`` (which leaves the bytes as they are)."""

    chunk_values: int
    topk: int
    bits: int
    transform: str = NONE

    @classmethod
    def of(cls, schedule: ScheduleSpec) -> TopK | None:
        """The schedule's layout; None without compression."""
        if schedule.compression == NONE:
            return None
        return cls(schedule.chunk_values, schedule.topk, schedule.bits, schedule.transform)

    @property
    def index_width(self) -> int:
        """Bits of one kept value's place in a chunk: ceil(log2 chunk_values)."""
        return (self.chunk_values - 1).bit_length()

    @property
    def table_values(self) -> int:
        """Bin means in the side table: 2^bits where values are bins, none at 16 and 32 bits."""
        return 2**self.bits if self.bits <= BINNED_BITS else 0

    @property
    def table_bytes(self) -> int:
        return self.table_values * TABLE_VALUE_BYTES

    def chunk(self, size: int) -> ChunkShape:
        """A chunk of ``size`` values: it keeps min(k, size); no place is sent where it keeps them all,
        else the cheaper of k indices and a bitmap (indices at a tie)."""
        kept = min(self.topk, size)
        if kept == size:
            return ChunkShape(size, kept, 0, False)
        indices = kept * self.index_width
        return ChunkShape(size, kept, min(indices, size), size < indices)

    def chunks(self, values: int) -> list[tuple[ChunkShape, int]]:
        """The chunks of a fragment of ``values`` values: (shape, how many), full chunks then the tail."""
        full, tail = divmod(values, self.chunk_values)
        shapes = [(self.chunk(self.chunk_values), full)] if full else []
        return shapes + ([(self.chunk(tail), 1)] if tail else [])

    def kept(self, values: int) -> int:
        """Values a fragment of ``values`` values sends."""
        return sum(shape.kept * count for shape, count in self.chunks(values))

    def payload_bits(self, values: int) -> int:
        """Bits of the kept values and their places (the side table apart)."""
        return sum(
            (shape.kept * self.bits + shape.index_bits) * count
            for shape, count in self.chunks(values)
        )

    def payload_bytes(self, values: int) -> int:
        """Bytes on the wire of one fragment of ``values`` values: its bits in whole bytes, then the
        side table."""
        return math.ceil(self.payload_bits(values) / BITS_PER_BYTE) + self.table_bytes


def dct_block(size: int) -> tuple[int, int]:
    """The (rows, columns) of the block a chunk of ``size`` values is seen as for its 2-D DCT: rows
    the largest divisor of ``size`` at most its square root, so the block is as square as the size
    allows (64 x 64 at 4,096; 1 x size, a 1-D DCT, where ``size`` is prime)."""
    rows = next(d for d in range(math.isqrt(size), 0, -1) if size % d == 0)
    return rows, size // rows


def whole_values(values: float) -> int:
    """A planned fragment's values as a whole number (a layer split may leave a fraction)."""
    return max(1, math.floor(values + 0.5))


def payload_bytes(values: float, schedule: ScheduleSpec) -> float:
    """Bytes on the wire of an exchanged tensor of ``values`` values under the schedule: dense,
    values x bits / 8; top-k, ``TopK.payload_bytes`` of the whole values."""
    layout = TopK.of(schedule)
    if layout is None:
        return values * schedule.bits / BITS_PER_BYTE
    return float(layout.payload_bytes(whole_values(values)))


def problem(scenario: Scenario, compressions: tuple[str, ...]) -> tuple[str, str] | None:
    """The first compression key that does nothing or cannot be run, as (key, rule); ``compressions``:
    what the scenario's schedule runs (``Schedule.compressions``)."""
    schedule = scenario.schedule
    if schedule.compression == NONE:
        return unread_key(schedule, TOPK in compressions)
    if schedule.compression not in compressions:
        return (
            "schedule.compression",
            f'"{schedule.compression}" is not run by algorithm = "{schedule.algorithm}" (it runs '
            + ", ".join(f'"{name}"' for name in compressions)
            + "): top-k payloads are the DiLoCo family's pseudo-gradients, averaged by every worker",
        )
    if schedule.topk > schedule.chunk_values:
        return (
            "schedule.topk",
            f"must be at most chunk_values = {schedule.chunk_values} (got {schedule.topk})",
        )
    if schedule.transform == DCT and schedule.chunk_values > MAX_DCT_CHUNK_VALUES:
        return (
            "schedule.chunk_values",
            f'must be at most {MAX_DCT_CHUNK_VALUES} with transform = "{DCT}" (got '
            f"{schedule.chunk_values}): each chunk size's DCT basis is kept in memory, up to "
            "chunk_values^2 fp32 values where the size is prime",
        )
    return unsupported(scenario)


def unread_key(schedule: ScheduleSpec, runs_topk: bool) -> tuple[str, str] | None:
    """A top-k key away from its default, or bits below the dense formats, without compression
    (``runs_topk``: whether the schedule could compress)."""
    remedy = (
        f'set compression = "{TOPK}", or remove it'
        if runs_topk
        else f'algorithm = "{schedule.algorithm}" exchanges dense payloads only: remove it'
    )
    defaults = {
        "chunk_values": DEFAULT_CHUNK_VALUES,
        "topk": DEFAULT_TOPK,
        "error_feedback": 0.0,
        "transform": NONE,
    }
    for key, default in defaults.items():
        if getattr(schedule, key) != default:
            return f"schedule.{key}", f'has no effect without compression = "{TOPK}" ({remedy})'
    if schedule.bits not in DENSE_BITS:
        return (
            "schedule.bits",
            f'{schedule.bits} needs compression = "{TOPK}": a dense payload\'s formats are '
            + ", ".join(map(str, DENSE_BITS))
            + f" bits ({remedy})",
        )
    return None


def unsupported(scenario: Scenario) -> tuple[str, str] | None:
    """What a top-k exchange is not built with (docs/limits.md)."""
    trainer, network = scenario.trainer, scenario.network
    if trainer.aggregation != "mean":
        return (
            "trainer.aggregation",
            f'"{trainer.aggregation}" is not run on top-k payloads: their mean is taken (use "mean")',
        )
    if scenario.exchange.calls != "flat":
        return (
            "exchange.calls",
            f'"{scenario.exchange.calls}": a top-k payload is gathered in one call (use "flat")',
        )
    if network.collective != "ring":
        return (
            "network.collective",
            f'"{network.collective}" sums on the wire, and top-k payloads cannot be summed: they '
            'are all-gathered around a ring (use "ring")',
        )
    if trainer.ranks_per_island > 1:
        return (
            "trainer.ranks_per_island",
            f"{trainer.ranks_per_island}: a top-k exchange is sent by one rank per island (set 1)",
        )
    if trainer.elastic:
        return (
            "trainer.elastic",
            "true: an elastic run does not carry top-k payloads or error feedback yet (set false)",
        )
    return None
