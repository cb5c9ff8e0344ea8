"""``islands compare FILE RUN_DIR``: the scenario's prediction beside a run made anywhere, without
running anything. RUN_DIR is a folder ``islands train --out`` wrote (under torchrun on a GPU cluster,
over a real WAN, or the ``run/`` folder of ``islands validate``): every figure and every sync,
predicted beside measured with relative errors, as ``validate`` does. Or RUN_DIR is a log file of any
training stack (a per-step CSV or JSON lines log, a PyTorch profiler / Chrome trace, a torchtitan
log; docs/how-to/compare-any-stack.md): per-step rates over the steps it holds, beside the
prediction over the same steps. --out writes comparison.json, the predicted trace and (for a run
folder) overlay.png. A run of other work (another algorithm, number of workers, steps, wire bits,
fragments or sync spacing) or one that stopped short is refused."""

from __future__ import annotations

import argparse
import dataclasses

from islands.errors import UserError
from islands.io import check_out_folder

from .common import add_network_profile_argument, add_scenario_arguments, path_value, read_source

OUTPUT_FILES = ("comparison.json", "overlay.png", "predicted_trace.csv")
LOG_OUTPUT_FILES = ("comparison.json", "predicted_trace.csv")
LOG_FORMATS = (
    "steps",
    "chrome",
    "torchtitan",
)  # validation.logs.compare_log.LOG_FORMATS, without its imports


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "compare", help="compare the prediction with a run made anywhere", description=__doc__
    )
    add_scenario_arguments(parser)
    add_network_profile_argument(parser)
    parser.add_argument(
        "run_dir",
        metavar="RUN_DIR",
        type=path_value,
        help="a folder `islands train --out` wrote (summary.json, run.json, trace.csv), or a log "
        "file of any stack (see --format)",
    )
    parser.add_argument(
        "--format",
        dest="log_format",
        choices=LOG_FORMATS,
        default=None,
        help="RUN_DIR is a log in this format: steps (per-step CSV or JSON lines), chrome (a PyTorch "
        "profiler trace) or torchtitan (its console log); default: told from the file",
    )
    parser.add_argument(
        "--comm-event",
        dest="comm_events",
        action="append",
        default=None,
        metavar="NAME",
        help="with a Chrome trace: a span whose name contains NAME is communication (repeatable; "
        "replaces the defaults: gloo:all_reduce, nccl:all_reduce, c10d::allreduce_, "
        "ncclDevKernel_AllReduce, ncclKernel_AllReduce)",
    )
    parser.add_argument(
        "--measured-steps",
        action="store_true",
        help="give each island the run's measured compute seconds per inner step, so that "
        "the network and the schedule are what is compared",
    )
    parser.add_argument(
        "--out",
        metavar="DIR",
        type=path_value,
        help="also write comparison.json, overlay.png and predicted_trace.csv there",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the comparison as one JSON object"
    )
    parser.set_defaults(handler=run)


def check_outputs(args: argparse.Namespace) -> None:
    """Refuse, before any work, an --out whose files cannot be written or would overwrite an input."""
    from islands.io import refuse_shared_paths
    from islands.validation.run_folder import RUN_FILES

    if args.out is None:
        return
    check_out_folder("--out", args.out)
    is_folder = args.run_dir.is_dir()
    run_files = (
        {f"RUN_DIR's {name}": args.run_dir / name for name in RUN_FILES}
        if is_folder
        else {"the log": args.run_dir}
    )
    inputs = {"the scenario": args.scenario, "--network-profile": args.network_profile, **run_files}
    outputs = OUTPUT_FILES if is_folder else LOG_OUTPUT_FILES
    refuse_shared_paths({f"--out's {name}": args.out / name for name in outputs}, inputs)


def check_log_flags(args: argparse.Namespace) -> None:
    """--format and --comm-event go with a log file; --comm-event with a Chrome trace."""
    if args.run_dir.is_dir() and (args.log_format or args.comm_events):
        flag = "--format" if args.log_format else "--comm-event"
        raise UserError(f"{flag} goes with a log file; {args.run_dir} is a run folder")
    if args.comm_events and args.log_format not in (None, "chrome"):
        raise UserError(
            f"--comm-event goes with a Chrome trace (--format chrome), not --format {args.log_format}"
        )
    if args.comm_events and not all(name.strip() for name in args.comm_events):
        raise UserError("--comm-event is empty: give a part of the communication spans' names")


def run(args: argparse.Namespace) -> int:
    from islands.io import json_text, write_table, write_text
    from islands.validation.compare import figures_table, syncs_table
    from islands.validation.external import compare_run
    from islands.validation.plot import write_overlay

    check_log_flags(args)
    check_outputs(args)
    source = read_source(args)
    if not args.run_dir.exists():
        raise UserError(f"{args.run_dir}: no such run folder or log file")
    if not args.run_dir.is_dir():
        return run_log(args, source)
    result = compare_run(lambda extra: source.variant(*extra), args.run_dir, args.measured_steps)
    comparison, predicted = result.comparison, result.predicted
    document = {
        "scenario": args.scenario,
        "network_profile": args.network_profile,
        "run_dir": str(args.run_dir),
        "overrides": [*args.overrides, *result.overrides],
        "figures": [dataclasses.asdict(f) for f in comparison.figures],
        "syncs": comparison.syncs,
        "notes": comparison.notes,
        "predicted": predicted.summary,
        "measured": result.run.summary,
    }
    if args.out:
        write_text(args.out / "comparison.json", json_text(document, indent=2) + "\n")
        write_table(predicted.trace, args.out / "predicted_trace.csv")
        write_overlay(
            args.out / "overlay.png",
            comparison,
            predicted.trace,
            result.run.trace,
            ("predicted (simulator)", f"measured ({args.run_dir})"),
        )
    return shown(
        args,
        document,
        f"{comparison.case} predicted, against the run in {args.run_dir}",
        [figures_table(comparison), syncs_table(comparison)],
        comparison.notes,
        OUTPUT_FILES,
    )


def shown(
    args: argparse.Namespace,
    document: dict,
    header: str,
    tables: list[str],
    notes: list[str],
    written: tuple[str, ...],
) -> int:
    """The comparison as one JSON object (--json), or its header, tables and notes, and what --out wrote."""
    from islands.io import json_text

    if args.json:
        print(json_text(document, indent=2))
        return 0
    print(header)
    print("\n\n".join(tables))
    print()
    for note in notes:
        print(note)
    if args.out:
        print("wrote " + ", ".join(str(args.out / name) for name in written))
    return 0


def run_log(args: argparse.Namespace, source) -> int:
    """``islands compare FILE LOG``: the prediction beside a log of any stack, over the log's steps."""
    from islands.io import json_text, write_table, write_text
    from islands.validation.compare import figures_table
    from islands.validation.logs.compare_log import compare_log, read_log, syncs_table

    log = read_log(
        args.run_dir, args.log_format, tuple(args.comm_events) if args.comm_events else None
    )
    if log.format != "chrome" and args.comm_events:
        raise UserError(
            f"{args.run_dir}: --comm-event goes with a Chrome trace; this is a {log.format} log"
        )
    result = compare_log(lambda extra: source.variant(*extra), log, args.measured_steps)
    comparison, window = result.comparison, result.window
    document = {
        "scenario": args.scenario,
        "network_profile": args.network_profile,
        "log": str(args.run_dir),
        "format": log.format,
        "window": {
            "first_step": window.first_step,
            "last_step": window.last_step,
            "steps": window.steps,
            "sync_steps": window.sync_steps,
            "ranks": log.ranks,
        },
        "assumptions": result.assumptions,
        "overrides": [*args.overrides, *result.overrides],
        "figures": [dataclasses.asdict(f) for f in comparison.figures],
        "syncs": comparison.syncs,
        "slowdown": dataclasses.asdict(result.slowdown),
        "notes": comparison.notes,
        "predicted": result.predicted.summary,
    }
    if args.out:
        write_text(args.out / "comparison.json", json_text(document, indent=2) + "\n")
        write_table(result.predicted.trace, args.out / "predicted_trace.csv")
    tables = [
        figures_table(comparison),
        *([syncs_table(comparison.syncs)] if comparison.syncs else []),
    ]
    return shown(
        args,
        document,
        f"{comparison.case} predicted, against the {log.format} log {args.run_dir}, over "
        f"{window.text()}",
        tables,
        comparison.notes,
        LOG_OUTPUT_FILES,
    )
