"""``islands demo``: the worked example under DDP, DiLoCo and Streaming DiLoCo, side by side."""

from __future__ import annotations

import argparse

from islands.scenarios import load
from islands.simulator import simulate
from islands.tables import comparison, duration, rate

DEFAULT_SCENARIO = "worked-example"
ALGORITHMS = ("ddp", "diloco", "streaming")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("demo", help="compare DDP, DiLoCo and Streaming DiLoCo on a scenario",
                                   description=__doc__)
    parser.add_argument("scenario", nargs="?", default=DEFAULT_SCENARIO, metavar="FILE",
                        help=f"scenario file or bundled name (default: {DEFAULT_SCENARIO})")
    parser.set_defaults(handler=run)


def compare_schedules(scenario_name: str) -> dict[str, dict]:
    """Simulate the scenario once per schedule (DDP reads ``outer_steps`` as its number of steps)."""
    return {algorithm: simulate(load(scenario_name, [f"schedule.algorithm={algorithm}"])).summary
            for algorithm in ALGORITHMS}


def run(args: argparse.Namespace) -> int:
    scenario = load(args.scenario)
    print(f"Scenario {scenario.name}: {scenario.description}")
    summaries = compare_schedules(args.scenario)
    print(comparison(summaries))
    ddp, diloco = summaries["ddp"], summaries["diloco"]
    print()
    print(f"DDP moves {ddp['bytes_per_worker'] / ddp['outer_steps'] / 1e9:.3g} GB per worker per step: "
          f"one all-reduce takes {duration(ddp['mean_sync_s'])} and keeping up would need "
          f"{rate(ddp['bandwidth_needed_gbps'])} per worker.")
    print(f"DiLoCo needs {rate(diloco['bandwidth_needed_gbps'])} on average, but each sync still stalls "
          f"{duration(diloco['mean_sync_s'])}; Streaming DiLoCo overlaps its fragments with compute.")
    return 0
