"""A scaled top-k case's exchange as the trainer runs it, measured just before its run, and the
simulator's keys that price it.

A top-k exchange costs more than its bytes, and its costs go by the case's own shape (the payload's
layout, M, K, the way it travels), so each case is probed alone (``probe``): the trainer's
own exchange of the case's largest fragment on unshaped links at zero latency, through the same
gloo groups and the same object store host as the run. What it measures:

* ``screen_s``: from handing the fragment over to the transfer's start: the finite check and norm,
  the top-k encoding, the screening's all-gather; the trace's ``idle`` before a sync;
* ``fixed_s``: the exchange's own span with bytes that take no time: each gloo step's or HTTP
  request's fixed cost, the store's file writes, then decoding and averaging the K payloads
  (M around the ring), which only starts once the last one is in.

The simulator gets them through scenario keys, never fitted to the run (``gather_overrides``):

* ``network.exchange_cpu_s_per_value``: (``screen_s`` + the screening's emulated latency) / values,
  paid by every member before its bytes move;
* around the ring and directly, every island's ``latency_ms``, such that the latency the simulator
  puts in a round adds up to ``fixed_s`` plus the latency the trainer waits in it (one path latency,
  ``trainer_latency_s``) over the round's one-way latencies: M - 1 hops of (sender + receiver)
  around the ring, one hop directly;
* through the store, ``store.request_ms``: the case's own (the service time its store host waits,
  ``trainer/runtime/object_store_host.py``) plus ``fixed_s`` over the round's requests in series
  (``schedules/store_round.py``: ``ROUND_REQUESTS``, 3: the PUT, the LIST, the K GETs at once), the
  islands' and the store's latencies left as they are: what the trainer waits of them;
* every link's rate, the islands' and the store's, times ``link_ratio``: what one TCP stream carries
  of a configured rate (``calibration.Calibration.link_ratio``: the frames' headers).

The store's split. Of ``fixed_s``, what goes with each request (an HTTP request's fixed cost: its
headers written and parsed, a thread woken on each side; the PUT's file written and renamed, a GET's
read) is paid once per request on the path, whatever the latency; decoding and averaging the K
payloads is paid once per round, after the last GET. No key holds a per-round cost inside the sync
(``network.exchange_cpu_s_per_value`` is paid before the transfer, as the trace's idle), and every
round, the first too, makes the same 3 requests in series, so both go into ``store.request_ms``:
``fixed_s`` / 3 each, paid 3 times a round, exactly once per round in sum, and never per handshake
round trip. The islands' latency then holds only latency: the run's first round opens its
connections (the probe's own processes warm nothing of the run's), 2 h round trips at the island's
latency and the store's in the trainer, and the simulator prices them at that same latency.

The trainer waits, in a round, on top of its bytes: around the ring and directly, one path latency
(``runtime/paced.py``: its own one-way latency and the farthest peer's, once per collective);
through the store, host or in-process directory, the round's requests, each a round trip to the
store (its own latency and the store's, there and back) and the store's time to answer it, as the
simulator prices them: the two executors make the same requests (``schedules/store_round.py``), on
connections kept open.
"""

from __future__ import annotations

import json
import math
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from islands.emulation import EmulatedWAN, LinkSpec, Shaper, open_wan
from islands.schedules.gather import DIRECT, RING, STORE
from islands.schedules.store_round import ROUND_REQUESTS
from islands.units import MS_PER_S

from ..calibration import trainer_latency_s
from ..run import VALIDATE_STEM, no_store, run_all, start_ranks, store_host
from ..scaling import ScaledCase
from .probe import SCENARIO_VARIABLE, STORE_DIR_VARIABLE


@dataclass(frozen=True)
class GatherCosts:
    """The probe's medians: seconds before the transfer, the exchange's own span, and the values."""

    screen_s: float
    fixed_s: float
    values: int
    hosted_store: bool  # the store was a host behind its own link (else an in-process directory)


def measure_gather_costs(
    scaled_path: Path,
    case: ScaledCase,
    kernel: bool | None,
    stem: str = VALIDATE_STEM,
    shaper: Shaper = Shaper(),
) -> GatherCosts:
    """Probe the scaled case's exchange (``probe``) on unshaped links at zero latency."""
    islands = len(case.document["island"])
    through_store = case.scenario().network.gather == STORE
    links = [LinkSpec(i, math.inf, math.inf, 0.0) for i in range(islands + through_store)]
    with (
        open_wan(links, prefix=f"{stem}gather", kernel=kernel, shaper=shaper) as wan,
        tempfile.TemporaryDirectory(prefix="islands-store-") as directory,
        store_host(wan, islands) if through_store else no_store() as address,  # answers at once
    ):
        children = start_ranks(
            wan,
            ["-m", "islands.validation.topk.probe"],
            islands,
            stdout=subprocess.PIPE,
            extra_env={SCENARIO_VARIABLE: str(scaled_path), STORE_DIR_VARIABLE: directory},
            object_store=address,
        )
        assert children[0].stdout is not None  # piped
        output = children[0].stdout.read()
        run_all(children, "the gather probe")
        hosted = isinstance(wan, EmulatedWAN) and through_store
    timings = json.loads(output.strip().splitlines()[-1])
    return GatherCosts(timings["screen"], timings["average"], timings["values"], hosted)


def simulated_one_ways(way: str, islands: int) -> int:
    """How many islands' one-way latencies the simulator puts in a round around the ring (2 (M - 1))
    or directly (2) when every island has the same."""
    return {RING: 2 * (islands - 1), DIRECT: 2}[way]


def gather_overrides(document: dict[str, Any], costs: GatherCosts, link_ratio: float) -> list[str]:
    """``--set`` overrides that price the scaled top-k case's exchange as the trainer runs it."""
    islands = document["island"]
    way = document["network"]["gather"]
    latencies_s = [island["latency_ms"] / MS_PER_S for island in islands]
    before_s = costs.screen_s + trainer_latency_s(latencies_s, phases=1)
    overrides = [f"network.exchange_cpu_s_per_value={before_s / costs.values!r}"]
    for index, island in enumerate(islands):
        overrides += [
            f"island.{index}.upload_gbps={island['upload_gbps'] * link_ratio!r}",
            f"island.{index}.download_gbps={island['download_gbps'] * link_ratio!r}",
        ]
    if way == STORE:
        return overrides + store_overrides(document.get("store", {}), costs, link_ratio)
    round_s = costs.fixed_s + trainer_latency_s(latencies_s, phases=1)
    latency_ms = round_s / simulated_one_ways(way, len(islands)) * MS_PER_S
    return overrides + [
        f"island.{index}.latency_ms={latency_ms!r}" for index in range(len(islands))
    ]


def store_overrides(store: dict[str, Any], costs: GatherCosts, link_ratio: float) -> list[str]:
    """The store's links at ``link_ratio`` and the probe's fixed cost spread over a round's requests
    on top of the case's own time to answer each (the module's docstring)."""
    request_ms = store.get("request_ms", 0.0) + costs.fixed_s / ROUND_REQUESTS * MS_PER_S
    return [f"store.request_ms={request_ms!r}"] + [
        f"store.{key}={store[key] * link_ratio!r}"
        for key in ("ingress_gbps", "egress_gbps")
        if key in store
    ]
