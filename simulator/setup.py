"""What every player of a run starts from (``players.py``): the scenario, its schedule, the network
model, the topology and the workers, with no SimPy in it.

A player builds what it plays on from here and nothing else: the event model its environment,
network and processes (``events/engine.py``), a fast path its arrays or counts (``fast/``). Each
play takes a fresh ``Fleet`` (``fleet()``): the workers' states and clocks, drawn from the seed, so
that two plays of one setup (a run and the replay of its rows) draw the same durations.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from islands.limits import DEFAULT_MAX_EVENTS
from islands.scenarios import Scenario, Worker
from islands.schedules import Schedule, schedule_of

from . import replicas
from .fleet import Fleet, steps_scales
from .network.flows import network_model_for
from .network.topology import Topology


@dataclass(frozen=True)
class RunSetup:
    """One scenario made ready to play: ``groups`` are the simulated workers, each standing for
    ``count`` identical replicas (``replicas.py``)."""

    scenario: Scenario
    schedule: Schedule
    network_model: str
    workers: list[Worker]
    groups: list[tuple[Worker, int]]
    topology: Topology
    max_events: float = DEFAULT_MAX_EVENTS

    @classmethod
    def of(
        cls, scenario: Scenario, max_events: float = DEFAULT_MAX_EVENTS, group_replicas: bool = True
    ) -> RunSetup:
        workers = scenario.workers()
        groups = replicas.groups(scenario, workers, group_replicas)
        return cls(
            scenario,
            schedule_of(scenario),
            network_model_for(scenario),
            workers,
            groups,
            Topology.of(scenario, [worker for worker, _ in groups]),
            max_events,
        )

    def fleet(self) -> Fleet:
        """A fresh fleet: the simulated workers' states, their clocks drawn from the scenario's seed."""
        return Fleet(self.workers, self.groups, self.steps_scales, self.scenario.seed)

    @cached_property
    def steps_scales(self) -> list[float]:
        return steps_scales(self.scenario, self.workers)

    @cached_property
    def replica_counts(self) -> dict[int, int]:
        """Per simulated worker's rank, the workers it stands for."""
        return {worker.rank: count for worker, count in self.groups}

    @property
    def tracks_links(self) -> bool:
        """Some link has a token bucket: the network settles it at every transfer."""
        return self.topology.has_buckets()

    @property
    def last_fragment(self) -> int:
        return self.schedule.fragments(self.scenario.schedule) - 1

    @property
    def synced_outer_steps(self) -> int:
        """The outer steps whose sync completes the run."""
        return self.schedule.synced_outer_steps(self.scenario.schedule)
