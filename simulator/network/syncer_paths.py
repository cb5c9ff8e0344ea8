"""Where Decoupled DiLoCo's syncer sits on the network: its own links (none on a non-blocking core,
without a ``[syncer]`` bandwidth), its latency and region, and each learner's way there and back."""

from __future__ import annotations

from dataclasses import dataclass

from islands.scenarios import Scenario
from islands.units import BITS_PER_BYTE, BITS_PER_GBIT, MS_PER_S

from .links import Link
from .topology import Topology

SYNCER_RANK = -1


@dataclass(frozen=True)
class SyncerPaths:
    links_up: tuple[Link, ...]
    links_down: tuple[Link, ...]
    latency_s: float
    region: str | None

    @classmethod
    def of(cls, scenario: Scenario) -> SyncerPaths:
        spec = scenario.syncer
        rate = (
            None
            if spec.bandwidth_gbps is None
            else spec.bandwidth_gbps * BITS_PER_GBIT / BITS_PER_BYTE
        )
        links_up = () if rate is None else (Link(SYNCER_RANK, "up", rate),)
        links_down = () if rate is None else (Link(SYNCER_RANK, "down", rate),)
        return cls(links_up, links_down, spec.latency_ms / MS_PER_S, spec.region)

    def hop_latency_s(self, topology: Topology, rank: int) -> float:
        """One way between a learner and the syncer: the learner's access, the backbone between their
        regions, the syncer's."""
        return (
            topology.access_latency_s[rank]
            + topology.core_latency_s(topology.region[rank], self.region)
            + self.latency_s
        )

    def to_syncer(self, topology: Topology, rank: int) -> tuple[Link, ...]:
        return (
            topology.uplinks[rank],
            *topology.crossing(topology.region[rank], self.region),
            *self.links_down,
        )

    def from_syncer(self, topology: Topology, rank: int) -> tuple[Link, ...]:
        return (
            *self.links_up,
            *topology.crossing(self.region, topology.region[rank]),
            topology.downlinks[rank],
        )
