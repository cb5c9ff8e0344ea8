"""Streaming DiLoCo's table of bandwidth per compute utilisation, reproduced by the planner's search.

Douillard et al. 2025 ("Streaming DiLoCo with overlapping communication", arXiv:2501.18512, Table 4)
simulate 1B, 10B and 100B models and give, for each method, the Gbit/s that reaches a compute
utilisation (CU) of 50, 80, 90, 95 and 99%. The bundled scenarios ``streaming-diloco-1b``, ``-10b``
and ``-100b`` hold the set-up of the table's "w/ overlapped com." row; each other row is one override
(``ROWS``). ``bandwidth_table`` runs the planner's ``least_bandwidth`` for every cell.

The paper reads each cell off a grid of bandwidths 1.207x apart (... 184.2, 222.3, 268.3 ...): the
first grid value that reaches the CU. So a cell says the answer lies in (cell / 1.207, cell]; ours
agrees with it when the two are within one grid step, a factor of ``GRID_STEP``.
"""

from __future__ import annotations

from concurrent.futures import Executor
from dataclasses import replace

import pandas as pd

from islands.scenarios import ScenarioSource
from islands.schedules import DDP, SCHEDULES, DiLoCo, Streaming, switch_to
from islands.simulator import DEFAULT_MAX_EVENTS, guard

from ..parallel import Progress, run_tasks
from .search import least_bandwidth

TARGETS = (0.5, 0.8, 0.9, 0.95, 0.99)
GRID_STEP = 1.207
SIZES = ("1b", "10b", "100b")

# The table's rows, each as the overrides that turn the bundled scenario into it.
ROWS = {
    "Data-Parallel": switch_to(DDP.name),
    "Vanilla DiLoCo": switch_to(DiLoCo.name),
    "Streaming DiLoCo": ("schedule.overlap_steps=0",),
    "w/ overlapped com.": (),
    "w/ overlapped FP4 com.": ("schedule.bits=4",),
}

# The schedule each row stands for: a --set that changes it makes the row another method.
ROW_ALGORITHMS = {"Data-Parallel": DDP.name, "Vanilla DiLoCo": DiLoCo.name}
DEFAULT_ROW_ALGORITHM = Streaming.name

# Table 4, Gbit/s for CU = 50 / 80 / 90 / 95 / 99%, as the arXiv HTML rendering prints it.
PAPER_GBPS = {
    "1b": {
        "Data-Parallel": (86.8, 152.6, 184.2, 222.3, 569.0),
        "Vanilla DiLoCo": (1.4, 6.2, 13.3, 23.3, 86.8),
        "Streaming DiLoCo": (1.4, 5.2, 9.1, 16.0, 28.1),
        "w/ overlapped com.": (1.4, 4.3, 6.2, 9.1, 11.0),
        "w/ overlapped FP4 com.": (0.4, 0.9, 1.7, 2.0, 3.0),
    },
    "10b": {
        "Data-Parallel": (104.8, 222.3, 222.3, 268.3, 471.5),
        "Vanilla DiLoCo": (1.7, 7.5, 16.0, 33.9, 104.8),
        "Streaming DiLoCo": (1.7, 5.2, 9.1, 13.3, 19.3),
        "w/ overlapped com.": (1.7, 3.6, 5.2, 6.2, 7.5),
        "w/ overlapped FP4 com.": (0.4, 0.9, 1.4, 1.4, 1.7),
    },
    "100b": {
        "Data-Parallel": (184.2, 323.8, 390.7, 390.7, 471.5),
        "Vanilla DiLoCo": (3.0, 11.0, 23.3, 49.4, 184.2),
        "Streaming DiLoCo": (2.4, 6.2, 9.1, 11.0, 19.3),
        "w/ overlapped com.": (1.7, 3.6, 4.3, 5.2, 5.2),
        "w/ overlapped FP4 com.": (0.5, 0.9, 1.1, 1.1, 1.4),
    },
}


def scenario_name(size: str) -> str:
    return f"streaming-diloco-{size}"


def cell_gbps(source: ScenarioSource, target: float, overrides: tuple[str, ...]) -> float | None:
    """The least Gbit/s per island that reaches ``target``; None where no bandwidth does."""
    return least_bandwidth(source, target, *overrides).value


def bandwidth_table(
    sizes: tuple[str, ...] = SIZES,
    overrides: tuple[str, ...] = (),
    executor: Executor | None = None,
    jobs: int | None = None,
    progress: Progress | None = None,
    max_events: float = DEFAULT_MAX_EVENTS,
) -> pd.DataFrame:
    """One row per (size, method, target): our Gbit/s, the paper's, their ratio, and whether they are
    within one grid step. ``overrides`` apply to every cell before the row's own."""
    cells = [(size, row, target) for size in sizes for row in ROWS for target in TARGETS]
    sources = {
        size: replace(ScenarioSource.read(scenario_name(size), overrides), max_events=max_events)
        for size in sizes
    }
    for size in sizes:  # fail here, in one line, rather than call every cell of a row unreachable
        for row in ROWS:
            guard(sources[size].variant(*ROWS[row]), sources[size].max_events)
    labels = {(size, row): row_label(sources[size], row) for size in sizes for row in ROWS}
    tasks = [(sources[size], target, ROWS[row]) for size, row, target in cells]
    results = run_tasks(cell_gbps, tasks, executor=executor, jobs=jobs, progress=progress)
    rows = []
    for (size, row, target), ours in zip(cells, results):
        label = labels[size, row]
        paper = PAPER_GBPS[size][row][TARGETS.index(target)] if label == row else None
        ratio = None if ours is None or paper is None else ours / paper
        rows.append(
            {
                "size": size,
                "method": label,
                "target_utilisation": target,
                "ours_gbps": ours,
                "paper_gbps": paper,
                "ratio": ratio,
                "within_grid_step": ratio is not None and 1 / GRID_STEP <= ratio <= GRID_STEP,
            }
        )
    return pd.DataFrame(rows)


def row_label(source: ScenarioSource, row: str) -> str:
    """The row's name where its scenario runs the schedule the row stands for; else what it runs (a
    ``--set schedule.algorithm`` made it another method, which the paper's cells do not describe)."""
    algorithm = source.variant(*ROWS[row]).schedule.algorithm
    if algorithm == ROW_ALGORITHMS.get(row, DEFAULT_ROW_ALGORITHM):
        return row
    return f"{row} run as {SCHEDULES[algorithm].label}"


def table_text(table: pd.DataFrame) -> str:
    """One Markdown table per size, "ours (paper)" in each cell and a mark on cells more than one grid
    step apart; then the count of cells that agree."""
    blocks = []
    for size, by_size in table.groupby("size", sort=False):
        header = " | ".join(f"CU {100 * t:g}%" for t in TARGETS)
        lines = [
            f"{size.upper()} (`{scenario_name(size)}`), Gbit/s, ours (paper):",
            "",
            f"| method | {header} |",
            "| --- |" + " --- |" * len(TARGETS),
        ]
        for method, rows in by_size.groupby("method", sort=False):
            cells = [cell_text(row) for row in rows.itertuples()]
            lines.append(f"| {method} | " + " | ".join(cells) + " |")
        blocks.append("\n".join(lines))
    agree = int(table["within_grid_step"].sum())
    compared = int(table["paper_gbps"].notna().sum())
    blocks.append(
        f"{agree} of {compared} cells within one grid step ({GRID_STEP}x) of the paper's; "
        f"* marks the others"
    )
    return "\n\n".join(blocks)


def cell_text(row) -> str:
    ours = (
        "unreachable" if row.ours_gbps is None or pd.isna(row.ours_gbps) else f"{row.ours_gbps:.3g}"
    )
    if row.paper_gbps is None or pd.isna(row.paper_gbps):
        return f"{ours} (no paper cell)"
    mark = "" if row.within_grid_step else " *"
    return f"{ours} ({row.paper_gbps:g}){mark}"
