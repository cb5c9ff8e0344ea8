"""``islands demo``: the main job on a bundled scenario, end to end.

1. the scenario under DDP, DiLoCo and Streaming DiLoCo, side by side (simulated);
2. the bandwidth-vs-time plot and the shareable HTML report;
3. a short real run of the scenario scaled down, its measured summary beside the simulator's
   prediction of that same scaled run.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from islands.errors import UserError
from islands.tables import comparison, duration, rate

DEFAULT_SCENARIO = "worked-example"
DEFAULT_OUT = "out/demo"
COMPARED_KEYS = ("wall_time_s", "compute_utilisation", "stall_s", "bytes_per_worker", "mean_sync_s")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("demo", help="the main job on a scenario: compare schedules, plot, train",
                                   description=__doc__)
    parser.add_argument("scenario", nargs="?", default=DEFAULT_SCENARIO, metavar="FILE",
                        help=f"scenario file or bundled name (default: {DEFAULT_SCENARIO})")
    parser.add_argument("--out", default=DEFAULT_OUT, metavar="DIR", help=f"where to write (default: {DEFAULT_OUT})")
    parser.add_argument("--no-train", action="store_true", help="skip the short real training run")
    parser.set_defaults(handler=run)


def check_out_dir(out_dir: Path) -> None:
    """Refuse an ``--out`` that exists as a file before any work is done."""
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"{out_dir}: --out must be a folder, and this is a file")


def relative_errors(measured: dict, predicted: dict) -> str:
    parts = []
    for key in COMPARED_KEYS:
        if predicted[key]:
            parts.append(f"{key} {100 * (measured[key] - predicted[key]) / predicted[key]:+.1f}%")
    return "measured vs predicted: " + ", ".join(parts)


def run(args: argparse.Namespace) -> int:
    from islands.analysis.compare import schedule_table, simulate_schedules, work_line
    from islands.analysis.demo import demo_outputs
    from islands.analysis.scenario_source import ScenarioSource

    source = ScenarioSource.read(args.scenario)
    scenario = source.scenario
    out_dir = Path(args.out)
    check_out_dir(out_dir)
    print(f"Scenario {scenario.name}: {scenario.description}")
    results = simulate_schedules(source)
    summaries = {name: result.summary for name, result in results.items()}
    print(work_line(summaries, scenario.model.tokens_per_step))
    print(schedule_table(summaries))
    ddp, diloco = summaries["ddp"], summaries["diloco"]
    print()
    print(f"DDP moves {ddp['bytes_per_worker'] / ddp['outer_steps'] / 1e9:.3g} GB per worker per step: "
          f"one all-reduce takes {duration(ddp['mean_sync_s'])} and keeping up would need "
          f"{rate(ddp['bandwidth_needed_gbps'])} per worker.")
    print(f"DiLoCo needs {rate(diloco['bandwidth_needed_gbps'])} on average, but each sync still stalls "
          f"{duration(diloco['mean_sync_s'])}; Streaming DiLoCo overlaps its fragments with compute.")

    written = demo_outputs(source, out_dir, results)
    print()
    for name, path in written.items():
        print(f"wrote the {name} {'plot' if path.suffix == '.png' else 'page'}: {path}")
    if args.no_train:
        return 0

    from islands.trainer.demo import scaled_demo

    print()
    print(f"A short real run of {scenario.name}, scaled down (torch.distributed, gloo):")
    measured, predicted = scaled_demo(args.scenario, out_dir / "train")
    print()
    print(comparison({"predicted": predicted, "measured": measured}))
    print(relative_errors(measured, predicted))
    print("(the demo's run talks over loopback, with every process sharing this machine's cores, so its syncs"
          " and steps are not the scenario's links; `islands validate` runs the same check over emulated links)")
    print(f"run outputs (trace, metrics, summary): {out_dir / 'train'}")
    return 0
