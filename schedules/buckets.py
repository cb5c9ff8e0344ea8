"""DDP's gradient buckets during the backward pass, declared once for both executors.

A gradient exchanged in buckets while the backward pass runs (``exchange.calls = "buckets"``,
``schedule.backward_overlap`` = f > 0) is all-reduced call by call, each call on one bucket and no
earlier than the backward pass has produced that bucket, in the order the backward pass produces
them. ``BucketLayout`` says how many values each call carries and when, as a fraction of the
backward window, its bucket is ready; the simulator prices the calls from it
(``simulator.network.collectives.bucket_wait``) and the trainer cuts its flat gradient and releases
its calls from it (``trainer.exchange.sync``).

The backward window runs from the launch (where ``backward_overlap`` puts it: the first bucket is
ready then) to the end of the step's compute (the last bucket is ready then); the buckets between
are ready at an even pace, bucket k at (k - 1) / (C - 1) of the window. One bucket is ready at the
end.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from islands.scenarios.model import ExchangeSpec

Run = tuple[int, float]  # (buckets, values in each): buckets of one size in a row


@dataclass(frozen=True)
class BucketLayout:
    """An exchange's buckets in call order (the order the backward pass produces them), as runs of
    buckets of one size: a layout of equal buckets holds one or two runs however many calls."""

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

    def ready_fraction(self, call: int) -> float:
        """When bucket ``call`` (1..C) is ready, as a fraction of the backward window: (k - 1) / (C - 1);
        a single bucket at the end."""
        calls = self.calls
        return 1.0 if calls == 1 else (call - 1) / (calls - 1)

    def corners(self) -> Iterator[tuple[int, float]]:
        """Each run's first and last bucket: (k, values of buckets k..C). Where a bucket's ready time
        and the seconds of the calls from it to the last are both linear in k (inside a run), the
        latest end over those buckets is at one of these (``collectives.bucket_wait``)."""
        call, after = 1, self.values
        for count, size in self.runs:
            yield call, after
            if count > 1:
                yield call + count - 1, after - (count - 1) * size
            call, after = call + count, after - count * size


def layout_of(exchange: ExchangeSpec, values: float, bytes_per_value: float) -> BucketLayout:
    """The buckets of an exchange of ``values`` (``exchange.calls = "buckets"``): full buckets of
    ``bucket_cap_mb`` MiB of unencoded values, the last holding the rest."""
    full = exchange.bucket_bytes / bytes_per_value
    calls = max(1, math.ceil(values * bytes_per_value / exchange.bucket_bytes))
    last = values - (calls - 1) * full
    runs = ((calls - 1, full), (1, last)) if calls > 1 else ((1, values),)
    return BucketLayout(runs)
