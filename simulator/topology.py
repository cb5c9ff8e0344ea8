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
from dataclasses import dataclass, field
from itertools import permutations
from typing import Iterable

from islands.scenarios import Scenario, Worker
from islands.units import BITS_PER_BYTE, BITS_PER_GBIT, MS_PER_S

from .network import Link

BACKBONE_WORKER = -1  # the links table's worker column for a backbone
BACKBONE = "backbone"  # and its island column; the direction column names the two regions, "us>eu"
EXACT_REGIONS = 7  # an optimised ring tries every order of up to this many regions (720 tours)


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
    measured_s: dict[frozenset[str], float] = field(default_factory=dict)  # one way, by pair of islands

    @classmethod
    def of(cls, scenario: Scenario, workers: list[Worker]) -> Topology:
        topology = cls(
            uplinks={w.rank: Link(w.rank, "up", w.upload_bytes_per_s, burst_bytes=w.upload_burst_bytes)
                     for w in workers},
            downlinks={w.rank: Link(w.rank, "down", w.download_bytes_per_s, burst_bytes=w.download_burst_bytes)
                       for w in workers},
            access_latency_s={w.rank: w.latency_s for w in workers},
            region={w.rank: w.region for w in workers},
            island={w.rank: w.island for w in workers},
            measured_s={frozenset(pair.between): pair.rtt_ms / 2 / MS_PER_S for pair in scenario.latencies})
        for backbone in scenario.backbones:
            a, b = backbone.between
            rate_bytes_per_s = backbone.bandwidth_gbps * BITS_PER_GBIT / BITS_PER_BYTE
            for source, target in ((a, b), (b, a)):
                topology.backbones[(source, target)] = Link(BACKBONE_WORKER, f"{source}>{target}", rate_bytes_per_s)
            topology.backbone_latency_s[frozenset(backbone.between)] = backbone.latency_ms / MS_PER_S
        return topology

    @staticmethod
    def hops(ring: tuple) -> list[tuple]:
        """Each member of a ring (of workers or regions) with its successor, the last with the first."""
        return list(zip(ring, ring[1:] + ring[:1]))

    def crossing(self, source: str | None, target: str | None) -> tuple[Link, ...]:
        """The backbone from region ``source`` to region ``target``; none inside a region."""
        return () if source == target else (self.backbones[(source, target)],)

    def core_latency_s(self, source: str | None, target: str | None) -> float:
        return 0.0 if source == target else self.backbone_latency_s[frozenset((source, target))]

    def hop_latency_s(self, sender: int, receiver: int) -> float:
        """One-way: half the measured round trip between their islands where one is given (``[[latency]]``),
        else the sender's access latency, the backbone's between their regions, the receiver's."""
        if self.measured_s:
            pair = frozenset((self.island[sender], self.island[receiver]))
            if pair in self.measured_s:
                return self.measured_s[pair]
        return (self.access_latency_s[sender] + self.core_latency_s(self.region[sender], self.region[receiver])
                + self.access_latency_s[receiver])

    def path(self, sender: int, receiver: int) -> tuple[Link, ...]:
        """The links a copy from ``sender`` to ``receiver`` crosses."""
        return (self.uplinks[sender], *self.crossing(self.region[sender], self.region[receiver]),
                self.downlinks[receiver])

    def ring_links(self, ring: tuple[int, ...]) -> tuple[Link, ...]:
        """Every member's uplink and downlink, and the backbone of every hop between regions, once per
        crossing."""
        access = (*(self.uplinks[w] for w in ring), *(self.downlinks[w] for w in ring))
        if not self.backbones:
            return access
        return access + tuple(link for sender, receiver in self.hops(ring)
                              for link in self.crossing(self.region[sender], self.region[receiver]))

    def ring(self, members: Iterable[int], order: str) -> tuple[int, ...]:
        """The members in ring order: ranks in file order ("listed"), or ("optimised") each region's
        members together, the regions in ``region_cycle``'s order."""
        ranked = sorted(members)
        if order == "listed" or not self.backbones:
            return tuple(ranked)
        cycle = self.region_cycle(tuple(sorted({self.region[rank] for rank in ranked})))
        return tuple(rank for region in cycle for rank in ranked if self.region[rank] == region)

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
        return (-min((self.backbones[hop].capacity_bytes_per_s for hop in hops), default=math.inf),
                max((self.core_latency_s(*hop) for hop in hops), default=0.0))

    def greedy_tour(self, regions: tuple[str, ...]) -> tuple[str, ...]:
        tour, left = [regions[0]], set(regions[1:])
        while left:
            here = tour[-1]
            tour.append(min(sorted(left), key=lambda there: (-self.backbones[(here, there)].capacity_bytes_per_s,
                                                               self.core_latency_s(here, there))))
            left.discard(tour[-1])
        return tuple(tour)

    def access_links(self) -> list[Link]:
        return list(self.uplinks.values()) + list(self.downlinks.values())

    def backbone_links(self) -> list[Link]:
        return list(self.backbones.values())
