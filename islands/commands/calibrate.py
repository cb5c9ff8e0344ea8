"""``islands calibrate --out profile.json``: measure a network profile among real hosts, or among the
islands of a scenario over the emulated WAN, for ``--network-profile`` (simulate, plan, sweep, report).

On real hosts, one process per host under torchrun (each host named after its island):

    torchrun --nnodes 3 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint HOST0:29500 \\
        -m islands calibrate --out profile.json --name us-dc

On this machine, ``--emulate FILE``: one process per island of FILE (one worker each, as the scaled
scenarios of ``islands validate`` are), each in its own network namespace with its link shaped by
tc tbf as root, or paced in-process otherwise. It measures each pair's round trip and rate and the
trainer's own exchange among all of them (``validation/hostprobe.py``).

From files measured on your own hosts, with no islands on them (``validation/toolfiles/hosts_profile.py``):

    islands calibrate --out profile.json --host a=10.0.0.1 --host b=10.0.0.2,198.51.100.7 \
        --iperf3 iperf3/*.json --ping a:b=ping-a-b.txt --nccl-tests all_reduce.txt

``--host`` names each host after its island with every address it appears under in the iperf3 files;
``--iperf3`` takes clients' ``iperf3 -J`` files (-R, --bidir and -P read as such); ``--ping A:B=FILE``
a pair's ping output (else iperf3's TCP round trip, taken under load); ``--nccl-tests`` an
``all_reduce_perf`` or ``all_gather_perf`` run among all the hosts (``--nccl-ranks`` where its output
does not say how many ranks). ``--egress-queue fifo`` says the hosts' egress is one FIFO queue (tc tbf)
``--queue-ms`` deep, which the collective ran through with ``--streams`` TCP connections per host
under ``--tcp-congestion-control``: the profile then prices it (``network.egress_queue = "fifo"``).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from islands.errors import UserError
from islands.scenarios.spec import CONGESTION_CONTROLS, EGRESS_QUEUES

from .common import path_text

MAX_HOSTS = 8
DEFAULT_QUEUE_MS = 200.0  # as islands validate --shaper fifo's --queue-ms and network.fifo_queue_ms


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "calibrate",
        help="measure a network profile among hosts (or emulated islands)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--out", required=True, type=path_text, metavar="JSON", help="where to write the profile"
    )
    parser.add_argument(
        "--name",
        default=None,
        help="under torchrun: this host's name, its island's (default: the host name)",
    )
    parser.add_argument(
        "--emulate",
        metavar="FILE",
        default=None,
        type=path_text,
        help="measure the islands of this scenario over the emulated WAN on this machine",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="with --emulate: override a scenario key; repeatable",
    )
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="with --emulate: shape in-process even where kernel htb is available",
    )
    files = parser.add_argument_group("from your own tools' files (no islands on the hosts)")
    files.add_argument(
        "--host",
        dest="hosts",
        action="append",
        default=[],
        metavar="NAME=ADDRESS[,ADDRESS...]",
        help="a host, named after its island, and every address it has in the iperf3 files; repeatable",
    )
    files.add_argument(
        "--iperf3",
        action="extend",
        nargs="+",
        default=[],
        type=path_text,
        metavar="FILE",
        help="clients' iperf3 -J files, one pair of hosts each (-R, --bidir, -P)",
    )
    files.add_argument(
        "--ping",
        dest="pings",
        action="append",
        default=[],
        metavar="A:B=FILE",
        help="ping output between hosts A and B; repeatable (default: iperf3's TCP round trip)",
    )
    files.add_argument(
        "--nccl-tests",
        default=None,
        type=path_text,
        metavar="FILE",
        help="all_reduce_perf or all_gather_perf output, run among all the hosts",
    )
    files.add_argument(
        "--nccl-ranks",
        type=int,
        default=None,
        metavar="N",
        help="its ranks, where its output has no Rank or nranks lines",
    )
    files.add_argument(
        "--egress-queue",
        choices=EGRESS_QUEUES,
        default=None,
        help='"fifo": each host\'s egress is one FIFO queue (tc tbf), which the profile prices',
    )
    files.add_argument(
        "--queue-ms",
        type=float,
        default=None,
        metavar="MS",
        help=f"with --egress-queue fifo: its depth, tc tbf's latency (default {DEFAULT_QUEUE_MS:g})",
    )
    files.add_argument(
        "--streams",
        type=int,
        default=None,
        metavar="N",
        help="with --egress-queue fifo: TCP connections each host sent through it at once in the "
        "collective (NCCL: channels x NCCL_NSOCKS_PERTHREAD x NCCL_SOCKET_NTHREADS; default 1)",
    )
    files.add_argument(
        "--tcp-congestion-control",
        choices=CONGESTION_CONTROLS,
        default=None,
        help="with --egress-queue fifo: the hosts' TCP (default cubic)",
    )
    parser.set_defaults(handler=run)


FIFO_FLAGS = {
    "queue_ms": "--queue-ms",
    "streams": "--streams",
    "tcp_congestion_control": "--tcp-congestion-control",
}
FILE_FLAGS = {
    "iperf3": "--iperf3",
    "pings": "--ping",
    "nccl_tests": "--nccl-tests",
    "nccl_ranks": "--nccl-ranks",
    "hosts": "--host",
    "egress_queue": "--egress-queue",
    **FIFO_FLAGS,
}
MEASURING_FLAGS = {
    "emulate": "--emulate",
    "overrides": "--set",
    "in_process": "--in-process",
    "name": "--name",
}


def given_flags(args: argparse.Namespace, flags: dict[str, str]) -> list[str]:
    return [flag for key, flag in flags.items() if getattr(args, key) not in (None, [], False)]


def tool_files(args: argparse.Namespace):
    """The files to read and the hosts they name (``hosts_profile.ToolFiles``), every flag checked."""
    from islands.validation.toolfiles.hosts_profile import ToolFiles

    measuring = given_flags(args, MEASURING_FLAGS)
    if measuring:
        raise UserError(
            f"{measuring[0]} measures with islands on the hosts; {given_flags(args, FILE_FLAGS)[0]} reads "
            "files measured without it: give one or the other"
        )
    if not args.iperf3:
        raise UserError(
            f"{given_flags(args, FILE_FLAGS)[0]} needs --iperf3 FILE...: the hosts' rates come from "
            "iperf3 files"
        )
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        raise UserError(
            "--iperf3 reads files measured on the hosts: run it once, not under torchrun"
        )
    if args.nccl_ranks is not None and (args.nccl_tests is None or args.nccl_ranks < 2):
        raise UserError(
            f"--nccl-ranks {args.nccl_ranks}: "
            + (
                "goes with --nccl-tests FILE"
                if args.nccl_tests is None
                else "a collective has at least 2 ranks"
            )
        )
    fifo = fifo_egress(args)
    hosts = host_addresses(args.hosts)
    pings = tuple(ping_pair(text, hosts) for text in args.pings)
    twice = next(
        (
            pair
            for index, pair in enumerate(pings)
            if {*pair[:2]} in [{*p[:2]} for p in pings[:index]]
        ),
        None,
    )
    if twice:
        raise UserError(f"--ping {twice[0]}:{twice[1]}: given twice; one ping file per pair")
    return ToolFiles(hosts, tuple(args.iperf3), pings, args.nccl_tests, args.nccl_ranks, fifo)


def fifo_egress(args: argparse.Namespace):
    """The hosts' FIFO (``profile.FifoEgress``) under --egress-queue fifo, each figure in its scenario
    key's range; its flags refused without it."""
    from islands.scenarios.profile import FifoEgress
    from islands.scenarios.spec import NETWORK_KEYS

    if args.egress_queue != "fifo":
        given = given_flags(args, FIFO_FLAGS)
        if given:
            raise UserError(
                f"{given[0]} describes one FIFO per egress: it goes with --egress-queue fifo"
            )
        return None
    queue_ms = DEFAULT_QUEUE_MS if args.queue_ms is None else args.queue_ms
    streams = 1 if args.streams is None else args.streams
    for flag, value, key in (
        ("--queue-ms", queue_ms, "fifo_queue_ms"),
        ("--streams", streams, "streams"),
    ):
        rule = NETWORK_KEYS[key].check
        problem = None if rule is None else rule(value)
        if problem or value != value:  # NaN passes every comparison
            raise UserError(f"{flag} {value:g}: {problem or 'must be a number'}")
    return FifoEgress(queue_ms, streams, args.tcp_congestion_control or "cubic")


def host_addresses(given: list[str]) -> dict[str, tuple[str, ...]]:
    """--host NAME=ADDRESS[,ADDRESS...]: at least two hosts, each named once, no address under two."""
    hosts: dict[str, tuple[str, ...]] = {}
    owner: dict[str, str] = {}
    for text in given:
        name, _, listed = text.partition("=")
        addresses = tuple(address.strip() for address in listed.split(","))
        if not name.strip() or not all(addresses):
            raise UserError(
                f"--host {text}: give NAME=ADDRESS[,ADDRESS...], a host's island name and its addresses"
            )
        if name in hosts:
            raise UserError(
                f"--host {name}: given twice; list all its addresses in one, comma-separated"
            )
        for address in addresses:
            key = address.lower().removeprefix("::ffff:")
            if key in owner:
                raise UserError(f"--host {name}: {address} is also --host {owner[key]}'s address")
            owner[key] = name
        hosts[name] = addresses
    if len(hosts) < 2:
        raise UserError("--host: name at least two hosts (NAME=ADDRESS), one per island")
    return hosts


def ping_pair(text: str, hosts: dict[str, tuple[str, ...]]) -> tuple[str, str, str]:
    """--ping A:B=FILE, A and B two hosts --host names."""
    pair, _, path = text.partition("=")
    a, _, b = pair.partition(":")
    if not path.strip() or not a or not b:
        raise UserError(
            f"--ping {text}: give A:B=FILE, two --host names and the ping output between them"
        )
    unknown = [name for name in (a, b) if name not in hosts]
    if unknown or a == b:
        raise UserError(
            f"--ping {text}: "
            + (
                f"{unknown[0]} is no --host name ({', '.join(hosts)})"
                if unknown
                else "a host and itself; name two hosts"
            )
        )
    return a, b, path


def check_arguments(args: argparse.Namespace):
    """Every flag and the output, before anything is measured: the profile is written only at the
    end, so an unwritable --out would otherwise fail after the whole measurement. Returns the tool
    files to read (``tool_files``), or None where calibrate measures."""
    from islands.io import check_output, output_format, refuse_shared_paths

    if given_flags(args, FILE_FLAGS):
        files = tool_files(args)
        refuse_shared_paths(
            {"--out": args.out},
            {
                **{f"--iperf3 {path}": path for path in files.iperf3},
                **{f"--ping {a}:{b}": path for a, b, path in files.pings},
                "--nccl-tests": files.nccl_tests,
            },
        )
        check_output(args.out, ("json",))
        return files
    if args.emulate is None and (args.overrides or args.in_process):
        raise UserError(f"{'--set' if args.overrides else '--in-process'} goes with --emulate FILE")
    if args.emulate is not None and args.name is not None:
        raise UserError(
            "--name names a real host under torchrun; with --emulate the hosts are the scenario's islands"
        )
    if args.name is not None and not args.name.strip():
        raise UserError("--name is empty: give this host's island name")
    refuse_shared_paths({"--out": args.out}, {"--emulate": args.emulate})
    if (
        os.environ.get("RANK", "0") == "0"
    ):  # rank 0 writes the profile; the other hosts only check its name
        check_output(args.out, ("json",))
    else:
        output_format(args.out, ("json",))
    return None


def run(args: argparse.Namespace) -> int:
    files = check_arguments(args)
    out = Path(args.out)
    if files is not None:
        from islands.validation.toolfiles.hosts_profile import profile_from_files

        profile, lines = profile_from_files(files)
        profile.save(out)
        print("\n".join([*lines, f"wrote {out}"]))
        return 0
    if args.emulate is None:
        if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
            raise UserError(
                "calibrate measures among hosts: run it under torchrun, one process per host, or give "
                "--emulate FILE to measure a scenario's islands over the emulated WAN here"
            )
        from islands.validation.hostprobe import main as measure

        measure(["--out", str(out), *(["--name", args.name] if args.name else [])])
        return 0
    emulate(
        emulated_scenario(args.emulate, args.overrides),
        out,
        kernel=False if args.in_process else None,
    )
    print(f"wrote {out}")
    return 0


def emulated_scenario(scenario_file: str, overrides: list[str]):
    """The scenario --emulate names, refused unless each of its 2 to 8 islands is one worker."""
    from islands.scenarios import ScenarioSource

    scenario = ScenarioSource.read(scenario_file, overrides).scenario
    crowded = [
        f"island.{i}.replicas" for i, island in enumerate(scenario.islands) if island.replicas != 1
    ]
    if crowded:
        raise UserError(
            f"{scenario_file}: {crowded[0]}: calibrate --emulate runs one host per island: give each "
            "worker an island of its own (islands validate's scaled scenarios do)"
        )
    if not 2 <= len(scenario.islands) <= MAX_HOSTS:
        raise UserError(
            f"{scenario_file}: island: calibrate --emulate runs 2 to {MAX_HOSTS} islands on this "
            f"machine (got {len(scenario.islands)})"
        )
    return scenario


def emulate(scenario, out: Path, kernel: bool | None) -> None:
    """Measure the profile among the scenario's islands, one process each, over the emulated WAN."""
    from islands.emulation import links_from_workers, open_wan
    from islands.validation.hostprobe import LABEL_VARIABLE, NAMES_VARIABLE
    from islands.validation.run import run_all, start_ranks

    names = [island.name for island in scenario.islands]
    with open_wan(
        links_from_workers(scenario.workers()), prefix="islandscal", kernel=kernel
    ) as wan:
        label = f"{scenario.name} over the emulated WAN ({wan.label})"
        children = start_ranks(
            wan,
            ["-m", "islands.validation.hostprobe", "--out", str(out.resolve())],
            len(names),
            extra_env={NAMES_VARIABLE: json.dumps(names), LABEL_VARIABLE: label},
        )
        run_all(children, "the calibration")
