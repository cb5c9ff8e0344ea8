"""Rules that tie keys together so that a scenario describes a run that can happen.

Each key's own bound lives in ``spec.py``; these rules need several keys at once:

* the workers together stay within ``MAX_REPLICAS``;
* a derived step time (from gpu, gpus and mfu) obeys the same bounds as a given one;
* someone computes: at least one island is present at the start, or a join can bring one in
  (a join event, or an absent island with ``mtbf_s`` and ``mttr_s`` whose random churn returns it);
* every scheduled event changes something: a join for a worker already present, or a leave for one
  already gone, would be ignored, so it is refused (workers with random churn are exempt: whether
  they are present at that time is only known when the run is played);
* the TCP window leaves at least the lowest bandwidth any link may have (streams * window / RTT).
"""

from __future__ import annotations

from collections.abc import Sequence

from islands.units import BITS_PER_BYTE, BITS_PER_GBIT

from .errors import ScenarioError
from .model import ChurnEvent, Scenario
from .spec import MAX_REPLICAS, MAX_STEP_TIME_S, MIN_GBPS, MIN_STEP_TIME_S


def check_step_time(step_time_s: float, key: str, source: str) -> float:
    """A derived step time within the bounds of a given one."""
    if not MIN_STEP_TIME_S <= step_time_s <= MAX_STEP_TIME_S:
        raise ScenarioError(
            source,
            key,
            f"derived from gpu, gpus and mfu as {step_time_s:.3g} s: must be in "
            f"[{MIN_STEP_TIME_S:g}, {MAX_STEP_TIME_S:g}] s (see docs/limits.md)",
        )
    return step_time_s


def check_runnable(scenario: Scenario, file_events: Sequence[ChurnEvent]) -> None:
    """Every rule above; ``file_events`` are the scenario's events in file order (errors name their index)."""
    check_worker_count(scenario)
    check_someone_present(scenario)
    check_events_change_something(scenario, file_events)
    check_tcp_floor(scenario)


def check_worker_count(scenario: Scenario) -> None:
    if scenario.worker_count > MAX_REPLICAS:
        raise ScenarioError(
            scenario.source,
            "island",
            f"{scenario.worker_count} workers in all: must be at most {MAX_REPLICAS} "
            "(see docs/limits.md)",
        )


def check_someone_present(scenario: Scenario) -> None:
    if any(island.present for island in scenario.islands):
        return
    if any(event.kind == "join" for event in scenario.events):
        return
    if any(island.mtbf_s is not None and island.mttr_s is not None for island in scenario.islands):
        return
    raise ScenarioError(
        scenario.source,
        "island",
        "no island is present at the start and nothing joins: set present = true on one "
        'island, or add an [[event]] with kind = "join"',
    )


def check_events_change_something(scenario: Scenario, file_events: Sequence[ChurnEvent]) -> None:
    """Play the scheduled events in time order on the workers whose presence they alone decide."""
    workers = [w for w in scenario.workers() if w.mtbf_s is None]
    present = {w.name: w.present for w in workers}
    members: dict[str, list[str]] = {}
    for worker in workers:
        members.setdefault(worker.island, []).append(worker.name)
    order = sorted(range(len(file_events)), key=lambda index: file_events[index].at_s)
    for index in order:
        event = file_events[index]
        targets = [event.island] if event.island in present else members.get(event.island, [])
        joining = event.kind == "join"
        stuck = [name for name in targets if present[name] == joining]
        if stuck:
            state = "present" if joining else "gone"
            raise ScenarioError(
                scenario.source,
                f"event.{index}",
                f"{event.kind} of '{event.island}' at {event.at_s:g} s would be ignored: "
                f"'{stuck[0]}' is already {state} then",
            )
        for name in targets:
            present[name] = joining


def check_tcp_floor(scenario: Scenario) -> None:
    """The TCP cap (window and loss) at the largest RTT two workers can have (backbones and measured
    round trips included) must not fall below ``MIN_GBPS``."""
    network = scenario.network
    if network.tcp_window_bytes == 0 and network.loss_rate == 0:
        return
    rtt_s = 2 * scenario.farthest_hop_latency_s
    if rtt_s == 0:
        return
    cap_gbps = network.tcp_cap_bytes_per_s(rtt_s / 2) * BITS_PER_BYTE / BITS_PER_GBIT
    if cap_gbps < MIN_GBPS:
        key = "network.tcp_window_bytes" if network.tcp_window_bytes else "network.loss_rate"
        raise ScenarioError(
            scenario.source,
            key,
            f"the TCP cap (streams x window / RTT, and the loss's) = {cap_gbps * BITS_PER_GBIT:.3g} "
            f"bit/s at an RTT of {rtt_s:g} s, below the least bandwidth a link may have "
            f"({MIN_GBPS:g} Gbit/s); raise the window or network.streams, or lower the loss "
            "(see docs/limits.md)",
        )
