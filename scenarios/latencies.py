"""Measured round trips between islands: ``[[latency]]`` entries, or a CSV of them.

    [[latency]]
    between = ["us-dc", "eu-dc"]
    rtt_ms = 83.5

    [network]
    rtt_csv = "rtts.csv"     # a,b,rtt_ms rows, relative to the scenario's folder

A pair given here replaces the additive model for its workers (the sender's access latency, the
backbone's, the receiver's) by half its round trip, both ways; every other pair keeps the additive
model. The CSV is what a ping matrix tool writes (``a,b,rtt_ms`` header, one row per pair), and its
rows are read as entries of their own: a pair given twice, in the file or beside it, is refused.
"""

from __future__ import annotations

import copy
import csv
import io
from pathlib import Path
from typing import Any

from islands.errors import UserError
from islands.io import read_bounded_text
from islands.numbers import is_finite_number

from .errors import ScenarioError
from .model import IslandSpec, PairLatency
from .spec import LATENCY_KEYS, shown_value

CSV_COLUMNS = ("a", "b", "rtt_ms")
MAX_RTT_CSV_BYTES = 16 * 2**20  # about 400k rows of a,b,rtt_ms: a matrix of some 900 islands


def csv_path(rtt_csv: str, source: str) -> Path:
    """``rtt_csv`` as written, or relative to the scenario file's folder."""
    path = Path(rtt_csv)
    return path if path.is_absolute() else Path(source).parent / path


def read_rtt_csv(rtt_csv: str, source: str) -> list[tuple[PairLatency, str]]:
    """Each row of the CSV as (a pair's round trip, where it was read: ``file:line``)."""
    path = csv_path(rtt_csv, source)
    try:
        text = read_bounded_text(path, "round-trip CSV", MAX_RTT_CSV_BYTES)
        rows = list(csv.DictReader(io.StringIO(text, newline="")))
        header = tuple(rows[0]) if rows else ()
    except (UserError, csv.Error) as error:
        raise ScenarioError(source, "network.rtt_csv", f"cannot read {path}: {error}") from None
    if not rows or any(column not in header for column in CSV_COLUMNS):
        raise ScenarioError(
            source, "network.rtt_csv", f"{path}: needs a header a,b,rtt_ms and a row per pair"
        )
    rtt_check = LATENCY_KEYS["rtt_ms"].check
    assert rtt_check is not None  # the key has a rule (scenarios/spec.py)
    pairs = []
    for line, row in enumerate(rows, start=2):
        where = f"{path}:{line}"
        try:
            rtt_ms = float(row["rtt_ms"])
        except (TypeError, ValueError):
            raise ScenarioError(
                source,
                "network.rtt_csv",
                f"{where}: rtt_ms must be a number (got {shown_value(row['rtt_ms'])})",
            ) from None
        problem = rtt_check(rtt_ms) if is_finite_number(rtt_ms) else "must be finite"
        if problem:
            raise ScenarioError(
                source, "network.rtt_csv", f"{where}: rtt_ms {problem} (got {shown_value(rtt_ms)})"
            )
        pairs.append((PairLatency((row["a"] or "", row["b"] or ""), rtt_ms), where))
    return pairs


def check_latencies(
    entries: list[tuple[PairLatency, str]], islands: tuple[IslandSpec, ...], source: str
) -> tuple[PairLatency, ...]:
    """Every pair names two islands and is given once; ``entries`` carry where each was read."""
    names = {island.name for island in islands}
    seen: dict[frozenset[str], str] = {}
    for latency, where in entries:
        for name in latency.between:
            if name not in names:
                raise ScenarioError(source, where, f"no island named '{name}'")
        pair = frozenset(latency.between)
        if pair in seen:
            raise ScenarioError(
                source,
                where,
                f"the round trip between {' and '.join(latency.between)} is "
                f"given twice (also at {seen[pair]})",
            )
        seen[pair] = where
    return tuple(latency for latency, _ in entries)


def inline_rtt_csv(document: dict[str, Any], source: str) -> dict[str, Any]:
    """The document with its CSV's rows as ``[[latency]]`` tables and no ``network.rtt_csv``: what a
    sweep ships to its workers (a Dask cluster's may not see the file)."""
    rtt_csv = document.get("network", {}).get("rtt_csv")
    if not isinstance(rtt_csv, str) or not rtt_csv:
        return document
    inlined = copy.deepcopy(document)
    del inlined["network"]["rtt_csv"]
    rows = [
        {"between": list(pair.between), "rtt_ms": pair.rtt_ms}
        for pair, _ in read_rtt_csv(rtt_csv, source)
    ]
    inlined["latency"] = [*inlined.get("latency", []), *rows]
    return inlined


def with_csv(
    entries: list[tuple[PairLatency, str]],
    rtt_csv: str,
    islands: tuple[IslandSpec, ...],
    source: str,
) -> tuple[PairLatency, ...]:
    """The ``[[latency]]`` entries (each with where it was read) and the CSV's rows, checked."""
    return check_latencies(
        entries + (read_rtt_csv(rtt_csv, source) if rtt_csv else []), islands, source
    )
