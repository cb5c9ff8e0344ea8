"""Where the links are: access links into the regions' cores, and backbones between the cores.

Every worker owns an access link (an uplink and a downlink) into its region's core, and a core never
blocks. A backbone joins two regions' cores with a link each way (``[[backbone]]``): bytes between
workers in different regions cross the sender's uplink, the backbone from the sender's region to the
receiver's, and the receiver's downlink, and under the flow model share each of them with every
other flow on it. The one-way latency between two workers is the sender's access latency, plus the
backbone's, plus the receiver's, or half the round trip measured between their islands where one is
given (``[[latency]]``, ``network.rtt_csv``). Without regions there is one core and no backbone: the
star.

A ring over workers in several regions crosses a backbone at every hop whose two ends are in
different regions. Every hop of a ring collective carries the same bytes per worker, so a backbone
crossed k times carries k times that: the ring's transfer lists it k times, and max-min sharing (and
the closed form) give the ring 1/k of it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import permutations
from operator import itemgetter

import numpy as np

from islands.scenarios import Scenario, Worker
from islands.units import BITS_PER_BYTE, BITS_PER_GBIT, MS_PER_S

from .links import Link

BACKBONE_WORKER = -1  # the links table's worker column for a backbone
BACKBONE = "backbone"  # and its island column; the direction column names the two regions, "us>eu"
EXACT_REGIONS = 7  # an optimised ring tries every order of up to this many regions (720 tours)
# regions and backbones are declared for every island (and a decoupled syncer) or for none (scenarios.regions)
DECLARED_EVERYWHERE = "a region is None where regions are declared"


@dataclass
class Topology:
    uplinks: dict[int, Link]
    downlinks: dict[int, Link]
    access_latency_s: dict[int, float]
    region: dict[int, str | None]
    backbones: dict[tuple[str, str], Link] = field(default_factory=dict)  # (from region, to region)
    backbone_latency_s: dict[frozenset[str], float] = field(default_factory=dict)
    cycles: dict[tuple[str, ...], tuple[str, ...]] = field(default_factory=dict)
    island: dict[int, str] = field(default_factory=dict)
    measured_s: dict[frozenset[str], float] = field(
        default_factory=dict
    )  # one way, by pair of islands

    @classmethod
    def of(cls, scenario: Scenario, workers: list[Worker]) -> Topology:
        topology = cls(
            uplinks={
                w.rank: Link(w.rank, "up", w.upload_bytes_per_s, burst_bytes=w.upload_burst_bytes)
                for w in workers
            },
            downlinks={
                w.rank: Link(
                    w.rank, "down", w.download_bytes_per_s, burst_bytes=w.download_burst_bytes
                )
                for w in workers
            },
            access_latency_s={w.rank: w.latency_s for w in workers},
            region={w.rank: w.region for w in workers},
            island={w.rank: w.island for w in workers},
            measured_s={
                frozenset(pair.between): pair.rtt_ms / 2 / MS_PER_S for pair in scenario.latencies
            },
        )
        for backbone in scenario.backbones:
            a, b = backbone.between
            rate_bytes_per_s = backbone.bandwidth_gbps * BITS_PER_GBIT / BITS_PER_BYTE
            for source, target in ((a, b), (b, a)):
                topology.backbones[(source, target)] = Link(
                    BACKBONE_WORKER, f"{source}>{target}", rate_bytes_per_s
                )
            topology.backbone_latency_s[frozenset(backbone.between)] = (
                backbone.latency_ms / MS_PER_S
            )
        return topology

    @staticmethod
    def hops(ring: tuple) -> list[tuple]:
        """Each member of a ring (of workers or regions) with its successor, the last with the first."""
        return list(zip(ring, ring[1:] + ring[:1]))

    def crossing(self, source: str | None, target: str | None) -> tuple[Link, ...]:
        """The backbone from region ``source`` to region ``target``; none inside a region."""
        if source == target:
            return ()
        assert source is not None and target is not None, DECLARED_EVERYWHERE
        return (self.backbones[(source, target)],)

    def core_latency_s(self, source: str | None, target: str | None) -> float:
        if source == target:
            return 0.0
        assert source is not None and target is not None, DECLARED_EVERYWHERE
        return self.backbone_latency_s[frozenset((source, target))]

    def named_region(self, rank: int) -> str:
        """The region of ``rank``, where regions are declared."""
        region = self.region[rank]
        assert region is not None, DECLARED_EVERYWHERE
        return region

    @cached_property
    def arrays(self) -> RankArrays:
        return RankArrays.of(self)

    def slowest_hop_s(self, senders: Sequence[int], receivers: Sequence[int]) -> float:
        """The largest ``hop_latency_s`` from ``senders[i]`` to ``receivers[i]``, over arrays (a ring of
        thousands in microseconds)."""
        arrays = self.arrays
        sender = np.fromiter(senders, np.intp, len(senders))
        receiver = np.fromiter(receivers, np.intp, len(receivers))
        hop_s = (
            arrays.latency_s[sender]
            + arrays.core_latency_s[arrays.region[sender], arrays.region[receiver]]
            + arrays.latency_s[receiver]
        )
        if self.measured_s:
            measured = arrays.measured_s[arrays.island[sender], arrays.island[receiver]]
            hop_s = np.where(np.isnan(measured), hop_s, measured)
        slowest_s = float(hop_s.max())
        if math.isnan(
            slowest_s
        ):  # two regions with no backbone: refused as hop_latency_s refuses it
            return max(map(self.hop_latency_s, senders, receivers))
        return slowest_s

    def hop_latency_s(self, sender: int, receiver: int) -> float:
        """One-way: half the measured round trip between their islands where one is given (``[[latency]]``),
        else the sender's access latency, the backbone's between their regions, the receiver's."""
        if self.measured_s:
            pair = frozenset((self.island[sender], self.island[receiver]))
            if pair in self.measured_s:
                return self.measured_s[pair]
        return (
            self.access_latency_s[sender]
            + self.core_latency_s(self.region[sender], self.region[receiver])
            + self.access_latency_s[receiver]
        )

    def path(self, sender: int, receiver: int) -> tuple[Link, ...]:
        """The links a copy from ``sender`` to ``receiver`` crosses."""
        return (
            self.uplinks[sender],
            *self.crossing(self.region[sender], self.region[receiver]),
            self.downlinks[receiver],
        )

    def ring_route(self, ring: tuple[int, ...]) -> tuple[tuple[Link, ...], float]:
        """Every member's uplink and downlink and the backbone of every hop between regions (once per
        crossing), and the narrowest share of them (a link crossed k times gives 1/k), over arrays."""
        arrays = self.arrays
        ranks = np.fromiter(ring, np.intp, len(ring))
        access = picked(arrays.uplinks, ring) + picked(arrays.downlinks, ring)
        narrowest = float(min(arrays.up_capacity[ranks].min(), arrays.down_capacity[ranks].min()))
        if not self.backbones:
            return access, narrowest
        source = arrays.region[ranks]
        target = np.roll(source, -1)
        crossed = tuple(
            self.backbones[(arrays.regions[source[hop]], arrays.regions[target[hop]])]
            for hop in np.flatnonzero(source != target)
        )
        for backbone, count in Counter(crossed).items():
            narrowest = min(narrowest, backbone.capacity_bytes_per_s / count)
        return access + crossed, narrowest

    def ring(self, members: Iterable[int], order: str) -> tuple[int, ...]:
        """The members in ring order: by rank ("ranked": the islands by name, whatever the order of
        the tables), or ("optimised") each region's members together, the regions in
        ``region_cycle``'s order."""
        ranked = sorted(members)
        if order == "ranked" or not self.backbones:
            return tuple(ranked)
        cycle = self.region_cycle(tuple(sorted({self.named_region(rank) for rank in ranked})))
        arrays = self.arrays
        place = np.full(len(arrays.regions), len(cycle))
        place[[arrays.regions.index(region) for region in cycle]] = np.arange(len(cycle))
        ranks = np.fromiter(ranked, np.intp, len(ranked))
        return tuple(ranks[np.argsort(place[arrays.region[ranks]], kind="stable")].tolist())

    def region_cycle(self, regions: tuple[str, ...]) -> tuple[str, ...]:
        """The cyclic order of ``regions`` whose slowest backbone is the widest, ties broken by the
        shortest longest backbone latency (a bottleneck travelling-salesman tour, as PCCL orders its
        ring over measured bandwidths): every order for up to ``EXACT_REGIONS`` regions, beyond that
        the widest next backbone from each region in turn. Cached per set of regions."""
        if regions not in self.cycles:
            if len(regions) <= EXACT_REGIONS:
                tours = (regions[:1] + rest for rest in permutations(regions[1:]))
                self.cycles[regions] = min(tours, key=self.tour_cost)
            else:
                self.cycles[regions] = self.greedy_tour(regions)
        return self.cycles[regions]

    def tour_cost(self, tour: tuple[str, ...]) -> tuple[float, float]:
        hops = self.hops(tour) if len(tour) > 1 else []
        return (
            -min((self.backbones[hop].capacity_bytes_per_s for hop in hops), default=math.inf),
            max((self.core_latency_s(*hop) for hop in hops), default=0.0),
        )

    def greedy_tour(self, regions: tuple[str, ...]) -> tuple[str, ...]:
        tour, left = [regions[0]], set(regions[1:])
        while left:
            here = tour[-1]
            tour.append(
                min(
                    sorted(left),
                    key=lambda there: (
                        -self.backbones[(here, there)].capacity_bytes_per_s,
                        self.core_latency_s(here, there),
                    ),
                )
            )
            left.discard(tour[-1])
        return tuple(tour)

    def access_links(self) -> list[Link]:
        return list(self.uplinks.values()) + list(self.downlinks.values())

    def backbone_links(self) -> list[Link]:
        return list(self.backbones.values())

    def has_buckets(self) -> bool:
        """Whether some access link is shaped by a token bucket (``island.burst_bytes``)."""
        return any(link.burst_bytes for link in self.access_links())


def picked(items: list, ranks: tuple[int, ...]) -> tuple:
    """``items[rank]`` for each of ``ranks``, gathered in C."""
    return itemgetter(*ranks)(items) if len(ranks) > 1 else (items[ranks[0]],)


@dataclass(frozen=True)
class RankArrays:
    """The topology as arrays indexed by rank, for rings of thousands: each worker's access latency,
    access links and their capacities, region and island codes, and the one-way latency between two
    regions' cores and between two islands where a round trip was measured (NaN where none was). Only
    the workers' regions have codes: a declared region that no worker is in (a decoupled syncer's, or
    one left empty) is on no hop between workers."""

    latency_s: np.ndarray
    uplinks: list[Link | None]
    downlinks: list[Link | None]
    up_capacity: np.ndarray
    down_capacity: np.ndarray
    region: np.ndarray
    regions: list[str | None]
    core_latency_s: np.ndarray
    island: np.ndarray
    measured_s: np.ndarray

    @classmethod
    def of(cls, topology: Topology) -> RankArrays:
        size = max(topology.access_latency_s, default=-1) + 1
        regions = sorted(set(topology.region.values()), key=str)
        region_code = {name: code for code, name in enumerate(regions)}
        island_code = {
            name: code for code, name in enumerate(sorted(set(topology.island.values())))
        }
        latency_s, region, island = (
            np.full(size, np.nan),
            np.zeros(size, np.intp),
            np.zeros(size, np.intp),
        )
        uplinks: list[Link | None] = [None] * size
        downlinks: list[Link | None] = [None] * size
        up_capacity, down_capacity = np.full(size, np.nan), np.full(size, np.nan)
        for rank, latency in topology.access_latency_s.items():
            latency_s[rank] = latency
            up, down = uplinks[rank], downlinks[rank] = (
                topology.uplinks[rank],
                topology.downlinks[rank],
            )
            up_capacity[rank] = up.capacity_bytes_per_s
            down_capacity[rank] = down.capacity_bytes_per_s
            region[rank] = region_code[topology.region[rank]]
            island[rank] = island_code[topology.island[rank]] if rank in topology.island else 0
        core_latency_s = np.full((len(regions), len(regions)), np.nan)
        np.fill_diagonal(core_latency_s, 0.0)
        for pair, latency in topology.backbone_latency_s.items():
            if all(
                name in region_code for name in pair
            ):  # a backbone to a region without workers joins no hop
                a, b = (region_code[name] for name in pair)
                core_latency_s[a, b] = core_latency_s[b, a] = latency
        measured_s = np.full(
            (len(island_code) if topology.measured_s else 1,) * 2, np.nan
        )  # read only if any
        for pair, latency in topology.measured_s.items():
            codes = [island_code[name] for name in pair if name in island_code]
            if len(codes) == len(pair):  # a pair of islands, or one island with itself
                a, b = codes[0], codes[-1]
                measured_s[a, b] = measured_s[b, a] = latency
        return cls(
            latency_s,
            uplinks,
            downlinks,
            up_capacity,
            down_capacity,
            region,
            regions,
            core_latency_s,
            island,
            measured_s,
        )
