"""A run as Chrome Trace Event JSON, for Perfetto (ui.perfetto.dev) or chrome://tracing.

Three processes, each a group of tracks:

* ``workers``: one thread track per worker with its compute, stall and idle intervals as complete
  (``X``) events. They tile the worker's time without overlapping, as a thread track requires.
* ``links``: one counter (``C``) track per access link and direction, its rate in Gbit/s.
* ``collectives``: each all-reduce (one per outer step and fragment), each weight download to a
  joining worker, and each worker's transfers thrown away (``wasted``: a broken attempt, a cut
  download) as an async (``b``/``e``) slice: transfers in flight at the same time may overlap,
  which only async tracks allow.

Times are microseconds since the start of the run (the format's unit).
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pandas as pd

from islands.io import json_text, output_format, write_text
from islands.scenarios import Scenario
from islands.simulator import SimResult
from islands.trace import NO_FRAGMENT, WASTED

from ..link_rates import rate_steps

WORKERS_PID, LINKS_PID, COLLECTIVES_PID = 1, 2, 3
MICROSECONDS_PER_S = 1e6
WORKER_KINDS = ("compute", "stall", "idle")
DIRECTIONS = ("up", "down")


def microseconds(seconds: float) -> float:
    return round(float(seconds) * MICROSECONDS_PER_S, 3)


def metadata(name: str, pid: int, value: Any, tid: int | None = None) -> dict[str, Any]:
    event = {
        "name": name,
        "ph": "M",
        "pid": pid,
        "args": {"name" if name.endswith("_name") else "sort_index": value},
    }
    if tid is not None:
        event["tid"] = tid
    return event


def worker_events(trace: pd.DataFrame, names: dict[int, str]) -> list[dict[str, Any]]:
    events = [
        metadata("process_name", WORKERS_PID, "workers"),
        metadata("process_sort_index", WORKERS_PID, 0),
    ]
    for rank, name in names.items():
        events.append(metadata("thread_name", WORKERS_PID, name, tid=rank))
        events.append(metadata("thread_sort_index", WORKERS_PID, rank, tid=rank))
    rows = trace[trace["kind"].isin(WORKER_KINDS)]
    for row in rows.itertuples(index=False):
        args = {"outer_step": int(row.outer_step)}
        if row.fragment >= 0:
            args["fragment"] = int(row.fragment)
        events.append(
            {
                "name": row.kind,
                "cat": row.kind,
                "ph": "X",
                "pid": WORKERS_PID,
                "tid": int(row.worker),
                "ts": microseconds(row.time_start_s),
                "dur": microseconds(row.time_end_s - row.time_start_s),
                "args": args,
            }
        )
    return events


def link_events(links: pd.DataFrame, names: dict[int, str]) -> list[dict[str, Any]]:
    events = [
        metadata("process_name", LINKS_PID, "links (Gbit/s)"),
        metadata("process_sort_index", LINKS_PID, 1),
    ]
    for rank, name in names.items():
        for direction in DIRECTIONS:
            times, levels = rate_steps(links, rank, direction)
            track = f"{name} {direction}link"
            events += [
                {
                    "name": track,
                    "ph": "C",
                    "pid": LINKS_PID,
                    "ts": microseconds(t),
                    "args": {"Gbit/s": round(float(level), 9)},
                }
                for t, level in zip(times, levels)
            ]
    return events


def async_slice(
    name: str, category: str, identity: int, start_s: float, end_s: float, args: dict[str, Any]
) -> list[dict[str, Any]]:
    common = {"name": name, "cat": category, "id": identity, "pid": COLLECTIVES_PID, "tid": 0}
    return [
        {**common, "ph": "b", "ts": microseconds(start_s), "args": args},
        {**common, "ph": "e", "ts": microseconds(end_s)},
    ]


def collective_events(trace: pd.DataFrame, names: dict[int, str]) -> list[dict[str, Any]]:
    """One async slice per all-reduce, from its first participant's start to its last one's end, and
    one per weight download (a comm row without a fragment: a worker joining or catching up)."""
    events = [
        metadata("process_name", COLLECTIVES_PID, "collectives"),
        metadata("process_sort_index", COLLECTIVES_PID, 2),
    ]
    identities = itertools.count()
    comm = trace[trace["kind"] == "comm"]
    syncs = (
        comm[comm["fragment"] != NO_FRAGMENT]
        .groupby(["outer_step", "fragment"])
        .agg(
            start=("time_start_s", "min"),
            end=("time_end_s", "max"),
            workers=("worker", "nunique"),
            bytes_per_worker=("bytes", "mean"),
        )
    )
    for (outer, fragment), row in syncs.iterrows():
        events += async_slice(
            f"all-reduce outer {outer} fragment {fragment}",
            "all-reduce",
            next(identities),
            row["start"],
            row["end"],
            {"workers": int(row["workers"]), "bytes_per_worker": float(row["bytes_per_worker"])},
        )
    for row in comm[comm["fragment"] == NO_FRAGMENT].itertuples(index=False):
        events += async_slice(
            f"weights to {names.get(row.worker, row.worker)}",
            "weight download",
            next(identities),
            row.time_start_s,
            row.time_end_s,
            {"bytes": float(row.bytes)},
        )
    for row in trace[trace["kind"] == WASTED].itertuples(index=False):
        what = (
            "a download"
            if row.fragment == NO_FRAGMENT
            else f"outer {row.outer_step} fragment {row.fragment}"
        )
        events += async_slice(
            f"wasted by {names.get(row.worker, row.worker)}: {what}",
            WASTED,
            next(identities),
            row.time_start_s,
            row.time_end_s,
            {"bytes": float(row.bytes)},
        )
    return events


def chrome_trace(result: SimResult, scenario: Scenario) -> dict[str, Any]:
    """The run as a Chrome Trace Event JSON object (``traceEvents`` plus a few facts in ``otherData``)."""
    names = {worker.rank: worker.name for worker in scenario.workers()}
    events = (
        worker_events(result.trace, names)
        + link_events(result.links, names)
        + collective_events(result.trace, names)
    )
    summary = result.summary
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "scenario": scenario.name,
            "algorithm": scenario.schedule.algorithm,
            "workers": scenario.worker_count,
            "compute_utilisation": summary["compute_utilisation"],
            "wall_time_s": summary["wall_time_s"],
        },
    }


TRACE_FORMATS = ("json",)


def write_chrome_trace(document: dict[str, Any], path: str | Path) -> Path:
    """Write the document to ``path`` (.json; ``-``: stdout)."""
    output_format(path, TRACE_FORMATS)
    write_text(path, json_text(document, separators=(",", ":")))
    return Path(path)
