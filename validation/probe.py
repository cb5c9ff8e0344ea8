"""The trainer's exchange over the emulated links, timed once for M = 2 .. N islands.

Run in every island's namespace as ``python -m islands.validation.probe`` (started by
``calibration``): each rank joins gloo over its shaped interface, and for every group of the
first M ranks times ``REPEATS`` exchanges exactly as the trainer's exchange thread does them (a
one-value barrier, then ``quantize.average`` through the paced cross-island group), of a tiny tensor
(what remains at latency 0 is the fixed cost: gloo's messages, thread hand-offs, encode and decode)
and of a large one (``$ISLANDS_PROBE_LARGE_VALUES`` bf16 values: how fast it really moves bytes).
Like the trainer's ``sync_durations`` a duration runs from the first member's start to the last
member's end. Rank 0 prints one JSON line: {"tiny": {M: median s}, "large": {M: median s}}.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from islands.trainer.comm import TorchGroup
from islands.trainer.paced import paced_from_environment
from islands.trainer.quantize import BLOCK_VALUES, average

REPEATS = {"tiny": 15, "large": 5}
BITS = {"tiny": 32, "large": 16}
LARGE_VARIABLE = "ISLANDS_PROBE_LARGE_VALUES"


def timed_exchanges(group, size: str, values: int) -> list[tuple[float, float]]:
    tensor = torch.randn(values, generator=torch.Generator().manual_seed(0))
    spans = []
    for _ in range(REPEATS[size]):
        group.barrier()
        start_s = time.monotonic()
        average(tensor, group, BITS[size])
        spans.append((start_s, time.monotonic()))
    return spans


def median_durations(world_group: TorchGroup, spans: list[tuple[float, float]]) -> float:
    everyone = [s for s in world_group.all_gather_object(spans) if s]
    return statistics.median(max(end for _, end in repeat) - min(start for start, _ in repeat)
                             for repeat in zip(*everyone))


def main() -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=120))
    world_group = TorchGroup(list(range(world)), dist.group.WORLD)
    medians: dict[str, dict[int, float]] = {"tiny": {}, "large": {}}
    for members in range(2, world + 1):
        handle = dist.new_group(list(range(members)))
        group = paced_from_environment(TorchGroup(list(range(members)), handle)) if rank < members else None
        for size, values in (("tiny", BLOCK_VALUES * members), ("large", int(os.environ[LARGE_VARIABLE]))):
            spans = timed_exchanges(group, size, values) if group else []
            medians[size][members] = median_durations(world_group, spans)
    if rank == 0:
        print(json.dumps(medians), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
