"""Collectives in stages (``network.collective`` = "hierarchical" or "tree"): the stages run one
after the other, the transfers ("legs") of a stage at once, sharing links under the flow model.

**Hierarchical**: reduce inside each region, ring across the regions' leaders, broadcast back. A
region's members, in ring order, form a chain whose head is its *leader*:

1. **Reduce.** Each region's members reduce into its leader along the chain, pipelined: every member
   but the leader sends the whole payload S once, to its predecessor. A region of m members takes
   (m-1) x the chain's slowest hop latency + S / its slowest link.
2. **Ring.** The R leaders ring all-reduce the region sums (``RingAllReduce`` over R workers:
   2(R-1)/R x S per leader, 2(R-1) hops, crossing the backbones between their regions).
3. **Broadcast.** Each leader sends the result down its chain, pipelined: every member but the tail
   forwards S once. Same time as the reduce.

Bytes sent per sync: S + S by a member (S by the chain's tail), 2(R-1)/R x S + S by a leader (no S
when it is alone in its region). Against one ring over all M workers, which pays 2(M-1) hops at the
slowest hop's latency (a backbone's, once regions are crossed), the hierarchy pays 2(R-1) hops at
backbone latency and 2(m-1) at access latency, for about the same bytes: it wins where latency rules.

**Tree**: a binary tree over the members (member p's parent is member (p-1) // 2; who sits where:
``tree_layout.py``),
reduced level by level from the leaves to the root, then broadcast level by level back down. Every
copy carries the whole payload S and pays its own hop's latency; the two children of a node share
its downlink on the way up and its uplink on the way down. Over M members of equal links it takes
2 x ceil(log2(M+1)) - 2 levels, each one hop's latency plus S (a leaf's level) or 2S (a level of
siblings) at the link rate: fewer latencies than a ring's 2(M-1), more bytes through a parent's
link. Bytes sent per sync: S by every member but the root in the reduce, S per child in the
broadcast.

The stages do not overlap here, nor are the levels of a tree pipelined; an implementation that
pipelines chunks across them is faster (these are its upper bounds). A departure cancels the stage
in flight and the collective restarts from its first stage among the survivors, as a ring does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from islands.scenarios.model import NetworkSpec

from .collectives import Leg, RingAllReduce, copy_leg, ring_leg
from .topology import Topology
from .tree_layout import tree_layout


@dataclass(frozen=True)
class StagedCollective:
    """Stages of legs run in turn, and the bytes each participant sends in all of them."""

    stages: tuple[tuple[Leg, ...], ...]
    bytes_sent: dict[int, float]


def chain_leg(
    chain: list[int],
    payload_bytes: float,
    topology: Topology,
    network: NetworkSpec,
    towards_head: bool,
) -> Leg:
    """The pipelined chain: each hop carries the whole payload once, towards the head (a reduce) or
    away from it (a broadcast); it pays each hop's latency at the slowest hop's and moves at its
    slowest link."""
    hops = list(zip(chain[1:], chain)) if towards_head else list(zip(chain, chain[1:]))
    slowest_hop_s = topology.slowest_hop_s(
        [sender for sender, _ in hops], [receiver for _, receiver in hops]
    )
    links = tuple(topology.uplinks[sender] for sender, _ in hops) + tuple(
        topology.downlinks[r] for _, r in hops
    )
    return Leg(
        links, payload_bytes, len(hops) * slowest_hop_s, network.tcp_cap_bytes_per_s(slowest_hop_s)
    )


def region_chains(ring: tuple[int, ...], topology: Topology) -> list[list[int]]:
    """Each region's members in ring order, the regions in the order their first member appears."""
    chains: dict[str | None, list[int]] = {}
    for rank in ring:
        chains.setdefault(topology.region[rank], []).append(rank)
    return list(chains.values())


def alone(rank: int, topology: Topology) -> StagedCollective:
    """A collective of one member (the last survivor): nothing to move, over its own links."""
    return StagedCollective(
        ((Leg((topology.uplinks[rank], topology.downlinks[rank]), 0.0, 0.0, math.inf),),),
        {rank: 0.0},
    )


def hierarchical_all_reduce(
    ring: tuple[int, ...], payload_bytes: float, topology: Topology, network: NetworkSpec
) -> StagedCollective:
    """The three stages over the members of ``ring`` (in ring order) and each member's bytes sent."""
    if len(ring) == 1:
        return alone(ring[0], topology)
    chains = region_chains(ring, topology)
    long_chains = [chain for chain in chains if len(chain) > 1]
    bytes_sent = {rank: 0.0 for rank in ring}
    for chain in long_chains:
        for position, rank in enumerate(chain):
            bytes_sent[rank] += (payload_bytes if position > 0 else 0.0) + (
                payload_bytes if rank != chain[-1] else 0.0
            )
    stages: list[tuple[Leg, ...]] = []
    if long_chains:
        stages.append(
            tuple(chain_leg(chain, payload_bytes, topology, network, True) for chain in long_chains)
        )
    leaders = tuple(chain[0] for chain in chains)
    if len(leaders) > 1:
        across = RingAllReduce(leaders, payload_bytes)
        stages.append((ring_leg(across, topology, network),))
        for leader in leaders:
            bytes_sent[leader] += across.bytes_per_worker
    if long_chains:
        stages.append(
            tuple(
                chain_leg(chain, payload_bytes, topology, network, False) for chain in long_chains
            )
        )
    return StagedCollective(tuple(stages), bytes_sent)


def tree_all_reduce(
    ring: tuple[int, ...], payload_bytes: float, topology: Topology, network: NetworkSpec
) -> StagedCollective:
    """The binary tree's levels, reduced from the leaves up, then broadcast back down; the members
    placed in the tree by ``tree_layout``."""
    if len(ring) == 1:
        return alone(ring[0], topology)
    ring = tree_layout(ring, topology, network.ring_order)
    levels: dict[int, list[int]] = {}
    for position in range(1, len(ring)):
        levels.setdefault((position + 1).bit_length() - 1, []).append(position)
    bytes_sent = {rank: 0.0 for rank in ring}
    up, down = [], []
    for depth in sorted(levels, reverse=True):
        up.append(
            tuple(
                copy_leg(ring[p], ring[(p - 1) // 2], payload_bytes, topology, network)
                for p in levels[depth]
            )
        )
        for position in levels[depth]:
            bytes_sent[ring[position]] += payload_bytes
            bytes_sent[ring[(position - 1) // 2]] += payload_bytes
    for depth in sorted(levels):
        down.append(
            tuple(
                copy_leg(ring[(p - 1) // 2], ring[p], payload_bytes, topology, network)
                for p in levels[depth]
            )
        )
    return StagedCollective(tuple(up + down), bytes_sent)


STAGED = {"hierarchical": hierarchical_all_reduce, "tree": tree_all_reduce}
