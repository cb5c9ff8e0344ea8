"""Fit the one-FIFO-per-egress model to fifo_exchange.py's results; print each cell, measured beside fitted.

    python benchmarks/fifo_model.py benchmarks/results/fifo-exchange-cubic.json \
        benchmarks/results/fifo-streams-cubic.json
    python benchmarks/fifo_model.py summary benchmarks/results/fifo-*.json   # one row per condition

The model (docs/emulation.md, "One FIFO per egress"), fitted per TCP congestion control: relative to
fair queues on the same link,

    e_fifo / e_fair = 1 - k_s * s - k_so * s * o,    s = sqrt(F * R_REF / r),  o = max(0, 1 - Q / (F * a))

with r the link's rate, F the flows that send through the island's egress at once, Q the FIFO's
depth in seconds and a the seconds of the rate each flow keeps standing in the egress queue (TCP
small queues: about two GSO packets per socket), measured from the fair cells (their egress queue
over F: htb keeps the same bytes). F * a is what the flows would queue, and the delay an ACK of the
island's downloads waits behind its uploads is d = min(Q, F * a); o is the share of it the FIFO
cannot hold (tail drops: each one a congestion window cut). k_s and k_so are linear least squares.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

R_REF_BITS_PER_S = 10e6


def cells(paths: list[str]) -> list[dict]:
    rows = []
    for path in paths:
        for row in json.loads(Path(path).read_text())["cells"]:
            if row.get("fifo_at", "host") != "host":
                continue
            rows.append(
                {
                    "exchange": row.get("exchange", "allreduce"),
                    "cc": row["congestion_control"],
                    "m": row["islands"],
                    "rate": row["rate_bits_per_s"],
                    "flows": row.get("flows") or 1,
                    "shaper": row["shaper"],
                    "queue_s": (row["queue_ms"] or 0) / 1e3,
                    "e": statistics.median(row["fraction_of_rate"]),
                    "spread": row["fraction_of_rate"],
                    "queue_ms": row["samples"]["egress_queue_ms_median"],
                }
            )
    return rows


def per_flow_standing_s(rows: list[dict]) -> dict[tuple, float]:
    """a(r) by (congestion control, rate): the fair cells' median egress queue over their flows, in s."""
    found = defaultdict(list)
    for row in rows:
        if row["shaper"] == "fair" and row["queue_ms"]:
            found[(row["cc"], row["rate"])].append(row["queue_ms"] / 1e3 / row["flows"])
    return {key: statistics.median(values) for key, values in found.items()}


def predictors(row: dict, standing_s: float) -> tuple[float, float, float]:
    """(s, o, d) of a FIFO cell: the flows-over-rate term, the overflow and the ACK's wait."""
    demand_s = row["flows"] * standing_s
    return (
        np.sqrt(row["flows"] * R_REF_BITS_PER_S / row["rate"]),
        max(0.0, 1 - row["queue_s"] / demand_s),
        min(row["queue_s"], demand_s),
    )


def fit(rows: list[dict]) -> None:
    standing = per_flow_standing_s(rows)
    fair = {
        (r["exchange"], r["cc"], r["m"], r["rate"], r["flows"]): r["e"]
        for r in rows
        if r["shaper"] == "fair"
    }
    fifo = [r for r in rows if r["shaper"] == "fifo"]
    for cc in sorted({r["cc"] for r in fifo}):
        mine = [r for r in fifo if r["cc"] == cc]
        x = np.array([predictors(r, standing[(cc, r["rate"])]) for r in mine])
        y = np.array(
            [r["e"] / fair[(r["exchange"], cc, r["m"], r["rate"], r["flows"])] for r in mine]
        )
        columns = np.column_stack([x[:, 0], x[:, 0] * x[:, 1]])
        (k_s, k_so), *_ = np.linalg.lstsq(columns, 1 - y, rcond=None)
        fitted = 1 - columns @ np.array([k_s, k_so])
        errors = fitted - y
        print(
            f"{cc}: k_s = {k_s:.4f}, k_so = {k_so:.4f}; {len(mine)} cells, residual rms "
            f"{100 * np.sqrt(np.mean(errors**2)):.1f} points "
            f"(fifo = fair: {100 * np.sqrt(np.mean((1 - y) ** 2)):.1f}), "
            f"worst {100 * np.max(np.abs(errors)):.1f}; a(r) = "
            + ", ".join(
                f"{1e3 * s:.1f} ms at {rate / 1e6:g}"
                for (c, rate), s in sorted(standing.items())
                if c == cc
            )
            + " Mbit/s"
        )
        print(
            "| exchange | M | Mbit/s | flows | FIFO ms | s | o | d ms | fifo / fair | fitted | each repeat / rate |"
        )
        print("|" + " --- |" * 11)
        for row, (s_term, o, d), measured, model in zip(mine, x, y, fitted):
            flows = "all-reduce" if row["exchange"] == "allreduce" else "streams"
            print(
                f"| {flows} | {row['m']} | {row['rate'] / 1e6:g} | {row['flows']} | {1e3 * row['queue_s']:g} | "
                f"{s_term:.2f} | {o:.2f} | {1e3 * d:.1f} | {measured:.3f} | {model:.3f} | "
                f"{', '.join(f'{v:.3f}' for v in row['spread'])} |"
            )
        print()


def summary(paths: list[str]) -> None:
    """One row per exchange, TCP algorithm, flows and rate: each shaper's achieved fraction of the rate,
    median over the numbers of islands and the repeats, with its range."""
    found = defaultdict(list)
    placements = {}
    for path in paths:
        for row in json.loads(Path(path).read_text())["cells"]:
            where = row.get("fifo_at", "host")
            shaper = "fair" if row["shaper"] == "fair" else f"fifo {row['queue_ms']:g}"
            key = (
                where,
                row.get("exchange", "allreduce"),
                row["congestion_control"],
                row.get("flows") or 1,
                row["rate_bits_per_s"],
            )
            found[key + (shaper,)] += row["fraction_of_rate"]
            placements.setdefault(key, set()).add(row["islands"])
    shapers = ["fair", "fifo 20", "fifo 100", "fifo 200"]
    print("| FIFO at | exchange | TCP | flows | M | Mbit/s | " + " | ".join(shapers) + " |")
    print("|" + " --- |" * (6 + len(shapers)))
    for key in sorted(placements):
        where, exchange, cc, flows, rate = key
        values = [found.get(key + (shaper,)) for shaper in shapers]
        text = [
            f"{statistics.median(v):.3f} ({min(v):.2f}-{max(v):.2f})" if v else "-" for v in values
        ]
        islands = ", ".join(map(str, sorted(placements[key])))
        print(
            f"| {where} | {exchange} | {cc} | {flows} | {islands} | {rate / 1e6:g} | "
            + " | ".join(text)
            + " |"
        )


if __name__ == "__main__":
    if sys.argv[1:2] == ["summary"]:
        summary(sys.argv[2:])
    else:
        fit(cells(sys.argv[1:]))
