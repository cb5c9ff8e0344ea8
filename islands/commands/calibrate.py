"""``islands calibrate --out profile.json``: measure a network profile among real hosts, or among the
islands of a scenario over the emulated WAN, for ``--network-profile`` (simulate, plan, sweep, report).

On real hosts, one process per host under torchrun (each host named after its island):

    torchrun --nnodes 3 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint HOST0:29500 \\
        -m islands calibrate --out profile.json --name us-dc

On this machine, ``--emulate FILE``: one process per island of FILE (one worker each, as the scaled
scenarios of ``islands validate`` are), each in its own network namespace with its link shaped by
tc tbf as root, or paced in-process otherwise. It measures each pair's round trip and rate and the
trainer's own exchange among all of them (``validation/hostprobe.py``).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from islands.errors import UserError

from .common import path_text

MAX_HOSTS = 8


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("calibrate", help="measure a network profile among hosts (or emulated islands)",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=path_text, metavar="JSON", help="where to write the profile")
    parser.add_argument("--name", default=None, help="under torchrun: this host's name, its island's (default: "
                                                     "the host name)")
    parser.add_argument("--emulate", metavar="FILE", default=None, type=path_text,
                        help="measure the islands of this scenario over the emulated WAN on this machine")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="with --emulate: override a scenario key; repeatable")
    parser.add_argument("--in-process", action="store_true",
                        help="with --emulate: shape in-process even where kernel htb is available")
    parser.set_defaults(handler=run)


def check_arguments(args: argparse.Namespace) -> None:
    """Every flag and the output, before anything is measured: the profile is written only at the
    end, so an unwritable --out would otherwise fail after the whole measurement."""
    from islands.io import check_output, output_format, refuse_shared_paths

    if args.emulate is None and (args.overrides or args.in_process):
        raise UserError(f"{'--set' if args.overrides else '--in-process'} goes with --emulate FILE")
    if args.emulate is not None and args.name is not None:
        raise UserError("--name names a real host under torchrun; with --emulate the hosts are the scenario's islands")
    if args.name is not None and not args.name.strip():
        raise UserError("--name is empty: give this host's island name")
    refuse_shared_paths({"--out": args.out}, {"--emulate": args.emulate})
    if os.environ.get("RANK", "0") == "0":  # rank 0 writes the profile; the other hosts only check its name
        check_output(args.out, ("json",))
    else:
        output_format(args.out, ("json",))


def run(args: argparse.Namespace) -> int:
    check_arguments(args)
    out = Path(args.out)
    if args.emulate is None:
        if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
            raise UserError("calibrate measures among hosts: run it under torchrun, one process per host, or give "
                            "--emulate FILE to measure a scenario's islands over the emulated WAN here")
        from islands.validation.hostprobe import main as measure
        measure(["--out", str(out), *(["--name", args.name] if args.name else [])])
        return 0
    emulate(emulated_scenario(args.emulate, args.overrides), out, kernel=False if args.in_process else None)
    print(f"wrote {out}")
    return 0


def emulated_scenario(scenario_file: str, overrides: list[str]):
    """The scenario --emulate names, refused unless each of its 2 to 8 islands is one worker."""
    from islands.scenarios import ScenarioSource

    scenario = ScenarioSource.read(scenario_file, overrides).scenario
    crowded = [f"island.{i}.replicas" for i, island in enumerate(scenario.islands) if island.replicas != 1]
    if crowded:
        raise UserError(f"{scenario_file}: {crowded[0]}: calibrate --emulate runs one host per island: give each "
                        "worker an island of its own (islands validate's scaled scenarios do)")
    if not 2 <= len(scenario.islands) <= MAX_HOSTS:
        raise UserError(f"{scenario_file}: island: calibrate --emulate runs 2 to {MAX_HOSTS} islands on this "
                        f"machine (got {len(scenario.islands)})")
    return scenario


def emulate(scenario, out: Path, kernel: bool | None) -> None:
    """Measure the profile among the scenario's islands, one process each, over the emulated WAN."""
    from islands.emulation import links_from_workers, open_wan
    from islands.validation.hostprobe import LABEL_VARIABLE, NAMES_VARIABLE
    from islands.validation.run import run_all, start_ranks

    names = [island.name for island in scenario.islands]
    with open_wan(links_from_workers(scenario.workers()), prefix="islandscal", kernel=kernel) as wan:
        label = f"{scenario.name} over the emulated WAN ({wan.label})"
        children = start_ranks(wan, ["-m", "islands.validation.hostprobe", "--out", str(out.resolve())],
                               len(names), extra_env={NAMES_VARIABLE: json.dumps(names), LABEL_VARIABLE: label})
        run_all(children, "the calibration")
