"""``islands plan FILE --target-utilisation 0.95``: the bandwidth, H, fragments and precision a target needs,
found by searching the simulator."""

from __future__ import annotations

import argparse
import json

from islands.analysis.parallel import default_jobs
from islands.analysis.plan import DEFAULT_TARGETS, make_plan, plan_to_dict
from islands.analysis.plan_tables import headline, plan_tables
from islands.analysis.progress import ProgressBar
from islands.analysis.scenario_source import ScenarioSource
from islands.errors import UserError

from .common import add_max_events_argument, add_scenario_arguments, check_max_events


def fractions(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected fractions like 0.5,0.9,0.99 (got {text!r})") from None


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("plan", help="find the bandwidth, H, fragments and precision for a target "
                                                "utilisation", description=__doc__)
    add_scenario_arguments(parser)
    parser.add_argument("--target-utilisation", type=float, default=0.95, metavar="FRACTION",
                        help="compute utilisation to reach, in (0, 1] (default 0.95)")
    parser.add_argument("--targets", type=fractions, default=DEFAULT_TARGETS, metavar="F1,F2,...",
                        help="utilisations for the bandwidth table (default "
                             f"{','.join(f'{t:g}' for t in DEFAULT_TARGETS)})")
    parser.add_argument("--seeds", type=int, default=1, metavar="N",
                        help="average every utilisation over N seeds (for jitter and churn; default 1)")
    parser.add_argument("--no-fragments", dest="fragments", action="store_false",
                        help="skip the fragments x precision search (the slowest part)")
    parser.add_argument("--jobs", type=int, default=None, metavar="N",
                        help=f"worker processes (default: every core, here {default_jobs()})")
    parser.add_argument("--json", action="store_true", help="print the plan as one JSON object")
    add_max_events_argument(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.jobs is not None and args.jobs < 1:
        raise UserError(f"--jobs must be >= 1 (got {args.jobs})")
    check_max_events(args.max_events)
    source = ScenarioSource.read(args.scenario, args.overrides)
    bar = ProgressBar("plan: searches")
    try:
        plan = make_plan(source, args.target_utilisation, args.targets, fragments=args.fragments,
                         seeds=args.seeds, jobs=args.jobs, progress=bar, max_events=args.max_events)
    finally:
        bar.close()
    if args.json:
        print(json.dumps(plan_to_dict(plan), indent=2, allow_nan=False))
        return 0
    scenario = plan.scenario
    seeds = f", utilisation averaged over {plan.seeds} seeds" if plan.seeds > 1 else ""
    print(f"Plan for {scenario.name}: {scenario.worker_count} workers, {scenario.schedule.bits}-bit wire, "
          f"{plan.runs} simulated runs in {bar.elapsed_s:.1f} s{seeds}")
    print(headline(plan))
    for table in plan_tables(plan):
        print()
        print(table.text())
    return 0
