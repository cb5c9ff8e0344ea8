"""The trace of an elastic run: each island's rows file (it outlives the island), the rows of the
islands gathered at the end, the compute the departed lost, and each join's time."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from islands.scenarios import Worker
from islands.trace import NO_FRAGMENT, Row

from ..core.tracing import Recorder

ROWS_FOLDER = "islands"


def rows_path(out_dir: Path, island: int) -> Path:
    return out_dir / ROWS_FOLDER / f"island-{island}.rows.jsonl"


def open_rows_sink(recorder: Recorder, out_dir: Path, island: int, append: bool) -> None:
    """From now on the recorder also writes each row to the island's rows file (a fresh run: with the
    rows it holds already; a joiner appends to what its earlier incarnations wrote)."""
    if recorder.sink:
        return
    path = rows_path(out_dir, island)
    path.parent.mkdir(parents=True, exist_ok=True)
    recorder.sink = open(path, "a" if append else "w", encoding="utf-8")
    if not append:
        for row in recorder.rows:
            recorder.sink.write(json.dumps(row) + "\n")


def all_rows(out_dir: Path | None, islands: int, gathered: dict[int, list[Row]]) -> list[Row]:
    """Every island's rows: from its rows file when there is one, else as gathered from the live
    members."""
    rows: list[Row] = []
    for island in range(islands):
        path = rows_path(out_dir, island) if out_dir else None
        if path and path.is_file():
            rows.extend(
                Row(*json.loads(line)) for line in path.read_text(encoding="utf-8").splitlines()
            )
        else:
            rows.extend(Row(*row) for row in gathered.get(island, []))
    return rows


def lost_rows(
    leaves: list[dict[str, Any]], rows: list[Row], workers: Sequence[Worker]
) -> list[Row]:
    """The departed islands' last compute, from their last applied sync to their last heartbeat,
    unless a row of theirs holds it (an island that was only late recorded it itself)."""
    lost = []
    for leave in leaves:
        island, start_s, end_s = leave["island"], leave["last_sync_s"], leave["last_seen_s"]
        recorded = any(
            row.worker == island
            and row.kind == "compute"
            and row.time_start_s < end_s
            and row.time_end_s > start_s
            for row in rows
        )
        if end_s > start_s and not recorded:
            lost.append(
                Row(
                    start_s,
                    end_s,
                    island,
                    workers[island].island,
                    "compute",
                    0.0,
                    NO_FRAGMENT,
                    leave["outer_step"],
                )
            )
    return lost


def join_seconds(joins: list[dict[str, Any]], rows: list[Row]) -> list[dict[str, Any]]:
    """Each join with ``join_s``: from the join request to the island's first compute after it."""
    measured = []
    for join in joins:
        starts = [
            row.time_start_s
            for row in rows
            if row.worker == join["island"]
            and row.kind == "compute"
            and row.time_start_s >= join["requested_s"]
            and row.time_start_s >= join["admitted_s"]
        ]
        measured.append({**join, "join_s": min(starts) - join["requested_s"] if starts else None})
    return measured
