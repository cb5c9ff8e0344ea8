"""The run's store and its clock, which every run kind that has a store shares.

``connect`` gives a client of the run's ``TCPStore`` (or hosts it). The run's clock is published there
as (wall time, trace seconds, paused) by whoever reports, so that a launcher playing the scenario's
events and a process that joins late read the same clock as the trace (``run_time_s``). Every process
that takes part beats every ``HEARTBEAT_S`` seconds.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import Any

import torch.distributed as dist

ROOT = "islands"
HEARTBEAT_S = 0.05


def connect(host: str, port: int, hosts: bool, timeout_s: float) -> Any:
    """A client of the run's store (or its host, when no other process provides one)."""
    return dist.TCPStore(
        host, port, is_master=hosts, wait_for_workers=False, timeout=timedelta(seconds=timeout_s)
    )


RUN_CLOCK = "/".join([ROOT, "run", "clock"])


def publish_run_clock(store: Any, trace_s: float, paused: bool = False) -> None:
    """The run's clock for the launcher and joiners: (wall time, trace seconds) now, and whether the
    trace clock is about to stand still (evaluation, checkpoint)."""
    store.set(RUN_CLOCK, json.dumps({"wall": time.time(), "trace_s": trace_s, "paused": paused}))


def run_time_s(store: Any) -> float | None:
    """The run's clock now, from the last (wall time, trace seconds) published; None before the run
    started. While the trace clock stands still (evaluation, checkpoints) so does this one."""
    if not store.check([RUN_CLOCK]):
        return None
    published = json.loads(store.get(RUN_CLOCK))
    if published.get("paused"):
        return published["trace_s"]
    return published["trace_s"] + time.time() - published["wall"]
