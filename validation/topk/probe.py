"""The trainer's top-k exchange of a scaled case, timed alone on unshaped links at zero latency.

Run in every island's namespace as ``python -m islands.validation.topk.probe`` (started by
``costs``), with ``$ISLANDS_PROBE_SCENARIO`` the scaled scenario's file: each rank joins gloo,
builds the trainer's exchange of that scenario (``sync.Exchanger`` with its top-k layout and its
``network.gather``, through the object store host the launch spec names, or a directory
``$ISLANDS_PROBE_STORE_DIR`` in-process), warms it up as the trainer does, and times ``REPEATS``
exchanges of its largest fragment's values, keyed by the run's own outer steps (so every round
draws the K peers the real run draws). What is left when the bytes take no time and no latency is
slept is the exchange's own cost: encoding, the screening's all-gather, each gloo or HTTP request's
fixed cost, the store's file writes, decoding and averaging the K payloads. Split where the trainer's
trace splits it (``exchange_probe.repeat_durations``): ``screen``, before the transfer (the trace's
``idle``), and ``average``, the sync's own span. Rank 0 prints one JSON line:
{"screen": median s, "average": median s, "values": values exchanged}.
"""

from __future__ import annotations

import json
import os
import statistics
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from islands.scenarios import Scenario, ScenarioSource
from islands.schedules import schedule_of
from islands.schedules.compression import TopK, whole_values
from islands.schedules.gather import STORE
from islands.trainer.core.memory import start_rank_process
from islands.trainer.core.tracing import Clock
from islands.trainer.exchange.comm import TorchGroup
from islands.trainer.exchange.gathering import gathering_of
from islands.trainer.exchange.object_store import DirectoryStore, HttpStore, ObjectStore
from islands.trainer.exchange.sync import Exchanger
from islands.trainer.runtime.paced import paced
from islands.trainer.runtime.spec import launch_spec

from ..exchange_probe import repeat_durations

REPEATS = 11
SCENARIO_VARIABLE = "ISLANDS_PROBE_SCENARIO"
STORE_DIR_VARIABLE = "ISLANDS_PROBE_STORE_DIR"


def probe_values(scenario: Scenario) -> int:
    """The values of the scenario's largest fragment: the exchange the probe times."""
    values, _, _ = schedule_of(scenario).priced_fragments(scenario)
    return whole_values(max(values))


def probe_store(scenario: Scenario) -> ObjectStore | None:
    """The store the probe's exchanges go through: the host the launch spec names, else a directory."""
    if scenario.network.gather != STORE:
        return None
    address = launch_spec().object_store
    return HttpStore(address) if address else DirectoryStore(Path(os.environ[STORE_DIR_VARIABLE]))


def timed(exchanger: Exchanger, values: int, repeats: int) -> list[tuple[float, float, float]]:
    """(handed over, transfer started, done) of each exchange, the round of outer step r the r-th."""
    tensor = torch.randn(values, generator=torch.Generator().manual_seed(0))
    spans = []
    for outer_step in range(repeats):
        exchanger.cross.barrier()
        handed_s = exchanger.clock.now()
        exchange = exchanger.launch(tensor, (outer_step, 0)).result()
        spans.append((handed_s, exchange.started_s, exchange.done_s))
    return spans


def main() -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    start_rank_process()
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=120))
    world_group = TorchGroup(list(range(world)), dist.group.WORLD)
    scenario = ScenarioSource.read(os.environ[SCENARIO_VARIABLE]).scenario
    cross = paced(TorchGroup(list(range(world)), dist.group.WORLD), launch_spec().wan_pacer)
    values = probe_values(scenario)
    exchanger = Exchanger(
        cross,
        None,
        scenario.schedule.bits,
        Clock(),
        topk=TopK.of(scenario.schedule),
        gathering=gathering_of(scenario, probe_store(scenario)),
    )
    exchanger.warm_up(values, world)
    world_group.barrier()
    durations = repeat_durations(world_group, timed(exchanger, values, REPEATS))
    exchanger.close()
    if rank == 0:
        medians = {part: statistics.median(durations[part]) for part in ("screen", "average")}
        print(json.dumps({**medians, "values": values, "repeats": durations}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
