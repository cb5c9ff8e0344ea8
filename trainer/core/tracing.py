"""What a run measures: a trace in the simulator's schema (``islands.trace``), metrics and a summary.

Time: every process reads ``time.monotonic()``; after an initial barrier each process takes its
own reading as time 0, so on one machine the origins agree to within the barrier's exit skew (and
across machines to within about one network latency). The clock pauses during evaluation and
checkpointing, so the trace shows training only. The processes reach a pause at different moments
(an exchange's members do not all finish together: on unequal links one may finish half a second
before another), and the evaluation's collectives end together; so every process stands still for
the same length, the longest any of them needed (``Rounds.pause_s``), and resumes that long after
its own pause. Their clocks then keep one origin, and the run after the pause goes on from the
offsets it had, as it would have without the evaluation. (Each process pausing for its own length
would resume at its own pause reading while all really resume together: the trace's offsets would
drift by the exchange's end skew at every evaluation.)

Rows: one ``compute`` row per interval between sync points; per collective one ``comm`` row (from
the moment every member had joined to its end, with the bytes this process sent), an ``idle`` row
for the time the process waited for the others to join, and a ``stall`` row for the time it then
waited for the transfer, the same split the simulator makes. In the written trace ``worker`` is the
island's index: an island with several ranks shows its local rank 0's compute, idle and stall rows,
and one comm row per collective spanning its ranks' transfers with the sum of their bytes.
"""

from __future__ import annotations

import json
import math
import time
from collections import defaultdict
from pathlib import Path
from typing import IO, Any, Protocol

from islands.io import json_text, write_table, write_text
from islands.numbers import is_finite_number
from islands.summary import summarise
from islands.trace import NO_FRAGMENT, Row, to_frame

from ..config import RunPlan

# What a common pause adds to the longest process's: the all-gather that agrees on it (a few ms on one
# machine, more on a busy one). A process that overruns it resumes at once and its trace shows the
# overrun as time passing, so the processes keep one origin either way.
PAUSE_MARGIN_S = 0.05


class Clock:
    """Seconds since the run started, excluding paused intervals."""

    def __init__(self, start_s: float = 0.0):
        self.origin = time.monotonic() - start_s
        self.paused_at: float | None = None

    def now(self) -> float:
        reading = time.monotonic() if self.paused_at is None else self.paused_at
        return reading - self.origin

    def sleep_until(self, at_s: float) -> None:
        """Sleep until the clock reads ``at_s`` (at once if it is past)."""
        time.sleep(max(0.0, at_s - self.now()))

    def restart(self, start_s: float) -> None:
        """Read ``start_s`` now (a joiner takes the run's time from the peer it downloads from)."""
        self.origin = time.monotonic() - start_s
        self.paused_at = None

    def pause(self) -> None:
        self.paused_at = time.monotonic()

    def paused_for_s(self) -> float:
        """Seconds since the clock paused."""
        assert self.paused_at is not None, "the clock is not paused"
        return time.monotonic() - self.paused_at

    def resume_after(self, pause_s: float) -> None:
        """Run again ``pause_s`` after the pause began: wait for that moment if it is still ahead
        (a process that paused late); one already past it resumes now, and its trace shows the
        overrun as time passing."""
        assert self.paused_at is not None, "the clock is not paused"
        time.sleep(max(0.0, self.paused_at + pause_s - time.monotonic()))
        self.origin += pause_s
        self.paused_at = None


class RowsSink(Protocol):
    """Where the trace rows go as text as they are recorded: a file, or a Decoupled learner's store."""

    def write(self, text: str, /) -> object: ...

    def flush(self) -> None: ...


class Recorder:
    """One process's trace rows (``islands.trace.Row``); ``rows`` may come back from a checkpoint as lists."""

    def __init__(self, clock: Clock, worker: int, island: str, rows: list | None = None):
        self.clock = clock
        self.worker = worker
        self.island = island
        self.rows: list[Row] = [Row(*row) for row in rows or []]
        self.segment_start_s = clock.now()
        self.sink: RowsSink | None = None

    def add(
        self,
        kind: str,
        start_s: float,
        end_s: float,
        outer_step: int,
        fragment: int = NO_FRAGMENT,
        sent_bytes: float = 0.0,
    ) -> None:
        row = Row(
            start_s, end_s, self.worker, self.island, kind, float(sent_bytes), fragment, outer_step
        )
        self.rows.append(row)
        if self.sink:
            self.sink.write(json.dumps(row) + "\n")
            self.sink.flush()

    def end_compute(self, outer_step: int) -> None:
        """Close the compute interval that began after the previous sync point."""
        now = self.clock.now()
        if now > self.segment_start_s:
            self.add("compute", self.segment_start_s, now, outer_step)
        self.segment_start_s = now

    def start_compute(self) -> None:
        self.segment_start_s = self.clock.now()

    def waited(
        self, arrived_s: float, started_s: float, done_s: float, outer_step: int, fragment: int
    ) -> float:
        """Idle until every member had joined, then stall until the result was in; returns seconds blocked."""
        started_s = min(max(arrived_s, started_s), done_s)
        if started_s > arrived_s:
            self.add("idle", arrived_s, started_s, outer_step, fragment)
        if done_s > started_s:
            self.add("stall", started_s, done_s, outer_step, fragment)
        return done_s - arrived_s

    def waited_at_syncer(
        self,
        arrived_s: float,
        queued: tuple[float, float],
        done_s: float,
        outer_step: int,
        fragment: int,
    ) -> float:
        """A decoupled learner waited from ``arrived_s`` to ``done_s``: idle while its report sat at
        the syncer waiting for others (``queued``), stall while its own bytes moved (the simulator's
        ``Syncer.record_wait``); returns seconds blocked."""
        idle_from = min(max(arrived_s, queued[0]), done_s)
        idle_to = min(max(idle_from, queued[1]), done_s)
        for start, end, kind in (
            (arrived_s, idle_from, "stall"),
            (idle_from, idle_to, "idle"),
            (idle_to, done_s, "stall"),
        ):
            if end > start:
                self.add(kind, start, end, outer_step, fragment)
        return max(0.0, done_s - arrived_s)

    def seconds(self, kind: str) -> float:
        return sum(row.time_end_s - row.time_start_s for row in self.rows if row.kind == kind)

    def sent_bytes(self) -> float:
        return sum(row.bytes for row in self.rows)

    def utilisation(self) -> float:
        """Compute seconds over seconds present so far."""
        if not self.rows:
            return 0.0
        present = max(row.time_end_s for row in self.rows) - min(
            row.time_start_s for row in self.rows
        )
        return self.seconds("compute") / present if present > 0 else 0.0


def island_rows(rows_by_rank: list[list[Row]], ranks_per_island: int) -> list[Row]:
    """One row set per island: local rank 0's rows, and each collective's comm rows merged over ranks."""
    merged: list[Row] = []
    for first in range(0, len(rows_by_rank), ranks_per_island):
        merged.extend(row for row in rows_by_rank[first] if row.kind != "comm")
        comms: dict[tuple[int, int], list[Row]] = defaultdict(list)
        for rows in rows_by_rank[first : first + ranks_per_island]:
            for row in rows:
                if row.kind == "comm":
                    comms[(row.outer_step, row.fragment)].append(row)
        for (outer_step, fragment), group in comms.items():
            merged.append(
                Row(
                    min(r.time_start_s for r in group),
                    max(r.time_end_s for r in group),
                    group[0].worker,
                    group[0].island,
                    "comm",
                    sum(r.bytes for r in group),
                    fragment,
                    outer_step,
                )
            )
    return merged


def measured_extra(
    plan: RunPlan, steps: int, rows: list[Row], churn: dict[str, Any] | None = None
) -> tuple[dict[str, Any], dict[str, dict]]:
    """The simulator's extra summary keys, measured. ``churn`` (an elastic run's ``lost_compute_s``,
    ``leaves`` and ``joins``) replaces the zeros of a run without churn; the trainer always waits at
    the barrier and restarts a broken collective (no ``dropped_members``); ``events`` (simulator events
    processed) has no measured counterpart and is None; a real run ends when it is done, so
    ``horizon_reached`` (the simulator's stop for runs that never finish) is False, and the ``player``
    that ran it is "measured". Per island: inner steps and tokens of one worker."""
    extra = {
        "scenario": plan.scenario.name,
        "algorithm": plan.algorithm,
        "network_model": "measured",
        "barrier": "wait",
        "outer_steps_planned": plan.scenario.schedule.outer_steps,
        "inner_steps": steps,
        "lost_compute_s": 0.0,
        "dropped_compute_s": 0.0,
        "dropped_deltas": 0,
        "joins": 0,
        "leaves": 0,
        "dropped_members": 0,
        "ignored_events": 0,
        "events": None,
        "horizon_reached": False,
        "failures": 0,
        "restarts": 0,
        "player": "measured",
        **(churn or {}),
    }
    extra["useful_chip_s"], extra["chips"] = useful_chip_s(plan, rows, extra["lost_compute_s"])
    island_extra = {}
    for name in dict.fromkeys(worker.island for worker in plan.workers):
        island_extra[name] = {
            "inner_steps": float(steps),
            "tokens": float(steps * plan.tokens_per_step // plan.islands),
        }
    return extra, island_extra


def useful_chip_s(plan: RunPlan, rows: list[Row], lost_compute_s: float) -> tuple[float, int]:
    """Chip-seconds of compute that reached the global model (every compute row, less the work lost
    to departures, at the chips of its worker's island), and the fleet's chips: goodput's parts."""
    chips = {island.name: island.chips for island in plan.scenario.islands}
    computed = sum(
        (row.time_end_s - row.time_start_s) * chips[row.island]
        for row in rows
        if row.kind == "compute"
    )
    mean_chips = sum(chips[worker.island] for worker in plan.workers) / len(plan.workers)
    return computed - lost_compute_s * mean_chips, sum(
        chips[worker.island] for worker in plan.workers
    )


def build_summary(plan: RunPlan, steps: int, rows: list[Row], churn: dict[str, Any] | None = None):
    """The trace frame and its summary, with the simulator's keys (``islands.summary.summarise``;
    sync times per worker where learners sync on their own clocks, as the simulator counts them)."""
    trace = to_frame(rows)
    extra, island_extra = measured_extra(plan, steps, rows, churn)
    return trace, summarise(
        trace,
        plan.outer_steps_done(steps),
        extra=extra,
        island_extra=island_extra,
        syncs_per_worker=not plan.schedule.coupled,
    )


class MetricsLog:
    """``metrics.jsonl``: one JSON object per inner step, appended and flushed as the run goes."""

    def __init__(self, path: Path, keep_through_step: int | None = None):
        self.path = path
        if keep_through_step is not None:
            self.truncate(keep_through_step)
        self.handle: IO[str] = open(path, "a", encoding="utf-8")

    def truncate(self, step: int) -> None:
        """Keep the lines through ``step`` (a resume's checkpoint, or the last boundary when a new
        process takes over the writing); a line cut short by a killed writer is dropped."""
        if not self.path.exists():
            return
        kept = [
            line
            for line in self.path.read_text(encoding="utf-8", errors="replace").splitlines()
            if (record := parsed(line)) is not None and record.get("step", math.inf) <= step
        ]
        write_text(self.path, "".join(line + "\n" for line in kept))

    def write(self, record: dict[str, Any]) -> None:
        """One line, flushed (a process killed right after loses nothing it wrote); values that are
        not finite (a joiner's train loss before it trained) are null, so every line is strict JSON."""
        self.handle.write(json.dumps(finite_or_none(record), allow_nan=False) + "\n")
        self.handle.flush()

    def close(self) -> None:
        self.handle.close()


def parsed(line: str) -> dict[str, Any] | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def finite_or_none(record: dict[str, Any]) -> dict[str, Any]:
    return {
        key: None if isinstance(value, float) and not is_finite_number(value) else value
        for key, value in record.items()
    }


TRACE_FILE = "trace.csv"


def write_outputs(out_dir: Path, trace: Any, documents: dict[str, Any]) -> None:
    """A run's outputs, each written atomically: the trace and one ``<name>.json`` per document
    (``summary``, ``run``, and for an elastic run ``churn``)."""
    write_table(trace, out_dir / TRACE_FILE)
    for name, document in documents.items():
        write_text(out_dir / f"{name}.json", json_text(document, indent=2) + "\n")


def read_output(out_dir: Path, name: str) -> dict[str, Any]:
    """One of the JSON documents ``write_outputs`` wrote (``summary``, ``run``, ``churn``)."""
    return json.loads((out_dir / f"{name}.json").read_text(encoding="utf-8"))
