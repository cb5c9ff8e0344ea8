"""The trainer's whole exchange path over the emulated links, timed once for M = 2 .. N islands.

Run in every island's namespace as ``python -m islands.validation.exchange_probe`` (started by
``calibration``): each rank joins gloo over its shaped interface, and for every group of the first M
ranks (M from ``$ISLANDS_PROBE_MIN_MEMBERS``, default 2, to N, the world size) times ``REPEATS``
exchanges exactly as the trainer runs them: after a one-value barrier, ``sync.Exchanger`` on its
background thread through the paced cross-island group, that is screening
(``robust.contribution_stats``: finite check and fp64 norm of the tensor, then an all-gather of those
two numbers) followed by ``quantize.average`` (encode, reduce-scatter, decode and sum, all-gather,
decode). It does so for a tiny tensor (``tiny_values``: what is left is the fixed cost: gloo's
messages, thread hand-offs), a large one (``$ISLANDS_PROBE_LARGE_VALUES`` bf16 values: what
scales with the values and with the bytes) and a medium one, a quarter of the large (with the large
one, it tells the rate from what the links send at once at the start), the medium one again averaged in
``CALLS`` calls (``calls``: what one more call costs an exchange whose calls carry data,
``exchange.calls``); for each other wire
format of ``$ISLANDS_PROBE_WIRE_BITS`` (say ``8,32``) a large exchange in that format (``large@8``,
``wire_values``), since the exchange's CPU work goes by values, not bytes: int8 moves twice the
values of bf16 per byte; and for each number of calls of ``$ISLANDS_PROBE_CALLS`` (say ``40,80``) the
large exchange in that many calls (``large/40``, ``calls_size``): a case's own exchange, whose calls
overlap one another's per-value work and keep its connections busy, is not the one buffer's rate
plus a cost per call (docs/validation.md, "One FIFO per egress"). Each exchange gives three
durations, the first two split where the trainer's trace splits them:

* ``screen``: from a member handing its tensor over to the average's start (``Exchange.started_s``),
  the trace's ``idle`` before a sync; the mean over the members;
* ``average``: from the first member's start to the last member's end, the trace's sync duration
  (``sync_durations``);
* ``spread``: from the first member's end to the last one's (``network.exchange_end_spread_s``).

Every rank starts its clock after one barrier, as the trainer does. Rank 0 prints one JSON line:
{"screen": {"tiny": {M: median s}, "medium": {...}, "large": {...}, "large@8": {...}}, "average": {...},
"spread": {...}}.
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Callable
from datetime import timedelta

import torch
import torch.distributed as dist

from islands.trainer.core.memory import start_rank_process
from islands.trainer.core.tracing import Clock
from islands.trainer.exchange.comm import TorchGroup
from islands.trainer.exchange.quantize import BLOCK_VALUES
from islands.trainer.exchange.sync import Exchanger
from islands.trainer.runtime.paced import paced
from islands.trainer.runtime.spec import launch_spec
from islands.units import BITS_PER_BYTE

REPEATS = {"tiny": 15, "calls": 5, "medium": 5, "large": 5}
BITS = {"tiny": 32, "calls": 16, "medium": 16, "large": 16}
CALLS = 16  # the ``calls`` exchange's collective calls, on the medium tensor's values
BYTES_PER_LARGE_VALUE = BITS["large"] // BITS_PER_BYTE
MEDIUM_FRACTION = 0.25  # the medium tensor's values over the large one's
LARGE_VARIABLE = "ISLANDS_PROBE_LARGE_VALUES"
MIN_MEMBERS_VARIABLE = "ISLANDS_PROBE_MIN_MEMBERS"
WIRE_BITS_VARIABLE = "ISLANDS_PROBE_WIRE_BITS"
CALLS_VARIABLE = "ISLANDS_PROBE_CALLS"
PARTS = ("screen", "average", "spread")
# The trainer's exchanges at validation scale are at most its model (scaling.MODEL_PARAMETERS, 2.5M
# values; tests/test_validate_compare.py holds the two equal), and the exchange's CPU work per value
# grows with the tensor (caches; above glibc's largest mmap threshold, 32 MiB, page faults on every
# exchange too), so no probe exchange is larger: int8 among three islands at 100 Mbit/s reached
# 0.68-0.83 of the rate with 8.4M values and 0.77-0.88 with 2.5M, and a calibration probed at 8.4M
# predicted the int8 cases' syncs 2-8% long; bf16 among four islands at 100 Mbit/s reached 0.83 with
# a second of bytes (6.25M values) and 0.92 with 2.5M, and the first predicted a four-island bf16
# run's syncs at 128 Mbit/s 9-12% long (issue 29).
MAX_PROBE_VALUES = 2_500_000


def large_probe_values(probe_bytes: int) -> int:
    """The bf16 values of the large exchange: ``probe_bytes`` of them, never more than
    ``MAX_PROBE_VALUES``."""
    return min(probe_bytes // BYTES_PER_LARGE_VALUE, MAX_PROBE_VALUES)


def tiny_values(members: int) -> int:
    """One block of values per member: the smallest tensor the average splits into M chunks."""
    return BLOCK_VALUES * members


def medium_values(large_values: int) -> int:
    return round(large_values * MEDIUM_FRACTION)


def wire_size(bits: int) -> str:
    """The probe's name for its large exchange in wire format ``bits`` (other than bf16's)."""
    return f"large@{bits}"


def wire_values(large_values: int, bits: int) -> int:
    """The values of ``wire_size(bits)``: as many bytes as the large bf16 exchange (int8: twice its
    values), never more than ``MAX_PROBE_VALUES``."""
    return min(large_values * BITS["large"] // bits, MAX_PROBE_VALUES)


def calls_size(calls: int) -> str:
    """The probe's name for its large exchange (bf16) in ``calls`` collective calls."""
    return f"large/{calls}"


def probe_sizes(
    members: int, large_values: int, wire_bits: list[int], calls: tuple[int, ...] = ()
) -> dict[str, tuple[int, int, int]]:
    """Each exchange the probe times among ``members``: name -> (values, bits, repeats)."""
    sizes = {
        "tiny": tiny_values(members),
        "calls": medium_values(large_values),
        "medium": medium_values(large_values),
        "large": large_values,
    }
    timed = {size: (values, BITS[size], REPEATS[size]) for size, values in sizes.items()}
    wires = {
        wire_size(bits): (wire_values(large_values, bits), bits, REPEATS["large"])
        for bits in wire_bits
    }
    split = {calls_size(c): (large_values, BITS["large"], REPEATS["large"]) for c in calls}
    return timed | wires | split


def calls_of_size(size: str) -> Callable[[int], int]:
    """The collective calls of the probe's exchange ``size``: ``CALLS`` for ``calls``, C for
    ``calls_size(C)``, else one."""
    count = CALLS if size == "calls" else int(size.split("/")[1]) if "/" in size else 1
    return lambda values: count


def timed_exchanges(
    exchanger: Exchanger, values: int, repeats: int
) -> list[tuple[float, float, float]]:
    """(handed over, average started, average done) of each exchange, on the run's clock."""
    tensor = torch.randn(values, generator=torch.Generator().manual_seed(0))
    spans = []
    for _ in range(repeats):
        exchanger.cross.barrier()
        handed_s = exchanger.clock.now()
        exchange = exchanger.launch(tensor).result()
        spans.append((handed_s, exchange.started_s, exchange.done_s))
    return spans


def repeat_durations(
    world_group: TorchGroup, spans: list[tuple[float, float, float]]
) -> dict[str, list[float]]:
    """Per repeat, the mean screening time per member, first start to last end, and first end to last
    end (``PARTS``)."""
    everyone = [s for s in world_group.all_gather_object(spans) if s]
    return {
        "screen": [
            statistics.fmean(started - handed for handed, started, _ in repeat)
            for repeat in zip(*everyone)
        ],
        "average": [
            max(done for _, _, done in repeat) - min(started for _, started, _ in repeat)
            for repeat in zip(*everyone)
        ],
        "spread": [
            max(done for _, _, done in repeat) - min(done for _, _, done in repeat)
            for repeat in zip(*everyone)
        ],
    }


def median_durations(
    world_group: TorchGroup, spans: list[tuple[float, float, float]]
) -> dict[str, float]:
    """The medians over repeats of ``repeat_durations``."""
    return {
        part: statistics.median(values)
        for part, values in repeat_durations(world_group, spans).items()
    }


def main() -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    start_rank_process()
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=120))
    world_group = TorchGroup(list(range(world)), dist.group.WORLD)
    world_group.barrier()
    clock = Clock()
    medians: dict[str, dict[str, dict[int, float]]] = {part: {} for part in PARTS}
    large_values = int(os.environ[LARGE_VARIABLE])
    wire_bits = [int(bits) for bits in os.environ.get(WIRE_BITS_VARIABLE, "").split(",") if bits]
    calls = tuple(int(c) for c in os.environ.get(CALLS_VARIABLE, "").split(",") if c)
    pacer = launch_spec().wan_pacer
    for members in range(int(os.environ.get(MIN_MEMBERS_VARIABLE, "2")), world + 1):
        handle = dist.new_group(list(range(members)))
        cross = paced(TorchGroup(list(range(members)), handle), pacer) if rank < members else None
        for size, (values, bits, repeats) in probe_sizes(
            members, large_values, wire_bits, calls
        ).items():
            spans = []
            if cross is not None:
                exchanger = Exchanger(cross, None, bits, clock, calls=calls_of_size(size))
                spans = timed_exchanges(exchanger, values, repeats)
                exchanger.close()
            for part, seconds in median_durations(world_group, spans).items():
                medians[part].setdefault(size, {})[members] = seconds
    if rank == 0:
        print(json.dumps(medians), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
