"""``islands compare FILE RUN_DIR``: the scenario's prediction beside a run made anywhere, without
running anything: a run of ``islands train`` under torchrun on a GPU cluster, over a real WAN, or the
``run/`` folder of ``islands validate``. Prints every figure and every sync, predicted beside measured
with relative errors, as ``validate`` does; --out writes comparison.json, overlay.png and the
predicted trace. A run of other work (another algorithm, number of workers, steps, wire bits or
fragments) or one that stopped short is refused."""

from __future__ import annotations

import argparse
import dataclasses

from islands.io import check_out_folder

from .common import add_network_profile_argument, add_scenario_arguments, path_value, read_source

OUTPUT_FILES = ("comparison.json", "overlay.png", "predicted_trace.csv")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("compare", help="compare the prediction with a run made anywhere",
                                   description=__doc__)
    add_scenario_arguments(parser)
    add_network_profile_argument(parser)
    parser.add_argument("run_dir", metavar="RUN_DIR", type=path_value,
                        help="a folder `islands train --out` wrote: summary.json, run.json, trace.csv")
    parser.add_argument("--measured-steps", action="store_true",
                        help="give each island the run's measured compute seconds per inner step, so that "
                             "the network and the schedule are what is compared")
    parser.add_argument("--out", metavar="DIR", type=path_value,
                        help="also write comparison.json, overlay.png and predicted_trace.csv there")
    parser.add_argument("--json", action="store_true", help="print the comparison as one JSON object")
    parser.set_defaults(handler=run)


def check_outputs(args: argparse.Namespace) -> None:
    """Refuse, before any work, an --out whose files cannot be written or would overwrite an input."""
    from islands.io import refuse_shared_paths
    from islands.validation.run_folder import RUN_FILES

    if args.out is None:
        return
    check_out_folder("--out", args.out)
    inputs = {"the scenario": args.scenario, "--network-profile": args.network_profile,
              **{f"RUN_DIR's {name}": args.run_dir / name for name in RUN_FILES}}
    refuse_shared_paths({f"--out's {name}": args.out / name for name in OUTPUT_FILES}, inputs)


def run(args: argparse.Namespace) -> int:
    from islands.io import json_text, write_table, write_text
    from islands.validation.compare import figures_table, syncs_table
    from islands.validation.external import compare_run
    from islands.validation.plot import write_overlay

    check_outputs(args)
    source = read_source(args)
    result = compare_run(lambda extra: source.variant(*extra), args.run_dir, args.measured_steps)
    comparison, predicted = result.comparison, result.predicted
    document = {"scenario": args.scenario, "network_profile": args.network_profile, "run_dir": str(args.run_dir),
                "overrides": [*args.overrides, *result.overrides],
                "figures": [dataclasses.asdict(f) for f in comparison.figures], "syncs": comparison.syncs,
                "notes": comparison.notes, "predicted": predicted.summary, "measured": result.run.summary}
    if args.out:
        write_text(args.out / "comparison.json", json_text(document, indent=2) + "\n")
        write_table(predicted.trace, args.out / "predicted_trace.csv")
        write_overlay(args.out / "overlay.png", comparison, predicted.trace, result.run.trace,
                      ("predicted (simulator)", f"measured ({args.run_dir})"))
    if args.json:
        print(json_text(document, indent=2))
        return 0
    print(f"{comparison.case} predicted, against the run in {args.run_dir}")
    print(figures_table(comparison))
    print()
    print(syncs_table(comparison))
    print()
    for note in comparison.notes:
        print(note)
    if args.out:
        print(f"wrote {args.out / 'comparison.json'}, {args.out / 'overlay.png'}, {args.out / 'predicted_trace.csv'}")
    return 0
