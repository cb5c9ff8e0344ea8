"""Collectives as transfers on the access links.

Ring all-reduce of S bytes over M workers is 2(M-1) neighbour steps (a reduce-scatter pass and an
all-gather pass), in each of which every worker sends S/M bytes to its successor. Per worker that is
2(M-1)/M * S bytes up and the same down, and in the alpha-beta model

    T = 2(M-1) * alpha + 2(M-1)/M * S / beta

(BRIEF: "The problem"). Each step ends when its slowest hop ends, so with heterogeneous links alpha is
the largest hop latency (sender's plus receiver's one-way latency) and beta the slowest link: the
slowest link paces the ring. We hand the whole ring to the network as one transfer that crosses every
participant's uplink and downlink with 2(M-1)/M * S bytes each, after 2(M-1) * alpha of latency; alone
on its links it takes exactly T, and when fragments overlap the flow model shares the links between them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import simpy

from .network import Link


@dataclass(frozen=True)
class RingAllReduce:
    """The cost of a ring all-reduce of ``payload_bytes`` over some workers' links."""

    participants: tuple[int, ...]
    payload_bytes: float

    @property
    def bytes_per_worker(self) -> float:
        """Bytes each worker sends (and receives): 2(M-1)/M * S."""
        m = len(self.participants)
        return 2 * (m - 1) / m * self.payload_bytes

    def latency_s(self, latency_by_worker: dict[int, float]) -> float:
        """2(M-1) ring steps, each paying the slowest hop's sender + receiver one-way latency."""
        ring = self.participants
        m = len(ring)
        slowest_hop = max(latency_by_worker[ring[i]] + latency_by_worker[ring[(i + 1) % m]] for i in range(m))
        return 2 * (m - 1) * slowest_hop

    def links(self, uplinks: dict[int, Link], downlinks: dict[int, Link]) -> tuple[Link, ...]:
        return tuple(uplinks[w] for w in self.participants) + tuple(downlinks[w] for w in self.participants)


@dataclass(eq=False)
class PendingCollective:
    """A collective that starts once every participant has arrived (called it) and then runs."""

    key: tuple[int, int]  # (outer_step, fragment)
    expected: int
    done: simpy.Event
    arrived: list[int] = field(default_factory=list)
    started_at_s: float | None = None
