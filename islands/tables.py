"""Readable text tables of run summaries, with units a person can take in at a glance."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SECONDS_PER_DAY = 86400
SECONDS_PER_YEAR = 365.25 * SECONDS_PER_DAY
CUT_SHORT = "cut short"


def duration(seconds: float) -> str:
    """280.0 s, 46.2 min, 5.72 h, 3.1 d, 4.2e+03 y."""
    if seconds < 1000:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    if seconds < 2 * SECONDS_PER_DAY:
        return f"{seconds / 3600:.2f} h"
    if seconds < 1000 * SECONDS_PER_DAY:
        return f"{seconds / SECONDS_PER_DAY:.1f} d"
    return f"{seconds / SECONDS_PER_YEAR:.3g} y"


def utilisation(fraction: float | None) -> str:
    """A utilisation as a percentage; a run cut short has none (None)."""
    return CUT_SHORT if fraction is None else f"{100 * fraction:.1f}%"


def size(byte_count: float) -> str:
    """Decimal units, as in the brief: 1 GB = 1e9 B."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if byte_count >= scale:
            return f"{byte_count / scale:.3g} {unit}"
    return f"{byte_count:.0f} B"


# (name, Gbit/s per unit), largest first
RATE_UNITS = (("Pbit/s", 1e6), ("Tbit/s", 1e3), ("Gbit/s", 1.0), ("Mbit/s", 1e-3), ("kbit/s", 1e-6))


def rate_unit(gbps: float) -> tuple[str, float]:
    """The unit in which ``gbps`` reads as a number from 1 to 999."""
    for name, scale in RATE_UNITS:
        if gbps >= scale:
            return name, scale
    return RATE_UNITS[-1]


def rate(gbps: float) -> str:
    """3.55 Tbit/s, 7.1 Gbit/s, 825 Mbit/s."""
    name, scale = rate_unit(gbps)
    return f"{gbps / scale:.3g} {name}"


COLUMNS = (
    ("wall time", lambda s: duration(s["wall_time_s"])),
    ("utilisation", lambda s: utilisation(s["compute_utilisation"])),
    ("stall/worker", lambda s: duration(s["stall_s"])),
    ("idle/worker", lambda s: duration(s["idle_s"])),
    ("syncs", lambda s: str(s["syncs"])),
    ("mean sync", lambda s: duration(s["mean_sync_s"])),
    ("sent/worker", lambda s: size(s["bytes_per_worker"])),
    ("avg bw", lambda s: rate(s["avg_bandwidth_gbps"])),
    ("bw needed", lambda s: rate(s["bandwidth_needed_gbps"])),
    ("peak bw", lambda s: rate(s["peak_bandwidth_gbps"])),
)


def render(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(
            cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(row)
        )
        for row in [header, *rows]
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def comparison(summaries: Mapping[str, Mapping[str, Any]]) -> str:
    """One row per labelled summary (e.g. per schedule), the key figures as columns."""
    header = ["run", *(name for name, _ in COLUMNS)]
    rows = [
        [label, *(cell(summary) for _, cell in COLUMNS)] for label, summary in summaries.items()
    ]
    return render(rows, header)


def count(value: float) -> str:
    """1.2e+12 style for big counts, plain below a million."""
    return f"{value:.3g}" if value >= 1e6 else f"{value:.0f}"


def islands_table(summary: Mapping[str, Any]) -> str:
    header = [
        "island",
        "workers",
        "utilisation",
        "compute",
        "stall",
        "idle",
        "to barrier",
        "inner steps",
        "sent/worker",
    ]
    rows = [
        [
            i["name"],
            str(i["workers"]),
            utilisation(i["compute_utilisation"]),
            duration(i["compute_s"]),
            duration(i["stall_s"]),
            duration(i["idle_s"]),
            duration(i.get("time_to_barrier_s", 0.0)),
            count(i.get("inner_steps", 0.0)),
            size(i["bytes_per_worker"]),
        ]
        for i in summary["islands"]
    ]
    if any(i.get("tokens") for i in summary["islands"]):
        header.insert(-1, "tokens")
        for row, island in zip(rows, summary["islands"]):
            row.insert(-1, count(island["tokens"] or 0.0))
    return render(rows, header)


def churn_line(summary: Mapping[str, Any]) -> str | None:
    """One line on departures, joins and wasted work, or None when there was none."""
    parts = []
    if summary.get("leaves") or summary.get("joins"):
        parts.append(
            f"{summary['leaves']} departures, {summary['joins']} joins, lost compute "
            f"{duration(summary['lost_compute_s'])} (all workers)"
        )
    if summary.get("dropped_deltas"):
        parts.append(
            f"{summary['dropped_deltas']} late deltas dropped, "
            f"{duration(summary['dropped_compute_s'])} of compute dropped"
        )
    if summary.get("outer_steps", 0) < summary.get("outer_steps_planned", 0):
        parts.append(
            f"only {summary['outer_steps']} of {summary['outer_steps_planned']} outer steps completed"
        )
    if not parts:
        return None
    if summary.get("compute_utilisation_run") is not None:
        parts.append(
            f"utilisation over the whole run {utilisation(summary['compute_utilisation_run'])}"
        )
    return "; ".join(parts)


def partial_line(summary: Mapping[str, Any]) -> str | None:
    """For a run cut short: what happened, and that its figures are partial; None for a complete run."""
    if summary.get("complete", True):
        return None
    return (
        f"PARTIAL RESULT, the run did not finish: {summary['incomplete_reason']}. "
        "No utilisation is given; the other figures cover the part that ran."
    )


def ignored_line(summary: Mapping[str, Any], after_end: int) -> str | None:
    """Scheduled events that changed nothing: ``after_end`` of them fell after the run had ended."""
    ignored = summary.get("ignored_events", 0)
    if not ignored:
        return None
    others = ignored - after_end
    parts = [f"{after_end} after the run ended"] if after_end else []
    parts += [f"{others} for workers already in that state (random churn)"] if others else []
    return f"{ignored} scheduled event actions were not applied: {', '.join(parts)}"
