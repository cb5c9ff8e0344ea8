"""``islands demo``: the main job on a bundled scenario, end to end.

1. the scenario under DDP, DiLoCo and Streaming DiLoCo, side by side (simulated);
2. the bandwidth-vs-time plot and the shareable HTML report;
3. a short real run of the scenario scaled down over emulated WAN links (kernel htb between network
   namespaces as root, else in-process shaping), beside the simulator's calibrated prediction of that
   same scaled run: the validation machinery of ``islands validate`` (``islands.validation.demo``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from islands.errors import UserError
from islands.scenarios import Scenario
from islands.schedules import DDP, DiLoCo
from islands.tables import duration, rate
from islands.units import BITS_PER_GBIT, BYTES_PER_GB

DEFAULT_SCENARIO = "worked-example"
DEFAULT_OUT = "out/demo"
REAL_RUN_FOLDER = "real-run"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="the main job on a scenario: compare schedules, plot, train",
        description=__doc__,
    )
    parser.add_argument(
        "scenario",
        nargs="?",
        default=DEFAULT_SCENARIO,
        metavar="FILE",
        help=f"scenario file or bundled name (default: {DEFAULT_SCENARIO})",
    )
    parser.add_argument(
        "--out", default=DEFAULT_OUT, metavar="DIR", help=f"where to write (default: {DEFAULT_OUT})"
    )
    parser.add_argument("--no-train", action="store_true", help="skip the short real training run")
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="shape the real run's links in-process over loopback even where namespaces are available",
    )
    parser.set_defaults(handler=run)


def check_out_dir(out_dir: Path, train: bool) -> None:
    """Refuse, before any work, an ``--out`` that exists as a file, where nothing can be written, or
    (with the real run) that holds an earlier demo's run, which the trainer would refuse to replace."""
    from islands.io import temporary_beside
    from islands.trainer.outputs import run_outputs

    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"{out_dir}: --out must be a folder, and this is a file")
    temporary_beside(out_dir / "trial").unlink()
    earlier_run = out_dir / REAL_RUN_FOLDER / "run"
    if train and run_outputs(earlier_run):
        raise UserError(
            f"{out_dir}: {earlier_run} holds an earlier demo's run: remove {out_dir / REAL_RUN_FOLDER} "
            "or give --out another folder"
        )


def run(args: argparse.Namespace) -> int:
    from islands.analysis.report.demo_outputs import demo_outputs
    from islands.analysis.side_by_side import (
        left_out_notes,
        schedule_table,
        simulate_schedules,
        work_line,
    )
    from islands.scenarios import ScenarioSource

    out_dir = Path(args.out)
    check_out_dir(out_dir, train=not args.no_train)
    source = ScenarioSource.read(args.scenario)
    scenario = source.scenario
    print(f"Scenario {scenario.name}: {scenario.description}")
    results = simulate_schedules(source)
    summaries = {name: result.summary for name, result in results.items()}
    print(work_line(summaries, scenario.model.tokens_per_step))
    print(schedule_table(summaries))
    for line in left_out_notes(source):
        print(line)
    ddp, diloco = summaries[DDP.name], summaries[DiLoCo.name]
    print()
    print(
        f"DDP moves {ddp['bytes_per_worker'] / ddp['outer_steps'] / BYTES_PER_GB:.3g} GB per worker per step: "
        f"one all-reduce takes {duration(ddp['mean_sync_s'])} and keeping up would need "
        f"{rate(ddp['bandwidth_needed_gbps'])} per worker."
    )
    print(
        f"DiLoCo needs {rate(diloco['bandwidth_needed_gbps'])} on average, but each sync still stalls "
        f"{duration(diloco['mean_sync_s'])}; Streaming DiLoCo overlaps its fragments with compute."
    )

    written = demo_outputs(source, out_dir, results)
    print()
    for name, path in written.items():
        print(f"wrote the {name} {'plot' if path.suffix == '.png' else 'page'}: {path}")
    if not args.no_train:
        real_run(scenario, out_dir / REAL_RUN_FOLDER, False if args.in_process else None)
    return 0


def real_run(scenario: Scenario, out_dir: Path, kernel: bool | None) -> None:
    """The scenario scaled down, calibrated, trained over emulated links and compared (``islands validate``)."""
    from islands.commands.validate import calibration_line
    from islands.io import write_text
    from islands.validation import demo
    from islands.validation.case import validate_scaled
    from islands.validation.compare import figures_table

    case = demo.demo_case(scenario)
    m, rate_bits_per_s = demo.islands_of(case), case.slowest_bits_per_s
    print()
    print(
        f"A short real run of {scenario.name}, scaled down, over emulated WAN links, beside its prediction:"
    )
    print(
        f"calibrating: the trainer's exchange among {m} islands at {rate(rate_bits_per_s / BITS_PER_GBIT)} ...",
        flush=True,
    )
    calibration = demo.calibrate_for(case, kernel)
    print(calibration_line(calibration))
    schedule = case.document["schedule"]
    print(
        f"training: {schedule['algorithm']}, {m} islands, H = {schedule['inner_steps']}, "
        f"{schedule['outer_steps']} outer steps (torch.distributed, gloo) ...",
        flush=True,
    )
    comparison = validate_scaled(
        scenario.name, case, demo.DEMO_OPTIONS.pace, calibration, out_dir, kernel, demo.DEMO_STEM
    )
    write_text(out_dir / "calibration.json", calibration.to_json())
    print()
    print(figures_table(comparison))
    print(demo.verdict(comparison))
    print("\n".join(comparison.notes))
    print(
        f"wrote {out_dir / 'validation.json'}, {out_dir / 'overlay.png'}; the run's own outputs in {out_dir / 'run'}"
    )
