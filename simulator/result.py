"""What a simulation returns, built from the played engine (``result_of``): its summary, its trace
and each link's rate over time.

The engine keeps rows only for the workers it ran (``replicas.py``): ``trace`` and ``links`` give
every replica its lead's rows, and the links table is built from the transfers' rate segments
(``links.link_segments``), all on first use (a run with churn may have millions of segments that a
summary never needs, and a planner's runs need no table at all).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from islands.summary import Columns, Workers, summarise_columns, summary_of
from islands.trace import TRACE_ORDER, Row, to_frame
from islands.units import BITS_PER_BYTE, BITS_PER_GBIT

from . import replicas
from .links import Link, Transfer, link_segments, peak_access_rate
from .lockstep import Lockstep
from .topology import BACKBONE, BACKBONE_WORKER

if TYPE_CHECKING:
    import pandas as pd

    from .engine import Simulation
    from .one_learner import OneLearner

LINK_COLUMNS = ("time_start_s", "time_end_s", "worker", "island", "direction", "rate_gbps")
LINK_ORDER = ("time_start_s", "worker", "direction")


@dataclass
class SimResult:
    """The summary dict, the rows of the workers the engine ran (kept from the run, or made when asked
    for: ``lockstep.py``) and every transfer they made."""

    summary: dict[str, Any]
    row_source: Callable[[], list[Row]]
    transfer_source: Callable[[], list[Transfer]] = list  # the transfers in start order, closed at the end
    islands: dict[Link, str] = field(default_factory=dict)  # every link of the table and the island it serves
    counts: dict[int, int] = field(default_factory=dict)  # workers each simulated worker stands for
    events_after_end: int = 0  # scheduled event actions (one per worker moved) after the run's end

    @cached_property
    def lead_rows(self) -> list[Row]:
        return self.row_source()

    @cached_property
    def transfers(self) -> list[Transfer]:
        return self.transfer_source()

    @cached_property
    def lead_trace(self) -> pd.DataFrame:
        return to_frame(self.lead_rows)

    @cached_property
    def lead_links(self) -> pd.DataFrame:
        return link_table(self.transfers, self.islands)

    @cached_property
    def trace(self) -> pd.DataFrame:
        return replicas.expand(self.lead_trace, self.counts, list(TRACE_ORDER))

    @cached_property
    def links(self) -> pd.DataFrame:
        return replicas.expand(self.lead_links, self.counts, list(LINK_ORDER))


def link_table(transfers: list[Transfer], islands: dict[Link, str]) -> pd.DataFrame:
    """Each link's rate over time, one row per constant-rate segment of each transfer on it (where
    transfers overlap on a link, their rows add up: ``analysis.link_rates.rate_steps``)."""
    import pandas as pd

    rows = [(start, end, link.worker, islands[link], link.direction, rate * BITS_PER_BYTE / BITS_PER_GBIT)
            for link, start, end, rate in link_segments(transfers) if end > start and link in islands]
    frame = pd.DataFrame.from_records(rows, columns=list(LINK_COLUMNS))
    return frame.sort_values(list(LINK_ORDER), kind="stable").reset_index(drop=True)


def result_of(sim: Simulation) -> SimResult:
    """A played simulation's result: its summary from its rows (``summary.summarise_columns``) and
    what the summary does not hold, from the engine's own state."""
    sim.network.close()
    transfers = sim.network.carried
    peak_gbps = peak_access_rate(transfers, sim.topology.access_links()) * BITS_PER_BYTE / BITS_PER_GBIT
    schedule, progress, counts = sim.scenario.schedule, sim.progress, sim.fleet.replica_counts
    rows = sim.trace.rows
    summary = summarise_columns(Columns.of_rows(rows), schedule.outer_steps if progress.complete else
                                progress.completed_outer, peak_gbps, extra_summary(sim), island_extra=island_extra(sim),
                                syncs_per_worker=not sim.schedule.coupled, weights=counts)
    return SimResult(summary=summary, row_source=lambda: rows, transfer_source=lambda: transfers,
                     islands=islands_of_links(sim), counts=counts)


def lockstep_result(sim: Simulation, replay: Callable[[], list[Row]]) -> SimResult:
    """A lockstep run's result (``lockstep.py``): its summary gathered as it ran; ``replay`` makes its
    rows when they are asked for."""
    run = Lockstep(sim)
    run.play()
    # a run of one worker makes its transfers when asked for; its rings' first transfers have their peaks
    peak_transfers = run.transfers if run.one_run is None else run.peak_transfers
    peak_gbps = peak_access_rate(peak_transfers, sim.topology.access_links()) * BITS_PER_BYTE / BITS_PER_GBIT
    durations = np.array(run.sync_durations_s)
    summary = summary_of(run.workers(), float(run.now.max()), durations, np.ones(len(durations), dtype=np.int64),
                         sim.scenario.schedule.outer_steps, peak_gbps, extra_summary(sim), island_extra(sim))
    transfers = (lambda: run.transfers) if run.one_run is None else run.one_transfers
    return SimResult(summary=summary, row_source=replay, transfer_source=transfers, islands=islands_of_links(sim),
                     counts=sim.fleet.replica_counts)


def played_result(sim: Simulation, run: OneLearner) -> SimResult:
    """A Decoupled run of one learner played without events (``one_learner.py``): its summary from the
    sums it gathered as it went (those ``summarise_columns`` takes over an event run's rows, in its
    order); its rows and transfers made when they are asked for."""
    sim.network.close()
    peak_gbps = peak_access_rate(run.peak_transfers(), sim.topology.access_links()) * BITS_PER_BYTE / BITS_PER_GBIT
    schedule, progress, counts, totals = sim.scenario.schedule, sim.progress, sim.fleet.replica_counts, run.totals
    count = np.array([counts.get(run.rank, 1)], dtype=np.int64)
    durations = np.array(run.sync_durations_s())
    workers = Workers(island=np.array([run.island], dtype=object), count=count,
                      compute=np.array([totals.seconds["compute"]]), stall=np.array([totals.seconds["stall"]]),
                      idle=np.array([totals.seconds["idle"]]), present_s=np.array([totals.present_s]),
                      bytes_sent=np.array([totals.bytes_sent]), syncs=np.array([float(len(durations))]))
    summary = summary_of(workers, totals.wall_time_s, durations, np.repeat(count, len(durations)),
                         schedule.outer_steps if progress.complete else progress.completed_outer, peak_gbps,
                         extra_summary(sim), island_extra(sim))
    return SimResult(summary=summary, row_source=run.trace_rows, transfer_source=run.transfers,
                     islands=islands_of_links(sim), counts=counts)


def extra_summary(sim: Simulation) -> dict[str, Any]:
    scenario = sim.scenario
    return {
        "scenario": scenario.name,
        "algorithm": scenario.schedule.algorithm,
        "network_model": sim.network_model,
        "barrier": scenario.schedule.barrier,
        "outer_steps_planned": scenario.schedule.outer_steps,
        "inner_steps": sim.schedule.total_steps(scenario.schedule),
        "lost_compute_s": sim.churn.lost_compute_s + sim.failures.lost_compute_s,
        "dropped_compute_s": sim.barrier.dropped_compute_s,
        "dropped_deltas": sim.barrier.counts["dropped_deltas"],
        "horizon_reached": sim.horizon_reached,
        "incomplete_reason": sim.incomplete_reason,
        **sim.churn.counts,
        **sim.failures.counts,
        **sim.exchanges.counts,
        "useful_chip_s": useful_chip_s(sim),
        "chips": scenario.chips,
        "events": sim.env.events_processed,
    }


def useful_chip_s(sim: Simulation) -> float:
    """Chip-seconds of the work that reached the global model: every worker's merged inner steps
    at its mean step time, times its chips."""
    return sum(s.merged_steps * s.worker.step_time_s * s.worker.chips * s.count for s in sim.fleet.states)


def island_extra(sim: Simulation) -> dict[str, dict[str, float]]:
    tokens_per_step = sim.scenario.model.tokens_per_step
    extra: dict[str, dict[str, float]] = {}
    for island in sim.scenario.islands:
        states = [s for s in sim.fleet.states if s.worker.island == island.name]
        merged = sum(s.merged_steps * s.count for s in states) / sum(s.count for s in states)
        extra[island.name] = {
            "inner_steps": merged,
            "tokens": merged * tokens_per_step if tokens_per_step else None,
        }
    return extra


def islands_of_links(sim: Simulation) -> dict[Link, str]:
    """Every access link and backbone, and the island it serves (the links table's rows)."""
    return {link: BACKBONE if link.worker == BACKBONE_WORKER else sim.fleet.workers[link.worker].island
            for link in sim.topology.access_links() + sim.topology.backbone_links()}
