"""``islands plan FILE --target-utilisation 0.95``: the bandwidth, H, fragments and precision a target needs,
found by searching the simulator. ``--objective time-to-loss`` (or ``cost``) also prices loss: the schedule,
H and wire precision that reach DDP's loss soonest (or most cheaply, from ``island.cost_per_hour``)."""

from __future__ import annotations

import argparse
import json
from concurrent.futures import Executor
from dataclasses import replace
from pathlib import Path

from islands.analysis.parallel import default_jobs
from islands.analysis.planner.objective import (
    OBJECTIVES,
    ObjectivePlan,
    check_objective,
    make_objective_plan,
    objective_to_dict,
)
from islands.analysis.planner.objective_tables import objective_table, why
from islands.analysis.planner.plan import (
    DEFAULT_TARGETS,
    Plan,
    make_utilisation_plan,
    plan_to_dict,
    seed_range,
)
from islands.analysis.planner.plan_tables import headline, plan_tables
from islands.analysis.progress_bar import ProgressBar
from islands.analysis.quality.quality_profile import QualityProfile
from islands.errors import UserError
from islands.scenarios import ScenarioSource

from .common import (
    add_dask_argument,
    add_max_events_argument,
    add_network_profile_argument,
    add_scenario_arguments,
    check_max_events,
    dask_executor,
    read_source,
)


def comma_floats(example: str):
    """An argparse type: numbers separated by commas, the error naming ``example``."""

    def parse(text: str) -> tuple[float, ...]:
        try:
            return tuple(float(part) for part in text.split(","))
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {example} (got {text!r})") from None

    return parse


fractions = comma_floats("fractions like 0.5,0.9,0.99")
density_fractions = comma_floats("fractions of schedule.chunk_values like 0.0156,0.03")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "plan",
        help="find the bandwidth, H, fragments and precision for a target utilisation",
        description=__doc__,
    )
    add_scenario_arguments(parser)
    add_network_profile_argument(parser)
    parser.add_argument(
        "--target-utilisation",
        type=float,
        default=0.95,
        metavar="FRACTION",
        help="compute utilisation to reach, in (0, 1] (default 0.95)",
    )
    parser.add_argument(
        "--targets",
        type=fractions,
        default=DEFAULT_TARGETS,
        metavar="F1,F2,...",
        help="utilisations for the bandwidth table (default "
        f"{','.join(f'{t:g}' for t in DEFAULT_TARGETS)})",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        default=1,
        metavar="N",
        help="average every utilisation over N seeds (for jitter and churn; default 1)",
    )
    parser.add_argument(
        "--no-fragments",
        dest="fragments",
        action="store_false",
        help="skip the fragments x precision search (the slowest part)",
    )
    parser.add_argument(
        "--densities",
        type=density_fractions,
        default=None,
        metavar="F1,F2,...",
        help="top-k densities to search, fractions of schedule.chunk_values (schedule.compression = "
        '"topk" only; default 1/4 to 1/256 of the chunk and the scenario\'s own)',
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        metavar="N",
        help=f"worker processes (default: every core, here {default_jobs()})",
    )
    parser.add_argument(
        "--objective",
        choices=OBJECTIVES,
        default="utilisation",
        help="utilisation (default): the searches above; time-to-loss / cost: also the schedule, H "
        "and wire precision reaching DDP's loss soonest / most cheaply (island.cost_per_hour)",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        metavar="FILE",
        help="with --objective: a quality profile from `islands quality --save` (default: the "
        "published prior)",
    )
    parser.add_argument("--json", action="store_true", help="print the plan as one JSON object")
    add_dask_argument(parser)
    add_max_events_argument(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.jobs is not None and args.jobs < 1:
        raise UserError(f"--jobs must be >= 1 (got {args.jobs})")
    check_max_events(args.max_events)
    source = replace(read_source(args), max_events=args.max_events)
    check_objective(args.objective, source.scenario)
    if args.profile is not None and args.objective == "utilisation":
        raise UserError("--profile prices loss: it goes with --objective time-to-loss or cost")
    profile = QualityProfile.read(args.profile) if args.profile is not None else None
    with dask_executor(args.dask) as executor:
        bar = ProgressBar("plan: searches")
        try:
            plan = make_utilisation_plan(
                source,
                args.target_utilisation,
                args.targets,
                fragments=args.fragments,
                seeds=args.seeds,
                executor=executor,
                jobs=args.jobs,
                progress=bar,
                max_events=args.max_events,
                densities=args.densities,
            )
        finally:
            bar.close()
        utilisation_h = {
            a: int(found.value) for a, found in plan.inner_steps.items() if found.value is not None
        }
        priced = (
            None
            if args.objective == "utilisation"
            else price_candidates(args, source, plan, utilisation_h, profile, executor)
        )
    if args.json:
        document = plan_to_dict(plan)
        if priced is not None:
            document["objective"] = objective_to_dict(priced)
        print(json.dumps(document, indent=2, allow_nan=False))
        return 0
    print_plan(plan, bar.elapsed_s)
    if priced is not None:
        print()
        print(objective_table(priced, utilisation_h).text())
        print()
        print(why(priced, utilisation_h))
    return 0


def price_candidates(
    args: argparse.Namespace,
    source: ScenarioSource,
    plan: Plan,
    utilisation_h: dict[str, int],
    profile: QualityProfile | None,
    executor: Executor | None,
) -> ObjectivePlan:
    """The loss-aware search: every (schedule, H, bits) priced, with the utilisation plan's H among them."""
    bar = ProgressBar("plan: candidates priced")
    try:
        return make_objective_plan(
            source,
            args.objective,
            tuple(plan.bandwidth),
            utilisation_h,
            profile,
            seed_range(plan.scenario, args.seeds),
            executor=executor,
            jobs=args.jobs,
            progress=bar,
        )
    finally:
        bar.close()


def print_plan(plan: Plan, elapsed_s: float) -> None:
    scenario = plan.scenario
    seeds = f", utilisation averaged over {plan.seeds} seeds" if plan.seeds > 1 else ""
    print(
        f"Plan for {scenario.name}: {scenario.worker_count} workers, {scenario.schedule.bits}-bit wire, "
        f"{plan.runs} simulated runs in {elapsed_s:.1f} s{seeds}"
    )
    print(headline(plan))
    for table in plan_tables(plan):
        print()
        print(table.text())
