"""Fit the one-FIFO-per-egress model to fifo_exchange.py's results; print each cell, measured beside
fitted; and hold it against the GPU runs of issue 44.

    python benchmarks/fifo_model.py benchmarks/results/fifo-exchange-cubic.json \
        benchmarks/results/fifo-streams-cubic.json
    python benchmarks/fifo_model.py summary benchmarks/results/fifo-*.json   # one row per condition
    python benchmarks/fifo_model.py gpu                                      # against the GPU runs
    python benchmarks/fifo_model.py unequal benchmarks/results/fifo-unequal-series.json --held-out \
        benchmarks/results/fifo-unequal-idle.json benchmarks/results/fifo-unequal-stepped.json \
        benchmarks/results/fifo-unequal-held-out.json                   # unequal links: k_u

The model is the simulator's own (``scenarios/fifo.py``, docs/emulation.md "One FIFO per egress"),
fitted per TCP congestion control: relative to fair queues on the same link, an exchange's bytes take

    T_fifo / T_fair = 1 + s x c x (k_s + k_so x o)

with s x c and o as ``Fifo.scale`` and ``Fifo.overflow`` give them for the cell's rate, flows and
FIFO depth (the standing packets from the model's GSO packets, not the cell's own queue). k_s and
k_so are linear least squares of T_fifo / T_fair - 1 = fair / fifo - 1. Printed beside: the form
the docs had before (e_fifo / e_fair = 1 - k_s s - k_so s o, with each rate's measured standing
queue and no c), fitted the same way, so that both are held to the same cells.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from islands.scenarios.fifo import (
    FITTED,
    GSO_MAX_BYTES,
    GSO_S,
    K_UNEQUAL,
    RHO_FULL,
    UNEQUAL_MIN_MEMBERS,
    Fifo,
    unequal_cap_bytes_per_s,
)
from islands.units import BITS_PER_BYTE

R_REF_BITS_PER_S = 10e6
# Issue 44's GPU runs: 4 nodes, NCCL over TCP, tc tbf on each node's egress; the ring's bus rate over
# a single iperf3 stream's, by rate (1 and 5 Gbit/s: 0.99-1.00, taken as their middle)
GPU_RUNS = {50e6: 0.79, 200e6: 0.90, 1e9: 0.995, 5e9: 0.995}
GPU_RANGE = {1e9: (0.99, 1.0), 5e9: (0.99, 1.0)}


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


def model_of(row: dict) -> Fifo:
    """The cell's flows and depth, at no cost (the terms alone are read from it)."""
    return Fifo(row["flows"], row["queue_s"], 0.0, 0.0)


def terms(row: dict) -> tuple[float, float, float]:
    """(s x c, o, d) of a FIFO cell, as the simulator computes them."""
    model, rate = model_of(row), row["rate"] / BITS_PER_BYTE
    return model.scale(rate), model.overflow(rate), model.ack_wait_s(rate)


def least_squares(columns: np.ndarray, target: np.ndarray) -> np.ndarray:
    coefficients, *_ = np.linalg.lstsq(columns, target, rcond=None)
    return coefficients


def rms_points(errors: np.ndarray) -> float:
    return 100 * float(np.sqrt(np.mean(errors**2)))


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
        x = np.array([terms(r) for r in mine])
        y = np.array(
            [r["e"] / fair[(r["exchange"], cc, r["m"], r["rate"], r["flows"])] for r in mine]
        )
        columns = np.column_stack([x[:, 0], x[:, 0] * x[:, 1]])
        k_s, k_so = least_squares(columns, 1 / y - 1)
        fitted = 1 / (1 + columns @ np.array([k_s, k_so]))
        errors = fitted - y
        before = previous_form_errors(mine, y, standing)
        print(
            f"{cc}: k_s = {k_s:.4f}, k_so = {k_so:.4f} (scenarios/fifo.py FITTED: "
            f"{FITTED[cc][0]}, {FITTED[cc][1]}); {len(mine)} cells, residual rms "
            f"{rms_points(errors):.2f} points (fifo = fair: {rms_points(1 - y):.2f}), worst "
            f"{100 * np.max(np.abs(errors)):.1f}; the form before (1 - k_s s - k_so s o, measured "
            f"queues): rms {rms_points(before):.2f}, worst {100 * np.max(np.abs(before)):.1f}"
        )
        print(
            "| exchange | M | Mbit/s | flows | FIFO ms | s x c | o | d ms | fifo / fair | fitted | each repeat / rate |"
        )
        print("|" + " --- |" * 11)
        for row, (scale, o, d), measured, model in zip(mine, x, y, fitted):
            flows = "all-reduce" if row["exchange"] == "allreduce" else "streams"
            print(
                f"| {flows} | {row['m']} | {row['rate'] / 1e6:g} | {row['flows']} | {1e3 * row['queue_s']:g} | "
                f"{scale:.3f} | {o:.2f} | {1e3 * d:.1f} | {measured:.3f} | {model:.3f} | "
                f"{', '.join(f'{v:.3f}' for v in row['spread'])} |"
            )
        print()


def previous_form_errors(mine: list[dict], y: np.ndarray, standing: dict) -> np.ndarray:
    """The docs' earlier form, e = 1 - k_s s - k_so s o with each rate's measured a(r), refitted."""
    s = np.array([np.sqrt(r["flows"] * R_REF_BITS_PER_S / r["rate"]) for r in mine])
    o = np.array(
        [max(0.0, 1 - r["queue_s"] / (r["flows"] * standing[(r["cc"], r["rate"])])) for r in mine]
    )
    columns = np.column_stack([s, s * o])
    return 1 - columns @ least_squares(columns, 1 - y) - y


def gpu() -> None:
    """Calibrate k_s on the GPU runs at 50 Mbit/s alone (as ``islands calibrate`` does from one rate)
    and predict the other rates, by this model and by its sqrt term alone (no c). One flow: F only
    scales s by sqrt(F) at every rate, which k_s takes up (k_s(F) = k_s(1) / sqrt(F))."""
    model = Fifo(1, 1.0, 0.0, 0.0)  # a FIFO deep enough to hold the flows: no overflow

    def sqrt_alone(rate_bytes_per_s: float) -> float:
        return model.scale(rate_bytes_per_s) / min(1.0, GSO_MAX_BYTES / (GSO_S * rate_bytes_per_s))

    rates = sorted(GPU_RUNS)
    forms = {"this model": model.scale, "sqrt term alone": sqrt_alone}
    predicted = {}
    for name, scale in forms.items():
        k_s = (1 / GPU_RUNS[rates[0]] - 1) / scale(rates[0] / BITS_PER_BYTE)
        predicted[name] = [1 / (1 + k_s * scale(rate / BITS_PER_BYTE)) for rate in rates]
        print(f"{name}: k_s = {k_s:.3f} at one flow, from {rates[0] / 1e6:g} Mbit/s")
    print("| Mbit/s | measured | " + " | ".join(forms) + " |")
    print("|" + " --- |" * (2 + len(forms)))
    for index, rate in enumerate(rates):
        low, high = GPU_RANGE.get(rate, (GPU_RUNS[rate], GPU_RUNS[rate]))
        measured = f"{low:.3f}" if low == high else f"{low:.2f}-{high:.2f}"
        cells = " | ".join(
            f"{values[index]:.3f} ({100 * outside(values[index], low, high):+.1f})"
            for values in predicted.values()
        )
        print(f"| {rate / 1e6:g} | {measured} | {cells} |")
    for name, values in predicted.items():
        misses = [
            outside(value, *GPU_RANGE.get(r, (GPU_RUNS[r],) * 2)) for r, value in zip(rates, values)
        ]
        print(
            f"{name}: residual rms over the three predicted rates {rms_points(np.array(misses[1:])):.2f} points"
        )


def outside(value: float, low: float, high: float) -> float:
    """How far ``value`` lies outside [low, high] (0 inside), signed."""
    return value - high if value > high else value - low if value < low else 0.0


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


STEADY_FROM = 6  # a series' exchanges from this one on: past the connections' warm-up


def unequal_cells(paths: list[str], steady: bool) -> list[dict]:
    """Each FIFO cell of ``fifo_exchange.py --ratios`` beside the fair cell of the same run, M, rate
    and links: T_fifo / T_fair - 1, the fair cell's median over the FIFO cell's mean exchange
    (``steady``: its exchanges from ``STEADY_FROM`` on; else all of them), and that of its first two;
    the model's term (``unit``: its stretch at k_u = 1, from ``unequal_cap_bytes_per_s`` around the
    ring for gloo's all-reduce, as an all-to-all for the trainer's stepped exchange; 0 where it
    charges nothing)."""
    rows = [
        row for path in paths for row in json.loads(Path(path).read_text())["cells"] if "run" in row
    ]

    def key(row: dict) -> tuple:
        return row["run"], row["islands"], row["rate_bits_per_s"], tuple(row["links_bits_per_s"])

    fair = {key(r): statistics.median(r["fraction_of_rate"]) for r in rows if r["shaper"] == "fair"}
    found = []
    for row in rows:
        if row["shaper"] != "fifo":
            continue
        links = np.array(row["links_bits_per_s"]) / BITS_PER_BYTE
        m = row["islands"]
        around_ring = row["exchange"] == "allreduce"
        if around_ring:  # gloo's ring sends to the rank before it (`ss -tin`): k is fed by k + 1
            links = links[::-1]
        cap = (
            unequal_cap_bytes_per_s(links, links, np.zeros(m, bool), K_UNEQUAL, around_ring)
            if m >= UNEQUAL_MIN_MEMBERS
            else np.inf
        )
        stretch = links.min() / cap - 1 if np.isfinite(cap) else 0.0
        fractions = row["fraction_of_rate"]
        kept = fractions[STEADY_FROM - 1 :] if steady else fractions
        found.append(
            {
                "run": row["run"],
                "m": m,
                "exchange": row["exchange"],
                "rate": links.min() * BITS_PER_BYTE,
                "rho": links.max() / links.min(),
                "queue_ms": row["queue_ms"],
                "seconds": row["seconds"],
                "exchanges": len(fractions),
                "measured": fair[key(row)] / statistics.fmean(kept) - 1,
                "first_two": fair[key(row)] / statistics.fmean(fractions[:2]) - 1,
                "unit": stretch / K_UNEQUAL,
            }
        )
    return found


def unequal(series_paths: list[str], held_out_paths: list[str]) -> None:
    """k_u by least squares of T_fifo / T_fair - 1 = k_u u(rho) on the exchanges past their warm-up of
    the long series from fresh connections (``series_paths``); the residuals there, on their first
    two exchanges and on ``held_out_paths`` (short cells, whole), each beside the model at
    K_UNEQUAL."""
    fitted = unequal_cells(series_paths, steady=True)
    charged = [c for c in fitted if c["unit"] > 0]
    x = np.array([c["unit"] for c in charged])
    y = np.array([c["measured"] for c in charged])
    k_u = float(x @ y / (x @ x))
    print(
        f"k_u = {k_u:.4f} (scenarios/fifo.py K_UNEQUAL: {K_UNEQUAL}; u full from rho = "
        f"{RHO_FULL:g}) on {len(charged)} charged series, exchanges {STEADY_FROM} on: residual rms "
        f"{rms_points(k_u * x - y):.1f} points, worst {100 * np.max(np.abs(k_u * x - y)):.1f}"
    )
    first = np.array([K_UNEQUAL * c["unit"] - c["first_two"] for c in charged])
    print(
        f"their first two exchanges: rms {rms_points(first):.1f} points, worst "
        f"{100 * np.max(np.abs(first)):.1f} (the model's {K_UNEQUAL} is a long run's)"
    )
    held = unequal_cells(held_out_paths, steady=False)
    for name, group in (("series", fitted), ("held out", held)):
        if not group:
            continue
        free = np.array([c["measured"] for c in group if c["unit"] == 0])
        paid = [c for c in group if c["unit"] > 0]
        errors = np.array([K_UNEQUAL * c["unit"] - c["measured"] for c in paid])
        nothing = (
            f"; {len(free)} charged nothing (equal links or M = 2): rms "
            f"{rms_points(free):.1f}, worst {100 * np.max(np.abs(free)):.1f}"
            if len(free)
            else ""
        )
        print(
            f"{name}: {len(paid)} charged, residual rms {rms_points(errors):.1f} points, worst "
            f"{100 * np.max(np.abs(errors)):.1f}{nothing}"
        )
    print(
        "\n| cells | run | exchange | M | slowest Mbit/s | fastest / slowest | FIFO ms | seconds | exchanges | "
        "T_fifo / T_fair - 1 | its first two | model |"
    )
    print("|" + " --- |" * 12)
    for name, group in (("series", fitted), ("held out", held)):
        for c in group:
            print(
                f"| {name} | {c['run']} | {c['exchange']} | {c['m']} | {c['rate'] / 1e6:g} | "
                f"{c['rho']:.3g} | {c['queue_ms']:g} | {c['seconds']:g} | {c['exchanges']} | "
                f"{c['measured']:+.3f} | {c['first_two']:+.3f} | {K_UNEQUAL * c['unit']:+.3f} |"
            )


if __name__ == "__main__":
    if sys.argv[1:2] == ["summary"]:
        summary(sys.argv[2:])
    elif sys.argv[1:2] == ["gpu"]:
        gpu()
    elif sys.argv[1:2] == ["unequal"]:
        split = sys.argv.index("--held-out") if "--held-out" in sys.argv else len(sys.argv)
        if split == 2:
            print(
                "usage: fifo_model.py unequal SERIES.json [...] [--held-out HELD.json ...] "
                "(fifo_exchange.py --ratios results, e.g. benchmarks/results/fifo-unequal-series.json)",
                file=sys.stderr,
            )
            sys.exit(2)
        unequal(sys.argv[2:split], sys.argv[split + 1 :])
    else:
        fit(cells(sys.argv[1:]))
