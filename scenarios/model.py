"""Validated scenarios as frozen dataclasses: what every other part of islands reads."""

from __future__ import annotations

from dataclasses import dataclass, field

from .trainer_keys import TrainerSpec

BITS_PER_GBIT = 1e9
BITS_PER_BYTE = 8


@dataclass(frozen=True)
class ModelSpec:
    parameters: float
    bytes_per_param: float


@dataclass(frozen=True)
class ScheduleSpec:
    algorithm: str
    inner_steps: int
    outer_steps: int
    fragments: int
    overlap_steps: int
    bits: int
    backward_overlap: float


@dataclass(frozen=True)
class NetworkSpec:
    model: str


@dataclass(frozen=True)
class IslandSpec:
    name: str
    replicas: int
    step_time_s: float
    bandwidth_gbps: float
    latency_ms: float


@dataclass(frozen=True)
class Worker:
    """One replica of an island: it computes, holds a full model copy and owns one access link."""

    rank: int
    name: str
    island: str
    step_time_s: float
    upload_bytes_per_s: float
    download_bytes_per_s: float
    latency_s: float


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    seed: int
    model: ModelSpec
    schedule: ScheduleSpec
    network: NetworkSpec
    islands: tuple[IslandSpec, ...]
    source: str
    trainer: TrainerSpec = field(default_factory=TrainerSpec)

    @property
    def payload_bytes(self) -> float:
        """Bytes of one full gradient / pseudo-gradient on the wire: parameters * bits / 8."""
        return self.model.parameters * self.schedule.bits / BITS_PER_BYTE

    def workers(self) -> list[Worker]:
        """Expand islands and their replicas into workers, numbered in file order."""
        workers: list[Worker] = []
        for island in self.islands:
            for replica in range(island.replicas):
                name = island.name if island.replicas == 1 else f"{island.name}-{replica}"
                rate = island.bandwidth_gbps * BITS_PER_GBIT / BITS_PER_BYTE
                workers.append(Worker(
                    rank=len(workers),
                    name=name,
                    island=island.name,
                    step_time_s=island.step_time_s,
                    upload_bytes_per_s=rate,
                    download_bytes_per_s=rate,
                    latency_s=island.latency_ms / 1000.0,
                ))
        return workers

    @property
    def worker_count(self) -> int:
        return sum(island.replicas for island in self.islands)
