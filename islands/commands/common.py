"""Arguments that several subcommands share."""

from __future__ import annotations

import argparse


def add_scenario_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", metavar="FILE",
                        help="scenario TOML file, or the name of a bundled scenario (e.g. worked-example)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a scenario key, e.g. schedule.inner_steps=100 or "
                             "island.0.bandwidth_gbps=10 (island.* sets every island); repeatable")
