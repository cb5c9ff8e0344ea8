"""Simulator speed, measured side by side in one run (this machine is shared and noisy).

Prints, for a 64-island Streaming DiLoCo scenario, simulated seconds per wall second, events per
second and the runtime ratio at H=5000 versus H=50 with the same number of outer steps, without and
with step-time jitter (a run's cost
must grow with syncs and fragments, not with H, so the ratio should be close to 1); then the wall time
of an INTELLECT-1-sized run (14 islands, 1,000 DiLoCo syncs; target under 5 s); the fleet-scale
targets, each with the ratios of doubling its islands and its syncs (target at most 2) in time and
in simulator events (noise-free): 10,000 identical islands x 1,000 DiLoCo syncs (under 10 s), 1,000
islands with random churn (MTBF one day each) x 100 syncs (under 2 s), rings restarted from scratch
and with partial participation (``network.on_departure = "partial"``); the command ``islands plan
worked-example`` from start to end (under 1 s); and plain SimPy's event rate on this machine for
comparison.

    python benchmarks/bench_simulator.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import simpy

from islands.scenarios import load
from islands.simulator import simulate

FLEET = ["schedule.outer_steps={syncs}", "island.0.replicas={islands}"]
CHURN = [*FLEET, "island.0.mtbf_s=86400"]
CHURN_PARTIAL = [*CHURN, "network.on_departure=partial"]

STREAMING_64 = ["schedule.algorithm=streaming", "island.0.replicas=64", "schedule.outer_steps=50",
                "schedule.fragments=10", "schedule.overlap_steps=2"]


def best_of(repeat: int, overrides: list[str]) -> tuple[float, dict]:
    """Fastest of ``repeat`` runs (the least disturbed by other load) and its summary."""
    scenario = load("worked-example", overrides)
    timings = []
    for _ in range(repeat):
        start = time.perf_counter()
        summary = simulate(scenario, max_events=1e9).summary
        timings.append(time.perf_counter() - start)
    return min(timings), summary


def fleet_target(label: str, template: list[str], islands: int, syncs: int, target_s: float, repeat: int) -> None:
    """One scale target, and the ratios of doubling its islands and its syncs (target at most 2 each)."""
    def timed(islands: int, syncs: int) -> tuple[float, int]:
        seconds, summary = best_of(repeat, [key.format(islands=islands, syncs=syncs) for key in template])
        return seconds, summary["events"]

    (seconds, events), (more_islands, islands_events), (more_syncs, syncs_events) = (
        timed(islands, syncs), timed(2 * islands, syncs), timed(islands, 2 * syncs))
    print(f"{label}: {seconds:.3f} s (target < {target_s:g} s); doubling the islands x{more_islands / seconds:.2f} "
          f"(events x{islands_events / events:.2f}), the syncs x{more_syncs / seconds:.2f} (events "
          f"x{syncs_events / events:.2f}) (target at most x2)")


def plan_command_s(repeat: int) -> float:
    """The fastest of ``repeat`` runs of ``islands plan worked-example``, start to end (a new process)."""
    timings = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "islands.cli", "plan", "worked-example"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        timings.append(time.perf_counter() - start)
    return min(timings)


def plain_simpy_events_per_s(events: int = 400_000) -> float:
    env = simpy.Environment()

    def ticker(env: simpy.Environment, count: int):
        for _ in range(count):
            yield env.timeout(1)

    env.process(ticker(env, events // 2))
    env.process(ticker(env, events // 2))
    start = time.perf_counter()
    env.run()
    return events / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    for jitter_cv in (0.0, 0.1):
        print(f"64 islands, Streaming DiLoCo, P=10, 50 outer steps, step-time jitter cv={jitter_cv}")
        results, events = {}, {}
        for h in (50, 5000):
            overrides = [*STREAMING_64, f"schedule.inner_steps={h}", f"island.0.jitter_cv={jitter_cv}"]
            seconds, summary = best_of(args.repeat, overrides)
            results[h], events[h] = seconds, summary["events"]
            print(f"  H={h:<5d} {seconds:7.3f} s wall  {summary['wall_time_s'] / seconds:12.4g} simulated s per "
                  f"wall s  {summary['events'] / seconds:10.4g} events/s  ({summary['events']} events)")
        print(f"  runtime ratio H=5000 / H=50: {results[5000] / results[50]:.3f} (target: close to 1); "
              f"event-count ratio {events[5000] / events[50]:.3f} (noise-free)")

    seconds, summary = best_of(args.repeat, ["island.0.replicas=14", "schedule.outer_steps=1000",
                                             "schedule.inner_steps=100"])
    print(f"14 islands, DiLoCo, 1,000 syncs: {seconds:.3f} s (target < 5 s), "
          f"{summary['events'] / seconds:.4g} events/s")

    fleet_target("10,000 identical islands, DiLoCo, 1,000 syncs", FLEET, 10_000, 1000, 10.0, args.repeat)
    fleet_target("1,000 islands, random churn (MTBF 1 day each), 100 syncs", CHURN, 1000, 100, 2.0, args.repeat)
    fleet_target("  same, partial participation", CHURN_PARTIAL, 1000, 100, 2.0, args.repeat)
    print(f"islands plan worked-example (the command, start to end): {plan_command_s(args.repeat):.2f} s "
          "(target < 1 s)")

    print(f"plain SimPy (two processes of timeouts): {plain_simpy_events_per_s():.4g} events/s")


if __name__ == "__main__":
    main()
