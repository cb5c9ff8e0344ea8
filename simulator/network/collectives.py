"""Collectives as transfers on the access links.

Ring all-reduce of S bytes over M workers is 2(M-1) neighbour steps (a reduce-scatter pass and an
all-gather pass), in each of which every worker sends S/M bytes to its successor. Per worker that is
2(M-1)/M * S bytes up and the same down, and in the alpha-beta model

    T = 2(M-1) * alpha + 2(M-1)/M * S / beta

(BRIEF: "The problem"). Each step ends when its slowest hop ends, so with heterogeneous links alpha is
the largest hop latency (sender's plus receiver's one-way latency) and beta the slowest link: the
slowest link paces the ring. We hand the whole ring to the network as one transfer that crosses every
participant's uplink and downlink with 2(M-1)/M * S bytes each, after 2(M-1) * alpha of latency; alone
on its links it takes exactly T, and when transfers overlap the flow model shares the links.

Robust aggregation (``trainer.aggregation = "median" | "trimmed_mean"``) needs every member's whole
payload, and top-k payloads (``schedule.compression``) cannot be summed on the wire, so the trainer
all-gathers them around the same ring (``trainer/exchange/comm.py``
``SteppedCollectives.all_gather``): M-1 neighbour steps, in each of which every worker sends one whole
payload S to its successor. Per worker that is (M-1) * S bytes each way, and

    T = (M-1) * alpha + (M-1) * S / beta

with alpha and beta taken as for the ring all-reduce. A sync point names its collective
(``schedules.collective_of``); ``COLLECTIVES`` maps that name to its ring.

TCP: one stream cannot carry more than window / RTT (the bandwidth-delay product), nor, where the
path loses a fraction p of its packets, more than sqrt(3/2) x MSS / (RTT x sqrt(p)) (Mathis et al.);
a transfer with ``streams`` parallel streams is capped at streams times that, RTT = 2 x the hop's
one-way latency; a ring is capped by its slowest hop. The access link (or a backbone) is the
ceiling above the streams: many streams fill it, as PCCL's connection pool does.

Members do not all finish together: one has its last piece first, another some milliseconds
later (``network.exchange_end_spread_s``, which ``islands validate`` measures: 3-50 ms for 2-4
islands on the emulated WAN). The transfer's end is the last member's; the others finish spread
evenly up to that many seconds before it (``end_offsets_s``; the network fires each one's end that
long before the transfer's, as its rates stand: ``before_end``). A member that finishes first
computes on first, so in lockstep it waits longer at the next collective: the spread moves time from
``stall`` to ``idle``, and a collective still lasts until its last member is done.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, ClassVar

import numpy as np
import simpy

from islands.scenarios import Scenario
from islands.scenarios.model import NetworkSpec
from islands.schedules import ALL_GATHER, ALL_REDUCE, GRADIENT, collective_of, schedule_of
from islands.schedules.buckets import layout_of
from islands.units import BITS_PER_BYTE

from .links import Link, Transfer
from .ring_caps import ring_cap_bytes_per_s
from .topology import Topology


def end_offsets_s(
    participants: tuple[int, ...], spread_s: float, rotation: int
) -> dict[int, float]:
    """How long before the last each participant finishes: evenly over [0, ``spread_s``] by ring
    position, the positions turned by ``rotation`` from one collective to the next so that no island
    is always the last; mean ``spread_s`` / 2."""
    members = len(participants)
    if members < 2 or spread_s <= 0:
        return dict.fromkeys(participants, 0.0)
    return {
        rank: spread_s * ((position + rotation) % members) / (members - 1)
        for position, rank in enumerate(participants)
    }


@dataclass(frozen=True)
class RingCollective(ABC):
    """A collective around a ring of some workers' links: ``hops(M)`` neighbour steps, each paying the
    slowest hop's latency, moving ``volume_bytes(M, S)`` through every participant's uplink and downlink.
    A participant may stand for ``counts`` identical replicas that follow it in the ring
    (``replicas.py``): M counts them all."""

    participants: tuple[int, ...]
    payload_bytes: float
    counts: tuple[int, ...] = ()  # workers each participant stands for; () means one each
    # whether it reduces: its first pass a reduce-scatter, which a stack may make as an all-to-all
    # (``network.reduce_scatter``: ring_caps.py's price of unequal links behind FIFOs); a class's
    # constant, not a field
    REDUCES: ClassVar[bool] = False

    @cached_property
    def members(self) -> int:
        """M: the workers in the ring."""
        return sum(self.counts) if self.counts else len(self.participants)

    @staticmethod
    @abstractmethod
    def hops(workers: int) -> int:
        """Neighbour steps of the collective over ``workers`` workers."""

    @staticmethod
    @abstractmethod
    def volume_bytes(workers: int, payload_bytes: float) -> float:
        """Bytes each of ``workers`` workers sends (and receives) for a payload of ``payload_bytes``."""

    @cached_property
    def bytes_per_worker(self) -> float:
        """Bytes each worker sends (and receives)."""
        return self.volume_bytes(self.members, self.payload_bytes)

    def slowest_hop_latency_s(self, topology: Topology) -> float:
        """The slowest hop between participants, and between two replicas of one where it stands for several."""
        ring = self.participants
        inner = tuple(rank for rank, count in zip(ring, self.counts) if count > 1)
        return topology.slowest_hop_s(ring + inner, ring[1:] + ring[:1] + inner)

    def latency_s(self, slowest_hop_s: float) -> float:
        """Every ring step pays the slowest hop's one-way latency (sender's, backbone's, receiver's)."""
        return self.hops(self.members) * slowest_hop_s


class RingAllReduce(RingCollective):
    """The mean: reduce-scatter then all-gather, 2(M-1) steps of S/M bytes: 2(M-1)/M * S per worker.
    Its reduce-scatter is an all-to-all or a ring (``network.reduce_scatter``): ``REDUCES``."""

    REDUCES = True

    @staticmethod
    def hops(workers: int) -> int:
        return 2 * (workers - 1)

    @staticmethod
    def volume_bytes(workers: int, payload_bytes: float) -> float:
        return 2 * (workers - 1) / workers * payload_bytes


class RingAllGather(RingCollective):
    """Every whole payload to every member: M-1 steps of S bytes: (M-1) * S per worker."""

    @staticmethod
    def hops(workers: int) -> int:
        return workers - 1

    @staticmethod
    def volume_bytes(workers: int, payload_bytes: float) -> float:
        return (workers - 1) * payload_bytes


COLLECTIVES: dict[str, type[RingCollective]] = {
    ALL_REDUCE: RingAllReduce,
    ALL_GATHER: RingAllGather,
}


@dataclass(frozen=True)
class Leg:
    """One transfer: ``bytes_per_link`` through each of ``links`` after ``latency_s``, at most at ``cap``."""

    links: tuple[Link, ...]
    bytes_per_link: float
    latency_s: float
    cap_bytes_per_s: float
    narrowest_bytes_per_s: float | None = (
        None  # its narrowest link's share, where the topology priced it
    )


def ring_and_leg(
    scenario: Scenario,
    topology: Topology,
    replica_counts: dict[int, int],
    grouped: bool,
    kind: type[RingCollective],
    participants: tuple[int, ...],
    payload_bytes: float,
) -> tuple[RingCollective, Leg]:
    """The ring of ``kind`` over ``participants`` (each standing for its replicas when ``grouped``) and
    its one transfer (``ring_leg``) with the scenario's exchange calls and their costs."""
    counts = tuple(map(replica_counts.__getitem__, participants)) if grouped else ()
    ring = kind(participants, payload_bytes, counts if counts and max(counts) > 1 else ())
    exchange = scenario.exchange
    return ring, ring_leg(
        ring,
        topology,
        scenario.network,
        calls_of(scenario, payload_bytes),
        exchange.call_overhead_s,
        exchange.sync_overhead_s,
    )


def ring_leg(
    ring: RingCollective,
    topology: Topology,
    network: NetworkSpec,
    calls: int = 1,
    call_overhead_s: float = 0.0,
    sync_overhead_s: float = 0.0,
) -> Leg:
    """A ring as one transfer: every participant's links (and backbone crossings), its bytes per worker,
    and before them the exchange's fixed cost and, for each of its ``calls`` collective calls, the hops
    at the slowest hop's latency and the call's fixed cost; capped by TCP there and by
    ``network.ring_efficiency`` of its slowest link, or by one FIFO per egress (``fifo.py``).

    An exchange split into C calls issued back to back (buckets, one per tensor) takes, alone on its
    links, f + C x (2(M-1) alpha + c) + 2(M-1)/M x S / (e x beta): the calls' bytes add up to the one
    buffer's, their latencies and fixed costs do not share."""
    hop_s = ring.slowest_hop_latency_s(topology)
    links, narrowest_bytes_per_s = topology.ring_route(ring.participants)
    cap_bytes_per_s = ring_cap_bytes_per_s(
        network, topology, ring.participants, links, hop_s, ring.counts, ring.REDUCES
    )
    latency_s = sync_overhead_s + calls * (ring.latency_s(hop_s) + call_overhead_s)
    return Leg(links, ring.bytes_per_worker, latency_s, cap_bytes_per_s, narrowest_bytes_per_s)


def outer_step_s(scenario: Scenario, values: float) -> float:
    """The outer step and merge after an exchange of ``values``: its share of ``exchange.outer_step_s``."""
    return scenario.exchange.outer_step_s * values / scenario.model.parameters


@dataclass(frozen=True)
class BucketWait:
    """An exchange's calls that wait for their buckets during the backward pass (PyTorch DDP,
    ``schedule.backward_overlap`` > 0, ``exchange.calls = "buckets"``; the layout:
    ``schedules.buckets``). Call k, on bucket k, starts once the call before it is done and every
    member has produced its bucket, and takes c_k (a call's latency and fixed cost, and its bucket's
    share of the bytes at the ring's rate alone):

        e_k = max(r_k, e_(k-1)) + c_k,    r_k = max over members m of a_m + x_k (t_m - a_m)

    with member m's backward window from a_m (its arrival at the launch: bucket 1 ready) to t_m (the
    end of its step's compute: bucket C ready) and x_k the layout's ready fraction. Unrolled,
    e_C = max(the calls back to back from the collective's start: the transfer's own end,
    max over m and k of a_m + x_k (t_m - a_m) + T_k), T_k the seconds of calls k..C back to
    back. For each member that is the upper envelope g(s) = max_k (x_k s + T_k) at s = t_m - a_m:
    ``slopes`` and ``intercepts`` keep the lines on it (slopes rising), ``crossings`` where each next
    one takes over,
    so a fleet of W members costs W look-ups however many calls."""

    slopes: np.ndarray
    intercepts: np.ndarray
    crossings: np.ndarray

    def end_s(self, bytes_end_s: float, from_s: np.ndarray, to_s: np.ndarray) -> float:
        """When the last call ends: the transfer's end ``bytes_end_s`` (the calls back to back from the
        start), or later where a bucket made the calls wait: members' windows ``from_s``..``to_s``."""
        spans = to_s - from_s
        line = np.searchsorted(self.crossings, spans)
        latest = float(np.max(from_s + (self.slopes[line] * spans + self.intercepts[line])))
        return latest if latest > bytes_end_s else bytes_end_s


def upper_envelope(lines: list[tuple[float, float]]) -> BucketWait:
    """The lines (slope, intercept), slopes rising, that are the highest somewhere at s >= 0 (a
    convex hull's upper side), and the s where each takes over from the one before."""
    hull: list[tuple[float, float]] = []
    for slope, intercept in lines:
        if hull and hull[-1][0] == slope:
            if hull[-1][1] >= intercept:
                continue
            hull.pop()
        while hull and (
            len(hull) >= 2
            and crossing(hull[-2], hull[-1]) >= crossing(hull[-2], (slope, intercept))
            or crossing(hull[-1], (slope, intercept)) <= 0
        ):
            hull.pop()
        hull.append((slope, intercept))
    crossings = [crossing(a, b) for a, b in zip(hull, hull[1:])]
    return BucketWait(
        np.array([slope for slope, _ in hull]),
        np.array([intercept for _, intercept in hull]),
        np.array(crossings),
    )


def crossing(first: tuple[float, float], second: tuple[float, float]) -> float:
    """The s where ``second`` (the steeper) rises above ``first``."""
    return (first[1] - second[1]) / (second[0] - first[0])


def waits_for_buckets(scenario: Scenario) -> bool:
    """Whether the scenario's exchanges are DDP's buckets during the backward pass: a gradient, in
    ``exchange.calls = "buckets"``, launched before the step's compute ends (``backward_overlap``)."""
    return (
        scenario.schedule.backward_overlap > 0
        and scenario.exchange.calls == "buckets"
        and schedule_of(scenario).exchanged == GRADIENT
    )


def bucket_wait(
    scenario: Scenario, payload_bytes: float, leg: Leg, calls: int, rate_bytes_per_s: float
) -> BucketWait | None:
    """The calls of a gradient exchanged in buckets during the backward pass, waiting for their
    buckets (``BucketWait``), priced on ``leg`` at ``rate_bytes_per_s``; None for any other exchange
    (its calls go back to back from the launch)."""
    if not waits_for_buckets(scenario):
        return None
    schedule, exchange = scenario.schedule, scenario.exchange
    values = payload_bytes * BITS_PER_BYTE / schedule.bits
    layout = layout_of(exchange, values, scenario.model.bytes_per_param)
    per_call_s = (leg.latency_s - exchange.sync_overhead_s) / calls
    per_value_s = leg.bytes_per_link / rate_bytes_per_s / layout.values
    return upper_envelope(
        [
            (layout.ready_fraction(after, size), calls_left * per_call_s + after * per_value_s)
            for size, after, calls_left in layout.corners()
        ]
    )


def calls_of(scenario: Scenario, payload_bytes: float) -> int:
    """The collective calls of an exchange of ``payload_bytes`` on the wire (``ExchangeSpec.calls_of``)."""
    values = payload_bytes * BITS_PER_BYTE / scenario.schedule.bits
    return scenario.exchange.calls_of(
        values, scenario.model.parameters, scenario.model.bytes_per_param
    )


def copy_leg(
    sender: int, receiver: int, payload_bytes: float, topology: Topology, network: NetworkSpec
) -> Leg:
    """One point-to-point copy of the payload: its path, its hop's latency and the TCP cap there."""
    latency_s = topology.hop_latency_s(sender, receiver)
    return Leg(
        topology.path(sender, receiver),
        payload_bytes,
        latency_s,
        network.tcp_cap_bytes_per_s(latency_s),
    )


def collective_for(scenario: Scenario) -> type[RingCollective]:
    """The collective that carries the scenario's exchanges (``schedules.collective_of``)."""
    return COLLECTIVES[collective_of(scenario.trainer.aggregation, scenario.schedule.compression)]


@dataclass(eq=False)
class PendingCollective:
    """A collective that starts once every expected participant has joined, then runs.

    ``expected`` shrinks when a departure is detected (or, under a deadline barrier, to those on
    time); ``arrived`` loses a worker the moment it departs. A departure of a participant while the
    transfer is in flight breaks the ring: the transfer is cancelled and restarted among the
    survivors once the departure is detected; or, under ``network.on_departure = "partial"``, the
    others go on without it (``dropped_s``) and finish no sooner than ``hold_until_s``.
    """

    key: tuple[int, int]  # (outer_step, fragment)
    payload_bytes: float
    ring: type[RingCollective]
    expected: set[int]
    done: simpy.Event
    arrived: set[int] = field(default_factory=set)
    participants: tuple[int, ...] = ()
    first_started_s: float | None = None
    started_at_s: float | None = None
    transfers: list[Transfer] = field(
        default_factory=list
    )  # in flight (a stage of a staged one has several)
    attempt: int = 0
    deadline_s: float | None = None
    member_ends: dict[int, simpy.Event] = field(
        default_factory=dict
    )  # each member's own end (end spread)
    member_end_s: dict[int, float] = field(
        default_factory=dict
    )  # when those before the last had it
    dropped_s: dict[int, float] = field(
        default_factory=dict
    )  # members that left mid-flight ("partial"), and when (first)
    dropped_bytes: dict[int, float] = field(
        default_factory=dict
    )  # what each of them had sent by its first departure
    attempt_transfers: list[Transfer] = field(
        default_factory=list
    )  # every transfer of the attempt (a staged one's stages done included)
    # each worker's wasted row of the broken attempts so far, not yet written: [start, end, bytes]
    wasted: dict[int, list[float]] = field(default_factory=dict)
    hold_until_s: float = 0.0  # "partial": the others wait for a dropped member's part until then
    buckets: BucketWait | None = None  # calls that wait for their buckets (DDP's backward pass)
    backward_from_s: dict[int, float] = field(
        default_factory=dict
    )  # under ``buckets``: each member's arrival at the launch (its backward window's start)
    backward_to_s: dict[int, float] = field(
        default_factory=dict
    )  # and the end of its step's compute (its window's end), as each gets there
    bytes_end_s: float | None = None  # under ``buckets``: when the attempt's transfer was through
    settle: Callable[[], None] | None = None  # then, what waits for a member's backward window

    @property
    def in_flight(self) -> bool:
        return bool(self.transfers)

    def ready(self) -> bool:
        return not self.in_flight and bool(self.arrived) and self.expected <= self.arrived


def launch(network: Any, leg: Leg) -> Transfer:
    """Put one transfer on ``network`` (``network.make_network``'s)."""
    return network.transfer(
        leg.links, leg.bytes_per_link, leg.latency_s, leg.cap_bytes_per_s, leg.narrowest_bytes_per_s
    )
