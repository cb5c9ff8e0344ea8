"""A PyTorch profiler trace (Chrome trace JSON) as a per-step log (``steps``).

Read: the complete events (``"ph": "X"``, with ``name``, ``ts`` and ``dur`` in microseconds) of
``traceEvents``. A step is a ``ProfilerStep#N`` span: the profiler counts from 0 the steps it has
seen since it started (``prof.step()`` after each), so ``ProfilerStep#N`` is the run's step N + 1.
The communication is every complete event whose name contains one of ``COMM_EVENTS`` (or the names
the user gives): the collective as gloo runs it (``gloo:all_reduce``), the NCCL kernels on the
GPU, and the CPU ops that start a collective. A step's ``blocked_s`` is the time covered by those
spans inside it (their union, on every thread and stream, clipped to the step): the time its
collectives took, which is time the step waited where nothing overlapped them (DiLoCo's outer
sync, DDP's last bucket); ``compute_s`` is the rest of the step, and ``synced`` whether any such span
falls in it. The trace's ``distributedInfo.rank`` names its rank. Bytes are not read: a trace gives
message sizes, not what went on the wire. Other events are read past; one this uses that is not
well formed is refused in one line naming its index.
"""

from __future__ import annotations

import bisect
import math
import re
from pathlib import Path
from typing import Any

from islands.errors import UserError
from islands.io import parse_json
from islands.numbers import is_number_between, is_whole_number
from islands.scenarios.spec import shown_value

from .steps import MAX_RANK, MAX_STEP, StepLog, checked, log_frame, read_text

COMM_EVENTS = (
    "gloo:all_reduce",
    "nccl:all_reduce",
    "c10d::allreduce_",
    "ncclDevKernel_AllReduce",
    "ncclKernel_AllReduce",
)
STEP_EVENT = re.compile(r"^ProfilerStep#(\d+)$")
US_PER_S = 1e6
MAX_TIME_US = 1e18  # microseconds since any epoch a profiler uses


def events_of(document: Any, path: Path) -> list[Any]:
    events = document.get("traceEvents") if isinstance(document, dict) else document
    if not isinstance(events, list):
        raise UserError(f"{path}: no traceEvents list: not a Chrome trace")
    return events


def span(event: dict[str, Any], where: str) -> tuple[float, float]:
    """The event's start and end in seconds, each checked."""
    values = []
    for key in ("ts", "dur"):
        value = event.get(key)
        if not is_number_between(value, 0, MAX_TIME_US):
            raise UserError(
                f"{where}: '{key}' must be a finite number of microseconds, 0 or more "
                f"(got {shown_value(value)})"
            )
        values.append(float(value))
    start_us, duration_us = values
    return start_us / US_PER_S, (start_us + duration_us) / US_PER_S


def trace_rank(document: Any, path: Path) -> int | None:
    info = document.get("distributedInfo") if isinstance(document, dict) else None
    if not isinstance(info, dict) or "rank" not in info:
        return None
    rank = info["rank"]
    if not (is_whole_number(rank) and 0 <= rank <= MAX_RANK):
        raise UserError(
            f"{path}: distributedInfo.rank must be a whole number, 0 or more (got {rank!r})"
        )
    return rank


def merged(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of ``spans`` as disjoint spans in order."""
    union: list[tuple[float, float]] = []
    for first_s, last_s in sorted(spans):
        if union and first_s <= union[-1][1]:
            union[-1] = (union[-1][0], max(union[-1][1], last_s))
        else:
            union.append((first_s, last_s))
    return union


def overlap(
    union: list[tuple[float, float]], ends: list[float], start_s: float, end_s: float
) -> tuple[float, bool]:
    """Seconds of [start_s, end_s] that the disjoint ``union`` (``ends``: its spans' ends) covers, and
    whether any of its spans falls in it (one of no length too)."""
    covered_s, touched = 0.0, False
    index = bisect.bisect_right(ends, start_s)
    while index < len(union) and union[index][0] < end_s:
        covered_s += min(union[index][1], end_s) - max(union[index][0], start_s)
        touched = True
        index += 1
    return covered_s, touched


def read_chrome(path: Path, comm_events: tuple[str, ...] = COMM_EVENTS) -> StepLog:
    document = parse_json(read_text(path), path, "Chrome trace")
    events = events_of(document, path)
    steps, comm = [], []
    for index, event in enumerate(events):
        if (
            not isinstance(event, dict)
            or event.get("ph") != "X"
            or not isinstance(event.get("name"), str)
        ):
            continue
        where = f"{path}: traceEvents[{index}] ({event['name']})"
        matched = STEP_EVENT.match(event["name"])
        if matched:
            number = int(matched.group(1))
            if number >= MAX_STEP:
                raise UserError(f"{where}: a step number below {MAX_STEP} (got {number})")
            steps.append((*span(event, where), number + 1, where))
        elif any(name in event["name"] for name in comm_events):
            comm.append(span(event, where))
    if not steps:
        raise UserError(
            f"{path}: no ProfilerStep#N events: record the trace with torch.profiler and call "
            "prof.step() after each training step"
        )
    union = merged(comm)
    ends = [last_s for _, last_s in union]
    rank = trace_rank(document, path)
    records = []
    for start_s, end_s, step, where in sorted(steps):
        blocked_s, synced = overlap(union, ends, start_s, end_s)
        records.append(
            {
                "rank": rank or 0,
                "step": step,
                "steps": 1,
                "wall_s": end_s - start_s,
                "compute_s": max(end_s - start_s - blocked_s, 0.0),
                "blocked_s": blocked_s,
                "synced": float(synced),
                "bytes": math.nan,
                "where": where,
            }
        )
    names = ", ".join(comm_events)
    notes = [f"communication: the spans whose names contain {names} ({len(comm)} in the trace)"]
    return checked(StepLog(path, "chrome", log_frame(records), rank is not None, notes))
