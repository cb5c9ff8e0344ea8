"""Simulator speed, measured side by side in one run (this machine is shared and noisy).

Prints, for a 64-island Streaming DiLoCo scenario, simulated seconds per wall second, events per
second and the runtime ratio at H=5000 versus H=50 with the same number of outer steps, without and
with step-time jitter (a run's cost must grow with syncs and fragments, not with H, so the ratio
should be close to 1); then the wall time of an INTELLECT-1-sized run (14 islands, 1,000 DiLoCo
syncs; target under 5 s); then the fleets at internet scale (``FLEETS``), each with its time, the
ratio when its islands double (target at most x2.2), its events per second beside plain SimPy's
(measured in this run) and whether the default event budget admits it:

* 10,000 identical islands x 1,000 DiLoCo syncs (under 10 s);
* 10,000 islands with 5% step-time jitter x 1,000 DiLoCo syncs (under 10 s);
* 1,000 islands that leave and come back (``mtbf_s`` 12 hours, ``mttr_s`` one hour) x 100 syncs
  (under 2 s), with rings restarted from scratch (played on counts, ``simulator/fast/returning.py``:
  the ratio of their joins and leaves is printed beside the time's, and the joins and leaves its
  budget expected beside those that came, target within x2) and with partial participation (on counts
  too; its doubling is the x2.2 target, as the joins and leaves it plays grow x2.1, where the restarted
  fleet's grow x4-6 with its broken rings);
* 2,000 islands of four kinds (``benchmarks/fleet-four-kinds.toml``: H100, A100, home, far) x 200
  Streaming syncs (20 outer steps of 10 fragments; under 2 s);
* 1,000 Decoupled DiLoCo learners of two kinds (``benchmarks/fleet-decoupled-two-kinds.toml``: 600 in
  datacentres, 400 at home at half the speed), jittered, that leave and return (MTBF 2-12 h, MTTR 15-30
  min) x 50 outer steps (under 3 s; played on a heap of timers, ``simulator/fast/learners.py``: its
  estimated timers are printed beside those it spent);

then the peak memory of a 20,000-island run (a child process's peak resident set; under 2 GB), and
the command ``islands plan worked-example --objective time-to-loss`` from start to end (under 2 s).

    python benchmarks/bench_simulator.py [--repeat 3] [--syncs-scale 1.0]

``--syncs-scale`` multiplies every fleet's syncs (0.1 for a quick look; the targets are for 1).
"""

from __future__ import annotations

import argparse
import math
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import simpy

from islands.scenarios import ScenarioError, load
from islands.simulator import RunSetup, chosen, simulate
from islands.simulator.budget import estimate

HERE = Path(__file__).resolve().parent
FOUR_KINDS = str(HERE / "fleet-four-kinds.toml")
FOUR_KINDS_FRAGMENTS = 10
DECOUPLED_TWO_KINDS = str(HERE / "fleet-decoupled-two-kinds.toml")
DATACENTRE_SHARE = 0.6  # of the Decoupled fleet's learners; the rest at home
SLOW_RUN_S = 30.0  # a run this long is timed once: the machine's noise is small beside it

STREAMING_64 = [
    "schedule.algorithm=streaming",
    "island.0.replicas=64",
    "schedule.outer_steps=50",
    "schedule.fragments=10",
    "schedule.overlap_steps=2",
]


@dataclass(frozen=True)
class Fleet:
    label: str
    scenario: str
    keys: tuple[str, ...]  # overrides, formatted with islands= and syncs=
    islands: int
    syncs: int
    target_s: float

    def overrides(self, islands: int, syncs: int) -> list[str]:
        datacentre = round(islands * DATACENTRE_SHARE)
        return [
            key.format(
                islands=islands,
                syncs=syncs,
                quarter=islands // 4,
                datacentre=datacentre,
                home=islands - datacentre,
                outer=max(1, syncs // FOUR_KINDS_FRAGMENTS),
            )
            for key in self.keys
        ]


DILOCO = ("schedule.outer_steps={syncs}", "island.0.replicas={islands}")
RETURNING = (*DILOCO, "island.0.mtbf_s=43200", "island.0.mttr_s=3600")
FLEETS = (
    Fleet(
        "10,000 identical islands x 1,000 DiLoCo syncs",
        "worked-example",
        DILOCO,
        10_000,
        1000,
        10.0,
    ),
    Fleet(
        "10,000 islands, 5% step-time jitter x 1,000 DiLoCo syncs",
        "worked-example",
        (*DILOCO, "island.0.jitter_cv=0.05"),
        10_000,
        1000,
        10.0,
    ),
    Fleet(
        "1,000 islands that leave and return (MTBF 12 hours, MTTR 1 hour) x 100 syncs",
        "worked-example",
        RETURNING,
        1000,
        100,
        2.0,
    ),
    Fleet(
        "  same, partial participation",
        "worked-example",
        (*RETURNING, "network.on_departure=partial"),
        1000,
        100,
        2.0,
    ),
    Fleet(
        "2,000 islands of four kinds x 200 Streaming syncs",
        FOUR_KINDS,
        ("schedule.outer_steps={outer}", *(f"island.{i}.replicas={{quarter}}" for i in range(4))),
        2000,
        200,
        2.0,
    ),
    Fleet(
        "1,000 Decoupled learners of two kinds that leave and return (MTBF 2-12 h, MTTR 15-30 min) x 50 outer "
        "steps",
        DECOUPLED_TWO_KINDS,
        (
            "schedule.outer_steps={syncs}",
            "island.0.replicas={datacentre}",
            "island.1.replicas={home}",
        ),
        1000,
        50,
        3.0,
    ),
)
MEMORY_FLEET = Fleet(
    "20,000 islands, 5% step-time jitter x 10 DiLoCo syncs",
    "worked-example",
    (*DILOCO, "island.0.jitter_cv=0.05"),
    20_000,
    10,
    0.0,
)
MEMORY_TARGET_GB = 2.0


def best_of(repeat: int, scenario_name: str, overrides: list[str]) -> tuple[float, dict]:
    """Fastest of ``repeat`` runs (the least disturbed by other load) and its summary; a run over
    ``SLOW_RUN_S`` is timed once."""
    scenario = load(scenario_name, overrides)
    timings = []
    for _ in range(repeat):
        start = time.perf_counter()
        summary = simulate(scenario, max_events=math.inf).summary
        timings.append(time.perf_counter() - start)
        if timings[-1] > SLOW_RUN_S:
            break
    return min(timings), summary


def admitted(scenario_name: str, overrides: list[str]) -> str:
    """Whether the default budget of the player that would play it admits the run, or the line refusing it."""
    try:
        setup = RunSetup.of(load(scenario_name, overrides))
        chosen(setup).budget(setup)
    except ScenarioError as error:
        return f"refused by the default budget: {error}"
    return "admitted by the default budget"


def estimated_timers(scenario_name: str, overrides: list[str], summary: dict) -> str:
    """A run on the learners' heap of timers: the timers its budget estimated against those it spent."""
    setup = RunSetup.of(load(scenario_name, overrides))
    timers = chosen(setup).budget(setup).events
    return f"; timers estimated {timers:.4g}, spent {summary['events']} (x{timers / summary['events']:.2f})"


def event_rate(summary: dict, seconds: float) -> str:
    """Events per second of an event run; a run played with arrays (``simulator/fast/lockstep.py``) or on
    counts (``simulator/fast/returning.py``: then its membership changes per second) has none."""
    events = summary["events"]
    if summary["player"] == "learners":
        return f"played by the learners player on a heap of timers ({events} timers)"
    if summary["player"] == "counts":
        changes = summary["joins"] + summary["leaves"]
        return f"played on counts, no events ({changes / seconds:.4g} joins and leaves/s, {changes} in all)"
    return (
        f"{events / seconds:.4g} events/s ({events} events)"
        if events
        else "played with arrays, no events"
    )


def fleet_target(fleet: Fleet, syncs_scale: float, repeat: int, simpy_rate: float) -> None:
    """One fleet: its time, the ratio of doubling its islands (target at most x2.2), its events per
    second beside plain SimPy's, and the default budget's answer."""
    syncs = max(1, round(fleet.syncs * syncs_scale))
    overrides = fleet.overrides(fleet.islands, syncs)
    seconds, summary = best_of(repeat, fleet.scenario, overrides)
    doubled, doubled_summary = best_of(
        repeat, fleet.scenario, fleet.overrides(2 * fleet.islands, syncs)
    )
    events = summary["events"]
    rate = event_rate(summary, seconds)
    more_events = f" (events x{doubled_summary['events'] / events:.2f})" if events else ""
    if (
        summary["player"] == "counts"
    ):  # on counts: their work is the joins and leaves, which the budget estimates
        changes = [run["joins"] + run["leaves"] for run in (summary, doubled_summary)]
        expected = expected_changes(fleet.scenario, overrides)
        more_events = (
            f" (joins and leaves x{changes[1] / changes[0]:.2f}; the budget expected {expected:.4g} "
            f"of them, {changes[0]} came: x{expected / changes[0]:.2f}, target within x2 either way)"
        )
    if summary["player"] == "learners":
        rate += estimated_timers(fleet.scenario, overrides, summary)
    if summary["player"] == "events":  # the event model's budget against what the run spent
        estimated = estimate(load(fleet.scenario, overrides)).events
        rate += f"; the budget estimated {estimated:.3g} events (x{estimated / events:.2f} of those spent)"
    print(
        f"{fleet.label}{'' if syncs == fleet.syncs else f' (syncs scaled to {syncs})'}: {seconds:.3f} s "
        f"(target < {fleet.target_s:g} s); doubling the islands x{doubled / seconds:.2f} "
        f"({doubled:.3f} s at {2 * fleet.islands:,}){more_events} "
        f"(target at most x2.2); {rate} (plain SimPy "
        f"{simpy_rate:.4g} events/s); {admitted(fleet.scenario, overrides)}"
    )


def expected_changes(scenario_name: str, overrides: list[str]) -> float:
    """The joins and leaves that the budget of the player that would play the run expects."""
    setup = RunSetup.of(load(scenario_name, overrides))
    return chosen(setup).budget(setup).membership_changes


def peak_memory_gb(fleet: Fleet) -> float:
    """Peak resident memory of a child process that loads and runs ``fleet`` once."""
    code = (
        "import resource, sys, math\nfrom islands.scenarios import load\nfrom islands.simulator import simulate\n"
        f"simulate(load({fleet.scenario!r}, {fleet.overrides(fleet.islands, fleet.syncs)!r}), max_events=math.inf)\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
    )
    done = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return int(done.stdout.split()[-1]) * 1024 / 1e9  # ru_maxrss is in KiB on Linux


def plan_command_s(repeat: int) -> tuple[float, float]:
    """The fastest of ``repeat`` runs of ``islands plan worked-example --objective time-to-loss``,
    start to end (a new process), and the CPU seconds it and its worker processes took (on a shared
    machine the wall time is the other sessions' too)."""
    timings = []
    for _ in range(repeat):
        start, cpu = time.perf_counter(), children_cpu_s()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "islands.cli",
                "plan",
                "worked-example",
                "--objective",
                "time-to-loss",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        timings.append((time.perf_counter() - start, children_cpu_s() - cpu))
    return min(timings)


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


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


def streaming_h_ratio(repeat: int) -> None:
    for jitter_cv in (0.0, 0.1):
        print(
            f"64 islands, Streaming DiLoCo, P=10, 50 outer steps, step-time jitter cv={jitter_cv}"
        )
        results, events = {}, {}
        for h in (50, 5000):
            overrides = [
                *STREAMING_64,
                f"schedule.inner_steps={h}",
                f"island.0.jitter_cv={jitter_cv}",
            ]
            seconds, summary = best_of(repeat, "worked-example", overrides)
            results[h], events[h] = seconds, summary["events"]
            print(
                f"  H={h:<5d} {seconds:7.3f} s wall  {summary['wall_time_s'] / seconds:12.4g} simulated s per "
                f"wall s  {event_rate(summary, seconds)}"
            )
        ratio = (
            f"; event-count ratio {events[5000] / events[50]:.3f} (noise-free)"
            if events[50]
            else ""
        )
        print(
            f"  runtime ratio H=5000 / H=50: {results[5000] / results[50]:.3f} (target: close to 1){ratio}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--syncs-scale", type=float, default=1.0, help="multiplies every fleet's syncs"
    )
    args = parser.parse_args()

    simpy_rate = plain_simpy_events_per_s()
    print(f"plain SimPy (two processes of timeouts): {simpy_rate:.4g} events/s")
    streaming_h_ratio(args.repeat)
    seconds, summary = best_of(
        args.repeat,
        "worked-example",
        ["island.0.replicas=14", "schedule.outer_steps=1000", "schedule.inner_steps=100"],
    )
    print(
        f"14 islands, DiLoCo, 1,000 syncs: {seconds:.3f} s (target < 5 s), {event_rate(summary, seconds)}"
    )
    for fleet in FLEETS:
        fleet_target(fleet, args.syncs_scale, args.repeat, simpy_rate)
    print(
        f"{MEMORY_FLEET.label}: peak memory {peak_memory_gb(MEMORY_FLEET):.2f} GB (target < {MEMORY_TARGET_GB:g} GB)"
    )
    wall_s, cpu_s = plan_command_s(args.repeat)
    print(
        f"islands plan worked-example --objective time-to-loss (the command, start to end): "
        f"{wall_s:.2f} s (target < 2 s), {cpu_s:.2f} s of CPU in all its processes"
    )


if __name__ == "__main__":
    main()
