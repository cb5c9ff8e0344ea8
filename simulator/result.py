"""What a simulation returns: its summary, its trace and each link's rate over time.

The engine keeps rows only for the workers it ran (``replicas.py``): ``trace`` and ``links`` give
every replica its lead's rows, and the links table is built from the links' rate segments, all on
first use (a run with churn may have millions of segments that a summary never needs, and a
planner's runs need no table at all).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from islands.trace import TRACE_ORDER, Row, to_frame
from islands.units import BITS_PER_BYTE, BITS_PER_GBIT

from . import replicas
from .network import Link

if TYPE_CHECKING:
    import pandas as pd

LINK_COLUMNS = ("time_start_s", "time_end_s", "worker", "island", "direction", "rate_gbps")
LINK_ORDER = ("time_start_s", "worker", "direction")


@dataclass
class SimResult:
    """The summary dict, the rows of the workers the engine ran and every link (closed at the end)."""

    summary: dict[str, Any]
    lead_rows: list[Row]
    closed_links: list[tuple[Link, str]] = field(default_factory=list)  # every link and the island it serves
    counts: dict[int, int] = field(default_factory=dict)  # workers each simulated worker stands for
    events_after_end: int = 0  # scheduled event actions (one per worker moved) after the run's end

    @cached_property
    def lead_trace(self) -> pd.DataFrame:
        return to_frame(self.lead_rows)

    @cached_property
    def lead_links(self) -> pd.DataFrame:
        return link_table(self.closed_links)

    @cached_property
    def trace(self) -> pd.DataFrame:
        return replicas.expand(self.lead_trace, self.counts, list(TRACE_ORDER))

    @cached_property
    def links(self) -> pd.DataFrame:
        return replicas.expand(self.lead_links, self.counts, list(LINK_ORDER))


def link_table(closed_links: list[tuple[Link, str]]) -> pd.DataFrame:
    """Each link's rate over time, one row per constant-rate segment."""
    import pandas as pd

    rows = [(start, end, link.worker, island, link.direction, rate * BITS_PER_BYTE / BITS_PER_GBIT)
            for link, island in closed_links for start, end, rate in link.segments if end > start]
    frame = pd.DataFrame.from_records(rows, columns=list(LINK_COLUMNS))
    return frame.sort_values(list(LINK_ORDER), kind="stable").reset_index(drop=True)
