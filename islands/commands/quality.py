"""``islands quality FILE``: what each schedule costs in evaluation loss at equal tokens.

Without options, by the prior (``islands.analysis.quality.loss_prior``), which reads the published tables:
the DiLoCo scaling laws for model size and replicas (at H = 30), the eager-updates paper for
fragments, overlap and the eager update. For the scenario's model size and workers it prints, per
schedule, the predicted evaluation loss (on the papers' C4 set-up) and the difference from data
parallelism, with a note on every setting the tables do not cover (H other than 30, tau above 1,
more than 8 replicas, an update rule no table measured), and the tokens it needs to reach DDP's loss
(Chinchilla's L(N, D) at D = 20 N: "x1.32" is 32% more tokens than DDP).

``--grid inner_steps=10,30,100 --grid workers=2,4`` (also ``algorithm``, ``bits``, ``fragments``) trains the
scenario's own model instead: for each M one DDP run, and the scenario's schedule at every grid
point, all ``--steps`` inner steps long (default: the fewest giving every H at least 20 outer steps;
a point with fewer is marked as outside the papers' regime), and measures each final evaluation
loss against DDP's at equal tokens. ``--tune-outer-lr`` trains every point at a small sweep of outer
learning rates and keeps the best, as the papers do, saying which won. The
measured profile then overrides the prior (``--save FILE.json`` keeps it; ``--profile FILE.json``
uses a kept one). ``--json`` prints everything as one object.
"""

from __future__ import annotations

import argparse

from islands.errors import UserError
from islands.numbers import is_finite_number

from .common import path_text, read_source

MAX_STEPS = 100_000


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "quality",
        description=__doc__,
        help="each schedule's evaluation loss at equal tokens: the published tables, "
        "or a grid trained for real",
    )
    parser.add_argument("scenario", metavar="FILE", help="scenario TOML file or bundled name")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a scenario key, e.g. schedule.inner_steps=30",
    )
    parser.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="KEY=V1,V2",
        help="train this grid for real (algorithm, inner_steps, workers, bits, fragments); repeatable",
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=None,
        metavar="N",
        help="inner steps per worker of every grid run (default: the fewest giving every H "
        "at least 20 outer steps)",
    )
    parser.add_argument(
        "--tune-outer-lr",
        action="store_true",
        help="train every grid point at a small sweep of outer learning rates, keep the best",
    )
    parser.add_argument(
        "--save", metavar="FILE.json", type=path_text, help="write the measured profile here"
    )
    parser.add_argument(
        "--profile",
        metavar="FILE.json",
        type=path_text,
        help="price with a profile saved by --save",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the estimates as one JSON object"
    )
    parser.set_defaults(handler=run)


def check_arguments(args: argparse.Namespace) -> None:
    """Every flag and --save's path, before the scenario is read or anything trained."""
    from islands.io import check_output, refuse_shared_paths

    if args.grid and args.profile:
        raise UserError("--grid measures a profile and --profile reads one: give one of them")
    if args.save and not args.grid:
        raise UserError("--save writes the profile that --grid measures: add --grid")
    if args.tune_outer_lr and not args.grid:
        raise UserError("--tune-outer-lr tunes the runs that --grid trains: add --grid")
    if args.steps is not None and not args.grid:
        raise UserError("--steps is the length of each --grid run: add --grid")
    if args.steps is not None and not 1 <= args.steps <= MAX_STEPS:
        raise UserError(
            f"--steps {args.steps}: must be 1 to {MAX_STEPS} (every grid point trains this many steps)"
        )
    if args.grid:
        from islands.analysis.quality.quality_runs import parse_grid

        parse_grid(args.grid)
    if args.save:
        refuse_shared_paths({"--save": args.save}, {"the scenario": args.scenario})
        check_output(args.save, ("json",))


def run(args: argparse.Namespace) -> int:
    from islands.analysis.progress_bar import ProgressBar
    from islands.analysis.quality.loss_prior import estimate
    from islands.analysis.quality.quality_profile import QualityProfile
    from islands.io import write_text
    from islands.schedules import SCHEDULES

    check_arguments(args)
    scenario = read_source(args).scenario
    profile = None
    if args.grid:
        from islands.analysis.quality.quality_runs import check_dense, measure_profile, parse_grid

        check_dense(scenario)
        bar = ProgressBar("quality: runs trained")
        try:
            profile = measure_profile(
                args.scenario,
                args.overrides,
                parse_grid(args.grid),
                args.steps,
                args.tune_outer_lr,
                bar,
            )
        finally:
            bar.close()  # the bar's line ends before any error
        if args.save:
            write_text(args.save, profile.to_json())
    elif args.profile:
        profile = QualityProfile.read(args.profile)
    estimates = {name: estimate(scenario, name, profile) for name in SCHEDULES}
    if args.json:
        print(json_document(scenario, estimates, profile))
        return 0
    print(text(scenario, estimates, profile, SCHEDULES))
    if args.save:
        print(f"wrote {args.save}")
    return 0


def json_document(scenario, estimates, profile) -> str:
    from dataclasses import asdict

    from islands.io import json_text

    return json_text(
        {
            "scenario": scenario.name,
            "parameters": scenario.model.parameters,
            "workers": scenario.worker_count,
            "schedules": {
                name: {
                    "loss": e.loss,
                    "relative_to_dp": e.relative_to_dp,
                    "tokens_to_dp_loss": tokens_factor(scenario, e),
                    "notes": list(e.notes),
                }
                for name, e in estimates.items()
            },
            "profile": None
            if profile is None
            else [{**asdict(p), "relative_to_dp": p.relative_to_dp} for p in profile.points],
        }
    )


def text(scenario, estimates, profile, schedules) -> str:
    source = (
        "the published tables" if profile is None else "the measured profile where it has points"
    )
    lines = []
    if profile is not None:
        lines.append(
            f"measured on {profile.scenario}'s model ({profile.model_parameters:,} parameters), "
            "final eval loss against DDP's after the same inner steps:"
        )
        for p in profile.points:
            tuned = "" if p.outer_lr is None else f"  (outer lr {p.outer_lr:g} won)"
            mark = f"  [{p.regime_mark()}]" if p.regime_mark() else ""
            lines.append(
                f"  H {p.inner_steps:>4}  M {p.workers:>2}  bits {p.bits:>2}  P {p.fragments:>2}  "
                f"{p.algorithm}: {p.eval_loss:.4f} against {p.ddp_eval_loss:.4f}  "
                f"{100 * p.relative_to_dp:+.2f}%{tuned}{mark}"
            )
        lines.append("")
    lines.append(
        f"{scenario.name}: {scenario.model.parameters:.3g} parameters, {scenario.worker_count} workers; "
        f"evaluation loss at equal tokens (the papers' C4 set-up), by {source}"
    )
    width = max(len(schedules[name].label) for name in estimates)
    for name, e in estimates.items():
        factor = tokens_factor(scenario, e)
        tokens = (
            "unreachable by more tokens"
            if factor is None
            else f"x{factor:.2f} tokens to DDP's loss"
        )
        lines.append(
            f"  {schedules[name].label:<{width}}  {e.loss:.4f}  {100 * e.relative_to_dp:+.2f}% vs DDP  {tokens}"
        )
        lines.extend(f"  {'':<{width}}    {note}" for note in e.notes)
    return "\n".join(lines)


def tokens_factor(scenario, estimate) -> float | None:
    """D' / D to reach DDP's loss (``loss_prior.extra_tokens_factor``); None where no D' does."""
    from islands.analysis.quality.loss_prior import extra_tokens_factor

    factor = extra_tokens_factor(scenario.model.parameters, estimate.relative_to_dp)
    return factor if is_finite_number(factor) else None
