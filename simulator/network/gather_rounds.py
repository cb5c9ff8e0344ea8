"""Top-k payloads gathered peer to peer or through an object store (``network.gather``), as stages of
one transfer each, priced exactly as the trainer moves them (``schedules/gather.py`` counts them).

**Direct** (one stage): each of the round's K chosen peers sends its payload S to each of the other
M - 1 workers at once. The stage is one transfer of S through every link a copy crosses, once per
copy: a chosen peer's uplink M - 1 times, a worker's downlink K - 1 times (K outside the K), a
backbone once per copy between its two regions. Alone on its links it takes

    T = the slowest copy's hop latency + max over links of (copies through it x S / its rate)

(a link crossed k times gives the transfer 1/k of it, ``links.Transfer``): every copy moves at the
pace of the busiest link, as a ring's every hop moves at its slowest link's. With equal links of
rate b up and down, T = alpha + (M - 1) x S / b: the senders' uplinks bind.

**Store** (two stages): every worker PUTs its payload (its uplink, the backbone to the store's region,
the store's ingress, crossed M times), then, once every PUT is in, every worker GETs the round's K
payloads (the store's egress crossed M x K times, the backbone from the store's region K times per
worker, its downlink K times). The latency is the round's requests, declared once in
``schedules/store_round.py``, each a round trip at the slowest worker's one way l to the store (its
access latency, the backbone's, the store's ``latency_ms``): the PUT stage pays the PUT's (2 l), the
GET stage the LIST's that finds every PUT in and the GETs' (4 l). Alone on the links, with uplinks u,
downlinks d, ingress I and egress E (a store without a link never binds):

    T = 2 l + S / min(min u, I / M) + 4 l + K x S / min(min d, E / M)

The store's own time to answer a request, r (``store.request_ms``), is paid once per request on
the path (``store_round.requests``): once by the PUT stage, twice by the GET stage (the LIST, then
the K GETs at once, served at once): T + 3 r. A worker's first round also opens its connections
(``store_round.opening``): the PUT's, then the K GETs' at once, each a handshake of h round trips
(``store.handshake_round_trips``), so its stages wait 2 h l more each: T + 3 r + 4 h l, the service
times never multiplied by h. A stage waits for its slowest member, handshakes included: a joiner's
first round costs every member of it as much. (Each stage is one transfer whose latency holds its
round trips, handshakes and service times before its bytes; alone on the links the sum is the same
wherever a service time falls.)

A worker that sends or receives nothing in a stage still has a row there (0 bytes): the stage ends
for everyone at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from islands.scenarios import Scenario
from islands.scenarios.model import NetworkSpec
from islands.schedules.gather import DIRECT, STORE, downloads, uploads
from islands.schedules.store_round import (
    FIRST_ROUND_HANDSHAKES,
    GET_STAGE,
    PUT_STAGE,
    ROUND_ONE_WAYS,
    ROUND_REQUESTS,
    Held,
    handshake_one_ways,
    one_ways,
    requests,
)
from islands.units import BITS_PER_BYTE, BITS_PER_GBIT, MS_PER_S

from .collectives import Leg
from .links import Link
from .staged import StagedCollective, alone
from .topology import Topology

STORE_WORKER = -2  # a store link's worker (a backbone's is -1)


def rate_link(direction: str, gbps: float | None) -> tuple[Link, ...]:
    """The store's link one way, or none where it never binds."""
    return (
        ()
        if gbps is None
        else (Link(STORE_WORKER, direction, gbps * BITS_PER_GBIT / BITS_PER_BYTE),)
    )


@dataclass(frozen=True)
class StorePaths:
    """Where the object store sits: its ingress and egress (none where it never binds), its one-way
    latency, its region, the round trips a new connection to it takes, and its own time to answer
    a request."""

    ingress: tuple[Link, ...]
    egress: tuple[Link, ...]
    latency_s: float
    region: str | None
    handshake_round_trips: int
    request_s: float

    @classmethod
    def of(cls, scenario: Scenario) -> StorePaths:
        store = scenario.store
        return cls(
            rate_link("in", store.ingress),
            rate_link("out", store.egress),
            store.latency_ms / MS_PER_S,
            store.region,
            store.handshake_round_trips,
            store.request_ms / MS_PER_S,
        )

    def one_way_s(self, topology: Topology, rank: int) -> float:
        """Between a worker and the store: its access latency, the backbone between their regions,
        the store's."""
        return (
            topology.access_latency_s[rank]
            + topology.core_latency_s(topology.region[rank], self.region)
            + self.latency_s
        )


def gather_stages(
    gather: str,
    participants: Iterable[int],
    chosen: tuple[int, ...],
    payload_bytes: float,
    topology: Topology,
    store: StorePaths,
    network: NetworkSpec,
    held: Mapping[int, Held],
) -> StagedCollective:
    """The stages of a round over ``participants`` whose ``chosen`` payloads are averaged, and each
    participant's bytes sent (``schedules.gather.uploads``); ``held``: the connections to the store
    each participant holds open before it (a store's round)."""
    ranks = tuple(sorted(participants))
    members = len(ranks)
    sent = {rank: uploads(gather, members, rank in chosen) * payload_bytes for rank in ranks}
    if gather == STORE:
        return StagedCollective(
            through_store(ranks, len(chosen), payload_bytes, topology, store, network, held), sent
        )
    assert gather == DIRECT, f"a ring is not staged here: {gather}"
    if members == 1:
        return alone(ranks[0], topology)
    return StagedCollective(((direct_leg(ranks, chosen, payload_bytes, topology, network),),), sent)


def direct_leg(
    ranks: tuple[int, ...],
    chosen: tuple[int, ...],
    payload_bytes: float,
    topology: Topology,
    network: NetworkSpec,
) -> Leg:
    """Every chosen peer's copy to every other worker, as one transfer (the module's docstring)."""
    members = len(ranks)
    copies = [(sender, receiver) for sender in chosen for receiver in ranks if receiver != sender]
    links = [link for sender in chosen for link in (topology.uplinks[sender],) * (members - 1)]
    for rank in ranks:
        links += [topology.downlinks[rank]] * downloads(
            DIRECT, members, len(chosen), rank in chosen
        )
    for sender, receiver in copies:
        links += topology.crossing(topology.region[sender], topology.region[receiver])
    hop_s = topology.slowest_hop_s([s for s, _ in copies], [r for _, r in copies])
    return Leg(tuple(links), payload_bytes, hop_s, network.tcp_cap_bytes_per_s(hop_s))


def through_store(
    ranks: tuple[int, ...],
    peers: int,
    payload_bytes: float,
    topology: Topology,
    store: StorePaths,
    network: NetworkSpec,
    held: Mapping[int, Held],
) -> tuple[tuple[Leg, ...], ...]:
    """Every worker's PUT, then every worker's GETs of the ``peers`` payloads (the module's docstring),
    each stage after its slowest worker's round trips, its handshakes included."""
    one_way_s = max(store.one_way_s(topology, rank) for rank in ranks)
    put: list[Link] = [topology.uplinks[rank] for rank in ranks]
    get: list[Link] = [link for rank in ranks for link in (topology.downlinks[rank],) * peers]
    for rank in ranks:
        put += topology.crossing(topology.region[rank], store.region)
        get += topology.crossing(store.region, topology.region[rank]) * peers
    put += store.ingress * len(ranks)
    get += store.egress * (len(ranks) * peers)
    cap = network.tcp_cap_bytes_per_s(one_way_s)
    return tuple(
        (
            Leg(
                tuple(links),
                payload_bytes,
                stage_latency_s(stage, ranks, peers, topology, store, held),
                cap,
            ),
        )
        for stage, links in ((PUT_STAGE, put), (GET_STAGE, get))
    )


def stage_latency_s(
    stage: int,
    ranks: tuple[int, ...],
    peers: int,
    topology: Topology,
    store: StorePaths,
    held: Mapping[int, Held],
) -> float:
    """The latency a store stage waits: its slowest worker's requests, a round trip each, and the
    handshakes of the connections it opens (``store_round.handshake_one_ways``), then the store's
    time to answer each request once (``store_round.requests``)."""
    return (
        max(
            store.one_way_s(topology, rank)
            * (
                one_ways(stage)
                + handshake_one_ways(stage, held[rank], peers, store.handshake_round_trips)
            )
            for rank in ranks
        )
        + requests(stage) * store.request_s
    )


def store_extra_s(scenario: Scenario, members: int, rate_bytes_per_s: float) -> float:
    """What a round through the store may take beyond a ring all-gather of the same payload among
    ``members`` at ``rate_bytes_per_s`` (the budget's bound): two payloads more through a worker's
    links (one up and at most M down, against M - 1 each way), every PUT and GET through the store's
    own links in series, the round's one-way latencies to it (``ROUND_ONE_WAYS``) and a first round's
    handshakes (a joiner may open connections in any round), each at most the farthest hop's and the
    store's, and the store's time to answer the round's requests (``ROUND_REQUESTS``); 0 for any
    other way."""
    if scenario.network.gather != STORE:
        return 0.0
    store, payload = scenario.store, scenario.payload_bytes
    one_way_s = scenario.farthest_hop_latency_s + store.latency_ms / MS_PER_S
    one_ways = ROUND_ONE_WAYS + 2 * store.handshake_round_trips * FIRST_ROUND_HANDSHAKES
    seconds = (
        2 * payload / rate_bytes_per_s
        + one_ways * one_way_s
        + ROUND_REQUESTS * store.request_ms / MS_PER_S
    )
    for gbps, payloads in ((store.ingress, members), (store.egress, members * members)):
        if gbps is not None:
            seconds += payloads * payload * BITS_PER_BYTE / (gbps * BITS_PER_GBIT)
    return seconds
