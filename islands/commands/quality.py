"""``islands quality FILE``: what each schedule costs in evaluation loss at equal tokens, by the prior.

The prior (``islands.analysis.loss_prior``) reads the published tables: the DiLoCo scaling laws for
model size and replicas (at H = 30), the eager-updates paper for fragments, overlap and the eager
update. For the scenario's model size and workers it prints, per schedule, the predicted evaluation
loss (on the papers' C4 set-up) and the difference from data parallelism, with a note on every
setting the tables do not cover (H other than 30, tau above 1, more than 8 replicas, an update rule
no table measured). ``--json`` prints the same as one object.
"""

from __future__ import annotations

import argparse


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("quality", description=__doc__,
                                   help="each schedule's evaluation loss at equal tokens, from the published tables")
    parser.add_argument("scenario", metavar="FILE", help="scenario TOML file or bundled name")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a scenario key, e.g. schedule.inner_steps=30")
    parser.add_argument("--json", action="store_true", help="print the estimates as one JSON object")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from islands.analysis.loss_prior import estimate
    from islands.io import json_text
    from islands.scenarios import load
    from islands.schedules import SCHEDULES

    scenario = load(args.scenario, args.overrides)
    estimates = {name: estimate(scenario, name) for name in SCHEDULES}
    if args.json:
        print(json_text({"scenario": scenario.name, "parameters": scenario.model.parameters,
                         "workers": scenario.worker_count,
                         "schedules": {name: {"loss": e.loss, "relative_to_dp": e.relative_to_dp,
                                              "notes": list(e.notes)} for name, e in estimates.items()}}))
        return 0
    print(f"{scenario.name}: {scenario.model.parameters:.3g} parameters, {scenario.worker_count} workers; "
          "evaluation loss at equal tokens (the papers' C4 set-up), by the published tables")
    width = max(len(SCHEDULES[name].label) for name in estimates)
    for name, e in estimates.items():
        print(f"  {SCHEDULES[name].label:<{width}}  {e.loss:.4f}  {100 * e.relative_to_dp:+.2f}% vs DDP")
        for note in e.notes:
            print(f"  {'':<{width}}    {note}")
    return 0
