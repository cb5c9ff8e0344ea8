"""The discrete-event engine: workers compute, schedules call collectives, the network times them.

Each worker is one SimPy process that walks its schedule's sync points. Between two points it
computes the steps in between as one timeout (a run's cost grows with the number of syncs and
fragments, not with H). At a launch point it joins the collective, which starts when every
participant has joined; at an apply point it waits for the collective to finish. Waiting for late
participants is recorded as ``idle``, waiting for the transfer itself as ``stall``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generator

import pandas as pd
import simpy

from islands.scenarios import Scenario, Worker
from islands.summary import summarise
from islands.trace import NO_FRAGMENT, to_frame

from .collectives import PendingCollective, RingAllReduce
from .network import Link, make_network
from .schedules import SCHEDULES, SyncPoint

LINK_COLUMNS = ("time_start_s", "time_end_s", "worker", "island", "direction", "rate_gbps")


class CountingEnvironment(simpy.Environment):
    """A SimPy environment that counts the events it processes (for the benchmarks)."""

    def __init__(self) -> None:
        super().__init__()
        self.events_processed = 0

    def step(self) -> None:
        self.events_processed += 1
        super().step()


@dataclass
class SimResult:
    """What a simulation returns: the summary dict, the trace and each link's rate over time."""

    summary: dict[str, Any]
    trace: pd.DataFrame
    links: pd.DataFrame


def network_model_for(scenario: Scenario) -> str:
    """The scenario's network model; ``auto`` takes the flow model only where transfers may share links."""
    if scenario.network.model != "auto":
        return scenario.network.model
    schedule = SCHEDULES[scenario.schedule.algorithm]
    return "flow" if schedule.transfers_may_overlap(scenario) else "alpha-beta"


class Simulation:
    """One run of one scenario. Build it, call ``run()`` once."""

    def __init__(self, scenario: Scenario):
        self.scenario = scenario
        self.schedule = SCHEDULES[scenario.schedule.algorithm]
        self.env = CountingEnvironment()
        self.workers = scenario.workers()
        self.network_model = network_model_for(scenario)
        self.network = make_network(self.network_model, self.env)
        self.uplinks = {w.rank: Link(w.rank, "up", w.upload_bytes_per_s) for w in self.workers}
        self.downlinks = {w.rank: Link(w.rank, "down", w.download_bytes_per_s) for w in self.workers}
        self.latency_s = {w.rank: w.latency_s for w in self.workers}
        self.island_of = {w.rank: w.island for w in self.workers}
        self.pending: dict[tuple[int, int], PendingCollective] = {}
        self.rows: list[tuple] = []

    def run(self) -> SimResult:
        for worker in self.workers:
            self.env.process(self.worker_process(worker))
        self.env.run()
        trace = to_frame(self.rows)
        links = self.link_table()
        peak_gbps = max(link.peak_bytes_per_s for link in self.all_links()) * 8 / 1e9
        extra = {
            "scenario": self.scenario.name,
            "algorithm": self.scenario.schedule.algorithm,
            "network_model": self.network_model,
            "inner_steps": self.schedule.inner_steps(self.scenario),
            "events": self.env.events_processed,
        }
        summary = summarise(trace, self.scenario.schedule.outer_steps, peak_gbps, extra)
        return SimResult(summary=summary, trace=trace, links=links)

    def worker_process(self, worker: Worker) -> Generator[simpy.Event, Any, None]:
        position = 0.0
        for point in self.schedule.sync_points(self.scenario):
            position = yield from self.compute(worker, position, point.launch_step, point.outer_step)
            collective = self.join(worker, point)
            position = yield from self.compute(worker, position, point.apply_step, point.outer_step)
            yield from self.wait(worker, collective, point)

    def compute(self, worker: Worker, position: float, target: float,
                outer_step: int) -> Generator[simpy.Event, Any, float]:
        """Compute from step ``position`` to step ``target`` in one timeout; return the new position."""
        steps = target - position
        if steps <= 0:
            return position
        start = self.env.now
        yield self.env.timeout(steps * worker.step_time_s)
        self.record(start, worker.rank, "compute", 0.0, NO_FRAGMENT, outer_step)
        return target

    def join(self, worker: Worker, point: SyncPoint) -> PendingCollective:
        key = (point.outer_step, point.fragment)
        collective = self.pending.get(key)
        if collective is None:
            collective = PendingCollective(key=key, expected=len(self.workers), done=self.env.event())
            self.pending[key] = collective
        collective.arrived.append(worker.rank)
        if len(collective.arrived) == collective.expected:
            self.start(collective, point)
        return collective

    def start(self, collective: PendingCollective, point: SyncPoint) -> None:
        ring = RingAllReduce(tuple(sorted(collective.arrived)), point.payload_bytes)
        collective.started_at_s = self.env.now
        transfer = self.network.transfer(ring.links(self.uplinks, self.downlinks), ring.bytes_per_worker,
                                         ring.latency_s(self.latency_s))
        transfer.callbacks.append(lambda _event: self.finish(collective, ring, point))

    def finish(self, collective: PendingCollective, ring: RingAllReduce, point: SyncPoint) -> None:
        for rank in ring.participants:
            self.record(collective.started_at_s, rank, "comm", ring.bytes_per_worker, point.fragment,
                        point.outer_step)
        del self.pending[collective.key]
        collective.done.succeed()

    def wait(self, worker: Worker, collective: PendingCollective,
             point: SyncPoint) -> Generator[simpy.Event, Any, None]:
        arrived_s = self.env.now
        if collective.done.callbacks is not None:  # not yet processed
            yield collective.done
        started_s = max(arrived_s, collective.started_at_s)
        if started_s > arrived_s:
            self.rows.append((arrived_s, started_s, worker.rank, worker.island, "idle", 0.0, point.fragment,
                              point.outer_step))
        if self.env.now > started_s:
            self.record(started_s, worker.rank, "stall", 0.0, point.fragment, point.outer_step)

    def record(self, start_s: float, rank: int, kind: str, sent_bytes: float, fragment: int,
               outer_step: int) -> None:
        """Append a trace row from ``start_s`` to now."""
        self.rows.append((start_s, self.env.now, rank, self.island_of[rank], kind, sent_bytes, fragment,
                          outer_step))

    def all_links(self) -> list[Link]:
        return list(self.uplinks.values()) + list(self.downlinks.values())

    def link_table(self) -> pd.DataFrame:
        rows = []
        for link in self.all_links():
            link.set_rate(self.env.now, 0.0)
            for start, end, rate in link.segments:
                rows.append((start, end, link.worker, self.island_of[link.worker], link.direction, rate * 8 / 1e9))
        frame = pd.DataFrame.from_records(rows, columns=list(LINK_COLUMNS))
        return frame.sort_values(["time_start_s", "worker", "direction"], kind="stable").reset_index(drop=True)


def simulate(scenario: Scenario) -> SimResult:
    """Play a scenario's schedule through the discrete-event model."""
    return Simulation(scenario).run()
