"""What a simulation returns, built in one place (``result_of``) from the setup and whatever player
played it (``players.py``): its summary, its trace and each link's rate over time.

The players keep rows only for the workers they ran (``replicas.py``): ``trace`` and ``links`` give
every replica its lead's rows, and the links table is built from the transfers' rate segments
(``links.link_segments``), all on first use (a run with churn may have millions of segments that a
summary never needs, and a planner's runs need no table at all).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from islands.numbers import is_finite_number
from islands.scenarios import ScenarioError
from islands.summary import summary_of
from islands.trace import TRACE_ORDER, Row, to_frame
from islands.units import BITS_PER_BYTE, BITS_PER_GBIT

from . import replicas
from .network.links import Link, Transfer, link_segments
from .network.topology import BACKBONE, BACKBONE_WORKER
from .played import Played
from .setup import RunSetup

if TYPE_CHECKING:
    import pandas as pd

LINK_COLUMNS = ("time_start_s", "time_end_s", "worker", "island", "direction", "rate_gbps")
LINK_ORDER = ("time_start_s", "worker", "direction")


@dataclass
class SimResult:
    """The summary dict, the rows of the workers the player ran (kept from the run, or made when asked
    for) and every transfer they made."""

    summary: dict[str, Any]
    row_source: Callable[[], list[Row]]
    transfer_source: Callable[[], list[Transfer]] = (
        list  # the transfers in start order, closed at the end
    )
    islands: dict[Link, str] = field(
        default_factory=dict
    )  # every link of the table and the island it serves
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

    rows = [
        (
            start,
            end,
            link.worker,
            islands[link],
            link.direction,
            rate * BITS_PER_BYTE / BITS_PER_GBIT,
        )
        for link, start, end, rate in link_segments(transfers)
        if end > start and link in islands
    ]
    frame = pd.DataFrame.from_records(rows, columns=list(LINK_COLUMNS))
    return frame.sort_values(list(LINK_ORDER), kind="stable").reset_index(drop=True)


def result_of(setup: RunSetup, played: Played) -> SimResult:
    """The run's result: its summary from the totals the player gathered (``summary.summary_of``) and
    what the summary does not hold, from the setup. A wall time that is not finite is refused in one
    line, never printed as nan (every key's range is meant to keep it finite: one that did not is a
    range to tighten, as ``network.ring_efficiency``'s was)."""
    if not is_finite_number(played.wall_time_s):
        raise ScenarioError(
            setup.scenario.source,
            "",
            f"the run's wall time came out {played.wall_time_s} s: a rate or a cost in it is too "
            "small or too large to price (docs/limits.md)",
        )
    summary = summary_of(
        played.totals,
        played.wall_time_s,
        played.sync_durations_s,
        played.sync_counts,
        played.outer_steps,
        played.peak_gbps,
        extra_summary(setup, played),
        island_extra(setup, played),
    )
    return SimResult(
        summary=summary,
        row_source=played.row_source,
        transfer_source=played.transfer_source,
        islands=islands_of_links(setup),
        counts=setup.replica_counts,
        events_after_end=played.events_after_end,
    )


def extra_summary(setup: RunSetup, played: Played) -> dict[str, Any]:
    scenario = setup.scenario
    return {
        "scenario": scenario.name,
        "algorithm": scenario.schedule.algorithm,
        "network_model": setup.network_model,
        "barrier": scenario.schedule.barrier,
        "outer_steps_planned": scenario.schedule.outer_steps,
        "inner_steps": setup.schedule.total_steps(scenario.schedule),
        "lost_compute_s": played.lost_compute_s,
        "dropped_compute_s": played.dropped_compute_s,
        "dropped_deltas": played.dropped_deltas,
        "horizon_reached": played.horizon_reached,
        "incomplete_reason": played.incomplete_reason,
        **played.counts,
        "useful_chip_s": useful_chip_s(setup, played),
        "chips": scenario.chips,
        "events": played.events,
        "player": played.player,
    }


def useful_chip_s(setup: RunSetup, played: Played) -> float:
    """Chip-seconds of the work that reached the global model: every worker's merged inner steps
    at its mean step time, times its chips."""
    merged = played.merged_steps
    return sum(merged[w.rank] * w.step_time_s * w.chips * count for w, count in setup.groups)


def island_extra(setup: RunSetup, played: Played) -> dict[str, dict[str, float | None]]:
    tokens_per_step = setup.scenario.model.tokens_per_step
    extra: dict[str, dict[str, float | None]] = {}
    for island in setup.scenario.islands:
        groups = [(worker, count) for worker, count in setup.groups if worker.island == island.name]
        merged = sum(played.merged_steps[w.rank] * count for w, count in groups) / sum(
            c for _, c in groups
        )
        extra[island.name] = {
            "inner_steps": merged,
            "tokens": merged * tokens_per_step if tokens_per_step else None,
        }
    return extra


def islands_of_links(setup: RunSetup) -> dict[Link, str]:
    """Every access link and backbone, and the island it serves (the links table's rows)."""
    workers, topology = setup.workers, setup.topology
    return {
        link: BACKBONE if link.worker == BACKBONE_WORKER else workers[link.worker].island
        for link in topology.access_links() + topology.backbone_links()
    }
