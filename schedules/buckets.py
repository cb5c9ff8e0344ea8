"""DDP's gradient buckets, declared once for both executors: how PyTorch DDP lays a gradient out in
buckets, and when, during the backward pass, each is ready.

PyTorch DDP (``torch/nn/parallel/distributed.py``, ``_BucketCapacityConfig`` and ``_ddp_init_helper``;
the C++ ``Reducer`` rebuilds the buckets after the first iteration, in the order the gradients became
ready) assigns the parameter tensors to buckets in the order the backward pass produces their
gradients, about the reverse of their registration order, each tensor whole, and closes a bucket as
soon as it holds at least its cap (``dist._compute_bucket_assignment_by_size``). The first bucket's cap
is ``dist._DEFAULT_FIRST_BUCKET_BYTES`` = 1 MiB when ``bucket_cap_mb`` is left at its default (25 MiB),
else ``bucket_cap_mb`` too; every later bucket's is ``bucket_cap_mb``. A GPT registers its token
embedding first (often tied to the output head), so it lands in the last bucket, whole.

``layout_of`` gives an exchange's buckets in call order (``exchange.tensor_values`` the tensors, in
registration order; without them the values are one long run that a bucket may cut anywhere). The
simulator prices the calls from it (``simulator.network.collectives.bucket_wait``); the trainer cuts
its flat gradient at the same boundaries and releases its calls at the same times
(``trainer.exchange.sync``).

When a bucket is ready (``BucketLayout.ready_fraction``): the backward window runs from the launch,
where ``schedule.backward_overlap`` puts it (the first bucket is ready then), to the end of the step's
compute (the last is ready then). The assumption: the backward pass's compute is proportional to the
values whose gradients it produces, so between those two bucket k is ready once buckets 2..k are
produced, at (values of buckets 2..k) / (values of buckets 2..C) of the window. With buckets of equal
size that is (k - 1) / (C - 1). One bucket is ready at the end.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from islands.scenarios.model import ExchangeSpec

BYTES_PER_MIB = 2**20
DEFAULT_BUCKET_CAP_MB = 25.0  # PyTorch DDP's bucket_cap_mb
DEFAULT_FIRST_BUCKET_MB = 1.0  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES, in MiB

Run = tuple[int, float]  # (buckets, values in each): buckets of one size in a row


@dataclass(frozen=True)
class BucketLayout:
    """An exchange's buckets in call order (the order the backward pass produces them), as runs of
    buckets of one size: a layout of equal buckets holds a few runs however many calls."""

    runs: tuple[Run, ...]

    @property
    def calls(self) -> int:
        """C: the collective calls, one per bucket."""
        return sum(count for count, _ in self.runs)

    @property
    def values(self) -> float:
        """The values of every bucket together: the exchange's."""
        return sum(count * size for count, size in self.runs)

    def sizes(self) -> list[float]:
        """Each bucket's values, in call order (the trainer's pieces)."""
        return [size for count, size in self.runs for _ in range(count)]

    def ready_fraction(self, after: float, size: float) -> float:
        """When a bucket of ``size`` values is ready, as a fraction of the backward window, from
        ``after``, the values of that bucket and those after it: the values of buckets 2..k over
        those of buckets 2..C (the module's docstring); a single bucket at the end."""
        if self.calls == 1:
            return 1.0
        first = self.runs[0][1]
        return (self.values - after + size - first) / (self.values - first)

    def ready_fractions(self) -> list[float]:
        """Every bucket's ``ready_fraction``, in call order (the trainer's release times)."""
        fractions, after = [], self.values
        for size in self.sizes():
            fractions.append(self.ready_fraction(after, size))
            after -= size
        return fractions

    def corners(self) -> Iterator[tuple[float, float, int]]:
        """Each run's first and last bucket: (its values, the values of it and the buckets after it,
        how many calls from it to the last). Inside a run a bucket's ready time and the seconds of the
        calls from it to the last are both linear in k, so the latest end over those buckets is at
        one of these (``collectives.bucket_wait``)."""
        calls, after = self.calls, self.values
        for count, size in self.runs:
            yield size, after, calls
            if count > 1:
                yield size, after - (count - 1) * size, calls - count + 1
            calls, after = calls - count, after - count * size


def caps_values(exchange: ExchangeSpec, bytes_per_value: float) -> tuple[float, float]:
    """The first bucket's cap and every later one's, in values (``exchange.first_bucket_mb`` and
    ``bucket_cap_mb``, MiB of unencoded values as PyTorch counts them): the first 1 MiB where
    ``bucket_cap_mb`` is left at its default, else ``bucket_cap_mb`` too, as PyTorch does."""
    cap_mb = exchange.bucket_cap_mb or DEFAULT_BUCKET_CAP_MB
    first_mb = exchange.first_bucket_mb
    if first_mb is None:
        first_mb = DEFAULT_FIRST_BUCKET_MB if exchange.bucket_cap_mb is None else cap_mb
    to_values = BYTES_PER_MIB / bytes_per_value
    return first_mb * to_values, cap_mb * to_values


def layout_of(exchange: ExchangeSpec, values: float, bytes_per_value: float) -> BucketLayout:
    """The buckets of an exchange of ``values`` (``calls = "buckets"``): the model's tensors
    (``exchange.tensor_values``; a fragment its share of each) taken in reverse, each bucket closed
    once it holds its cap (``assigned``); without tensors, buckets of exactly their caps, the last
    holding the rest (``filled``)."""
    first_cap, cap = caps_values(exchange, bytes_per_value)
    if exchange.tensor_values is None:
        return filled(values, first_cap, cap)
    share = values / sum(exchange.tensor_values)
    return assigned([size * share for size in reversed(exchange.tensor_values)], first_cap, cap)


def assigned(tensors: Sequence[float], first_cap: float, cap: float) -> BucketLayout:
    """``tensors`` (values each, in the order the backward pass produces them) in buckets as PyTorch's
    ``_compute_bucket_assignment_by_size`` makes them: a tensor goes whole into the open bucket, which
    closes once it holds at least its cap (``first_cap`` for the first, ``cap`` after)."""
    runs: list[list] = []
    held, limit = 0.0, first_cap
    for size in tensors:
        held += size
        if held >= limit:
            add_bucket(runs, held)
            held, limit = 0.0, cap
    if held > 0:
        add_bucket(runs, held)
    return BucketLayout(tuple((int(count), size) for count, size in runs))


def add_bucket(runs: list[list], size: float, count: int = 1) -> None:
    """``count`` buckets of ``size`` values after the others: the last run longer where it is of
    that size."""
    if runs and runs[-1][1] == size:
        runs[-1][0] += count
    else:
        runs.append([count, size])


def filled(values: float, first_cap: float, cap: float) -> BucketLayout:
    """``values`` that a bucket may cut anywhere: a first bucket of ``first_cap``, then buckets of
    ``cap``, the last holding the rest (one bucket where ``first_cap`` holds them all)."""
    if values <= first_cap:
        return BucketLayout(((1, values),))
    rest = values - first_cap
    full = max(0, math.ceil(rest / cap) - 1)
    last = rest - full * cap
    runs: list[list] = [[1, first_cap]]
    if full:
        add_bucket(runs, cap, full)
    add_bucket(runs, last)
    return BucketLayout(tuple((int(count), size) for count, size in runs))
