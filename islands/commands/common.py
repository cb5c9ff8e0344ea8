"""Arguments that several subcommands share."""

from __future__ import annotations

import argparse
import contextlib
import socket
import struct
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Executor
from pathlib import Path

from islands.errors import UserError
from islands.simulator import DEFAULT_MAX_EVENTS

DASK_CONNECT_TIMEOUT_S = 5
DASK_GREETING = struct.Struct(
    "<Q"
)  # a scheduler's first frame on a new connection opens with its length
MAX_DASK_GREETING_BYTES = 2**20  # its handshake is a few hundred bytes


def path_text(text: str) -> str:
    """An argparse ``type`` for a path: refuses an empty one, which would name the current folder."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty: give a path")
    return text


def path_value(text: str) -> Path:
    """``path_text`` as a ``Path``."""
    return Path(path_text(text))


def add_scenario_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "scenario",
        metavar="FILE",
        help="scenario TOML file, or the name of a bundled scenario (e.g. worked-example)",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a scenario key, e.g. schedule.inner_steps=100 or "
        "island.0.bandwidth_gbps=10 (island.* sets every island); repeatable",
    )


def add_network_profile_argument(parser: argparse.ArgumentParser) -> None:
    """``--network-profile``, shared by simulate, sweep, plan and report."""
    parser.add_argument(
        "--network-profile",
        metavar="FILE",
        default=None,
        help="a network profile written by islands calibrate: every island's links, the round "
        "trips between them and the exchange's costs as measured (islands named after the "
        "hosts); --set applies on top",
    )


def read_source(args: argparse.Namespace):
    """The scenario of ``args`` as a ``ScenarioSource``, with ``--network-profile`` where given: the
    one way every command reads its scenario."""
    from islands.scenarios import ScenarioSource

    source = ScenarioSource.read(args.scenario, args.overrides)
    profile = getattr(args, "network_profile", None)
    return source.with_network_profile(profile) if profile else source


def add_max_events_argument(parser: argparse.ArgumentParser) -> None:
    """``--max-events``, shared by simulate, sweep and plan."""
    parser.add_argument(
        "--max-events",
        type=float,
        default=DEFAULT_MAX_EVENTS,
        metavar="N",
        help="refuse a run estimated to need more simulator events than this, and stop one "
        f"that passes it (default {DEFAULT_MAX_EVENTS:.0e}; memory grows about 1 kB "
        "per event; see docs/limits.md)",
    )


def add_dask_argument(parser: argparse.ArgumentParser) -> None:
    """``--dask``, shared by sweep, plan and report."""
    parser.add_argument(
        "--dask",
        default=None,
        metavar="ADDRESS",
        help="run the simulations on a Dask cluster: its scheduler's address (tcp://HOST:8786), "
        "or 'local' for a cluster of this machine's cores; needs pip install 'islands[dask]'",
    )


@contextlib.contextmanager
def dask_executor(address: str | None) -> Iterator[Executor | None]:
    """A ``concurrent.futures`` executor on the Dask cluster at ``address`` ('local': one started here,
    a worker process per core), or None (the local process pool) without one."""
    if address is None:
        yield None
        return
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise UserError(
            "--dask needs the distributed package: pip install 'islands[dask]'"
        ) from None
    with contextlib.ExitStack() as stack:
        if address == "local":
            cluster = stack.enter_context(
                LocalCluster(threads_per_worker=1, dashboard_address=None)
            )
            client = stack.enter_context(Client(cluster))
        else:
            probe_dask_scheduler(address, DASK_CONNECT_TIMEOUT_S)
            try:
                client = stack.enter_context(Client(address, timeout=DASK_CONNECT_TIMEOUT_S))
            except (OSError, TimeoutError, ValueError) as error:
                raise UserError(
                    f"--dask {address}: cannot reach a Dask scheduler there ({error})"
                ) from None
        yield client.get_executor()


def probe_dask_scheduler(address: str, timeout_s: float) -> None:
    """Refuse, in one line, a TCP address where no Dask scheduler listens: a closed port, a port that
    says nothing for ``timeout_s``, or one that speaks another protocol (an HTTP server). A scheduler
    greets every new connection with its handshake, whose first 8 bytes give its length; Dask's own
    client would take an HTTP reply's first bytes for that length and try to allocate exabytes."""
    from distributed.comm.addressing import parse_address, parse_host_port

    try:
        scheme, location = parse_address(address)
        host, port = parse_host_port(location)
    except ValueError as error:
        raise UserError(
            f"--dask {address}: not a scheduler address like tcp://HOST:8786 ({error})"
        ) from None
    if (
        scheme != "tcp"
    ):  # tls:// needs certificates (a Security object) that islands does not configure
        raise UserError(
            f"--dask {address}: islands connects to tcp:// schedulers only ({scheme}:// is not "
            "supported): give tcp://HOST:PORT (a TLS scheduler through an SSH tunnel) or 'local'"
        )
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as connection:
            greeting = connection.recv(DASK_GREETING.size, socket.MSG_WAITALL)
    except TimeoutError:
        raise UserError(
            f"--dask {address}: no Dask scheduler answered within {timeout_s:g} s"
        ) from None
    except OSError as error:
        raise UserError(
            f"--dask {address}: cannot reach a Dask scheduler there ({error.strerror or error})"
        ) from None
    if (
        len(greeting) < DASK_GREETING.size
        or DASK_GREETING.unpack(greeting)[0] > MAX_DASK_GREETING_BYTES
    ):
        raise UserError(
            f"--dask {address}: something answers there, but not a Dask scheduler "
            f"(it began with {greeting!r})"
        )


def check_outputs(
    outputs: dict[str, str | None], formats: Sequence[str], inputs: Iterable[tuple[str, str]] = ()
) -> None:
    """Before any work: each output given (name -> path) has a format of ``formats`` and a writable
    folder, and none is an input (``inputs``: (what, path) pairs) or another output."""
    from islands.io import check_output, refuse_shared_paths

    refuse_shared_paths(outputs, dict(inputs))
    for path in outputs.values():
        if path is not None:
            check_output(path, formats)


def check_max_events(max_events: float) -> float:
    if not max_events >= 1:
        raise UserError(f"--max-events must be >= 1 (got {max_events:g})")
    return max_events


def print_table(label: str, build, text, output: str | None) -> None:
    """Build a table with a progress bar (``build(progress)``), print ``text(table)``, and write it to
    ``output`` (.csv, .parquet or .json) when given: the published-table commands' common ending."""
    from islands.analysis.progress_bar import ProgressBar
    from islands.io import write_table

    bar = ProgressBar(label)
    try:
        table = build(bar)
    finally:
        bar.close()
    print(text(table))
    if output:
        write_table(table, output)
        print(f"wrote {output}")
