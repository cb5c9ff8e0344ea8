"""``islands calibrate``'s measurement: one process per host, under torchrun or in every island's
namespace of an emulated WAN, writing a network profile (``scenarios/profile.py``).

Every collective goes through the group the trainer uses (``paced``, with the launch spec's pacer: the emulated
WAN's pacer where there is one, the plain gloo group over a real network), so the profile measures
what the trainer gets. In turn, with every other host waiting at a barrier:

* **round trips**: for every pair, a one-value copy there and back, ``PINGS`` times; the median;
* **rates**: for every ordered pair, a copy of ``SMALL_BYTES`` and of ever larger payloads (x4)
  until one lasts ``RATE_SECONDS``, timed at the receiver; the rate is the slope between the smallest
  and the largest (what latency and the start cost add cancels). A host's uplink is the fastest
  copy it sent, its downlink the fastest it received: alone, a copy moves at min(sender's uplink,
  receiver's downlink);
* **the exchange**: the trainer's own (``sync.Exchanger``: screening, then the quantised average)
  among all hosts, of a tiny, a medium and a large tensor (the large one about ``EXCHANGE_SECONDS`` of
  ring volume at the slowest pair's rate), timed as ``validation/exchange_probe.py`` times it. From them, as
  the built-in calibration derives its keys (``calibration.exchange_costs``): the screening per
  value, the fixed cost and the end spread; and from the medium and large exchanges the rate the
  exchange achieves (over the slowest pair's, which scales every host's rates) and what the links send
  at once (``calibration.rate_and_burst``, the burst within the medium exchange's volume, and none
  where the repeats' scatter could fit none: ``fitted_burst_bytes``).

Rank 0 writes the profile atomically. Hosts are named by ``--name`` (or ``ISLANDS_HOST_NAMES``, a
JSON list by rank, which ``calibrate --emulate`` sets), else by host name; the names must differ.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import socket
import statistics
import time
from datetime import timedelta
from itertools import combinations, permutations, product
from pathlib import Path

import torch
import torch.distributed as dist

from islands.scenarios.model import PairLatency
from islands.scenarios.profile import ExchangeCost, Host, NetworkProfile, host_rates
from islands.trainer.core.memory import start_rank_process
from islands.trainer.core.tracing import Clock
from islands.trainer.exchange.comm import TorchGroup
from islands.trainer.exchange.sync import Exchanger
from islands.trainer.runtime.paced import paced
from islands.trainer.runtime.spec import launch_spec
from islands.units import BITS_PER_BYTE, BITS_PER_GBIT, MS_PER_S

from .calibration import exchange_costs, probe_volume_bytes, rate_and_burst
from .exchange_probe import (
    BITS,
    BYTES_PER_LARGE_VALUE,
    PARTS,
    REPEATS,
    calls_of_size,
    medium_values,
    repeat_durations,
    timed_exchanges,
    tiny_values,
)

NAMES_VARIABLE = "ISLANDS_HOST_NAMES"
LABEL_VARIABLE = "ISLANDS_PROFILE_LABEL"
PINGS = 7
SMALL_BYTES = 64 * 1024
MAX_BYTES = 1 << 28  # the largest copy (256 MiB): on a LAN that is well past RATE_SECONDS
RATE_SECONDS = 0.5
EXCHANGE_SECONDS = 1.0  # the large exchange's ring volume at the slowest pair's rate
MAX_EXCHANGE_VALUES = 1 << 24  # and at most this many values (64 MB in fp32)
SCATTER = "average_scatter"  # the timings' key for each exchange's scatter over its repeats


def pair_group(members: tuple[int, int]):
    """The paced two-member group of ``members`` (global ranks); every rank must call this in turn."""
    handle = dist.new_group(list(members))
    if dist.get_rank() not in members:
        return None
    return paced(TorchGroup(list(members), handle), launch_spec().wan_pacer, islands=list(members))


def copy_s(group, source: int, nbytes: int) -> float:
    """Seconds the receiver of a one-way copy of ``nbytes`` from member ``source`` waits for it."""
    tensor = torch.zeros(max(1, nbytes), dtype=torch.uint8)
    group.barrier()
    start = time.perf_counter()
    group.broadcast_(tensor, src=source)
    return time.perf_counter() - start


def round_trip_s(group) -> float:
    """Median over ``PINGS`` of a one-value copy from member 0 to member 1 and back, at member 0."""
    spans = []
    for _ in range(PINGS):
        group.barrier()
        start = time.perf_counter()
        group.broadcast_(torch.zeros(1), src=0)
        group.broadcast_(torch.zeros(1), src=1)
        spans.append(time.perf_counter() - start)
    return statistics.median(spans)


def copy_rate_bytes_per_s(group, source: int) -> float:
    """The slope of the copy time in its bytes, from ``SMALL_BYTES`` up to a copy of ``RATE_SECONDS``;
    the receiver decides when the copies are long enough and tells the sender."""
    receiver = 1 - source
    small_s = copy_s(group, source, SMALL_BYTES)
    nbytes, seconds = SMALL_BYTES, small_s
    while True:
        done = torch.tensor([1.0 if seconds >= RATE_SECONDS or nbytes >= MAX_BYTES else 0.0])
        group.broadcast_(done, src=receiver)
        if done.item():
            break
        nbytes *= 4
        seconds = copy_s(group, source, nbytes)
    slope = (nbytes - SMALL_BYTES) / max(seconds - small_s, 1e-9)
    return slope if group.rank == receiver else float("nan")


def measure_pairs(
    world: int, world_group: TorchGroup
) -> tuple[dict[tuple[int, int], float], dict[tuple[int, int], float]]:
    """(round trip seconds by pair, bytes per second by ordered pair), known on every rank."""
    groups = {pair: pair_group(pair) for pair in combinations(range(world), 2)}
    rtt, rate = {}, {}
    for pair, group in groups.items():
        world_group.barrier()
        if group is not None:
            rtt[pair] = round_trip_s(group)
    for sender, receiver in permutations(range(world), 2):
        pair = (min(sender, receiver), max(sender, receiver))
        world_group.barrier()
        if groups[pair] is not None:
            rate[(sender, receiver)] = copy_rate_bytes_per_s(groups[pair], pair.index(sender))
    merged_rtt: dict = {}
    merged_rate: dict = {}
    for host, (mine_rtt, mine_rate) in enumerate(world_group.all_gather_object((rtt, rate))):
        merged_rtt.update(
            {pair: s for pair, s in mine_rtt.items() if pair[0] == host}
        )  # member 0 timed it
        merged_rate.update(
            {pair: r for pair, r in mine_rate.items() if pair[1] == host}
        )  # the receiver did
    return merged_rtt, merged_rate


def exchange_timings(world: int, large_values: int) -> dict:
    """The probe's medians for the exchange among all hosts (``validation/exchange_probe.py``'s format)."""
    clock = Clock()
    cross = paced(TorchGroup(list(range(world)), dist.group.WORLD), launch_spec().wan_pacer)
    world_group = TorchGroup(list(range(world)), dist.group.WORLD)
    sizes = {
        "tiny": tiny_values(world),
        "calls": medium_values(large_values),
        "medium": medium_values(large_values),
        "large": large_values,
    }
    timings: dict = {part: {} for part in (*PARTS, SCATTER)}
    for size, values in sizes.items():
        exchanger = Exchanger(cross, None, BITS[size], clock, calls=calls_of_size(size))
        spans = timed_exchanges(exchanger, values, REPEATS[size])
        exchanger.close()
        repeats = repeat_durations(world_group, spans)
        for part, seconds in repeats.items():
            timings[part][size] = {str(world): statistics.median(seconds)}
        timings[SCATTER][size] = {str(world): median_deviation(repeats["average"])}
    timings["large_values"] = large_values
    return timings


def median_deviation(values: list[float]) -> float:
    """The median absolute deviation from the median: the repeats' scatter, robust to one outlier."""
    middle = statistics.median(values)
    return statistics.median(abs(value - middle) for value in values)


def fitted_burst_bytes(
    world: int, timings: dict, rate_bits_per_s: float, bucket_bytes: float
) -> float:
    """The burst the exchange's links send at once (``calibration.rate_and_burst``, within
    ``bucket_bytes``), or 0 where the timings' own scatter could fit none: with the medium and the
    large exchange each moved by up to its scatter, some fit has no burst (a bucket below what the
    probe resolves, such as a tbf bucket of 64 KiB at 200 Mbit/s: 3 ms of data)."""
    key = str(world)
    burst_fraction = rate_and_burst(world, timings, rate_bits_per_s, bucket_bytes)[1]
    for medium_sign, large_sign in product((-1, 1), repeat=2):
        moved = copy.deepcopy(timings)
        moved["average"]["medium"][key] += medium_sign * timings[SCATTER]["medium"][key]
        moved["average"]["large"][key] += large_sign * timings[SCATTER]["large"][key]
        if rate_and_burst(world, moved, rate_bits_per_s, bucket_bytes)[1] <= 0:
            return 0.0
    return burst_fraction * bucket_bytes


def profile_of(
    names: list[str], rtt: dict, rate: dict, timings: dict, label: str
) -> NetworkProfile:
    """The profile from the measurements (``scenarios/profile.py`` says how a scenario takes it)."""
    world = len(names)
    links = host_rates(range(world), rate)  # bytes per second
    slowest_bits_per_s = min(min(up, down) for up, down in links) * BITS_PER_BYTE
    # the burst is fitted as the built-in calibration fits it, within the medium exchange's volume here
    # (a real host's token bucket is unknown), and kept only where the timings resolve it
    medium_bytes = probe_volume_bytes(world, medium_values(timings["large_values"]))
    burst_bytes = fitted_burst_bytes(world, timings, slowest_bits_per_s, medium_bytes)
    costs = exchange_costs(world, timings, slowest_bits_per_s, burst_bytes)
    ratio = costs.ratio
    hops = 2 * (world - 1)
    slowest_one_way_s = max(rtt.values()) / 2
    return NetworkProfile(
        label=label,
        hosts=tuple(
            Host(
                name,
                up * BITS_PER_BYTE / BITS_PER_GBIT * ratio,
                down * BITS_PER_BYTE / BITS_PER_GBIT * ratio,
            )
            for name, (up, down) in zip(names, links)
        ),
        rtt_ms=tuple(
            PairLatency((names[a], names[b]), seconds * MS_PER_S)
            for (a, b), seconds in sorted(rtt.items())
        ),
        exchange=ExchangeCost(
            members=world,
            cpu_s_per_value=costs.cpu_s_per_value,
            hop_overhead_s=(costs.overhead_s - hops * slowest_one_way_s) / hops,
            end_spread_s=costs.end_spread_s,
            burst_bytes=burst_bytes,
        ),
    )


def host_name(rank: int, given: str | None) -> str:
    listed = os.environ.get(NAMES_VARIABLE)
    if given:
        return given
    return json.loads(listed)[rank] if listed else socket.gethostname()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="measure a network profile among the hosts of a torchrun job"
    )
    parser.add_argument("--out", required=True)
    parser.add_argument("--name", default=None)
    args = parser.parse_args(argv)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    start_rank_process()
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=600))
    world_group = TorchGroup(list(range(world)), dist.group.WORLD)
    names = world_group.all_gather_object(host_name(rank, args.name))
    if len(set(names)) != world:
        raise SystemExit(
            f"islands calibrate: two hosts have one name ({', '.join(names)}): give each --name"
        )
    rtt, rate = measure_pairs(world, world_group)
    ring_share = 2 * (world - 1) / world  # ring volume over the tensor's bytes
    large_values = int(min(rate.values()) * EXCHANGE_SECONDS / ring_share / BYTES_PER_LARGE_VALUE)
    timings = exchange_timings(
        world, min(max(large_values, 16 * tiny_values(world)), MAX_EXCHANGE_VALUES)
    )
    if rank == 0:
        label = os.environ.get(LABEL_VARIABLE) or f"{world} hosts: {', '.join(names)}"
        profile_of(names, rtt, rate, timings, label).save(Path(args.out))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
