"""``islands serve [SCENARIO] [--port N]``: the live planning page. A local web server whose page shows
the scenario's keys as controls (sliders with typed boxes, menus, the islands as rows); every change
re-simulates it with the simulator itself, as ``islands simulate --set ...`` would, and redraws its
figures, the schedules side by side, the plots, the loss estimate and the bandwidth a target needs.
The page saves the edited scenario as TOML and writes its static report. It fetches nothing from the
network. Stop it with Ctrl-C. See docs/how-to/serve.md."""

from __future__ import annotations

import argparse
import errno
import socket

from islands.errors import UserError

from .common import add_max_events_argument, check_max_events

DEFAULT_PORT = 8765
DEFAULT_HOST = "127.0.0.1"
MAX_PORT = 65535


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve", help="a live planning page: every change re-simulated", description=__doc__
    )
    parser.add_argument(
        "scenario",
        metavar="SCENARIO",
        nargs="?",
        default="worked-example",
        help="scenario TOML file, or the name of a bundled scenario (default worked-example)",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a scenario key before the page opens (as islands simulate --set); repeatable",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        metavar="N",
        help=f"port to listen on (default {DEFAULT_PORT}; 0: any free port)",
    )
    parser.add_argument(
        "--host",
        default=DEFAULT_HOST,
        metavar="ADDRESS",
        help=f"address to listen on (default {DEFAULT_HOST}: this machine only; the page runs "
        "simulations for whoever reaches it)",
    )
    add_max_events_argument(parser)
    parser.set_defaults(handler=run)


def check_port(port: int) -> int:
    if not 0 <= port <= MAX_PORT:
        raise UserError(f"--port {port}: must be in [0, {MAX_PORT}] (0: any free port)")
    return port


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` and listening, or one line saying why it cannot be."""
    try:
        address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError) as error:
        raise UserError(f"--host {host}: not an address of this machine ({error})") from None
    sock = socket.socket(address[0], socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address[4])
        sock.listen()
    except OSError as error:
        sock.close()
        if error.errno == errno.EADDRINUSE:
            raise UserError(
                f"--port {port}: already in use on {host} (choose another, or --port 0 for any free one)"
            ) from None
        raise UserError(
            f"--host {host} --port {port}: cannot listen there ({error.strerror})"
        ) from None
    return sock


def address_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/"


def run(args: argparse.Namespace) -> int:
    check_port(args.port)
    check_max_events(args.max_events)
    from islands.analysis.live.server import serve
    from islands.analysis.live.session import Session

    session = Session.start(args.scenario, args.overrides, args.max_events)
    sock = listening_socket(args.host, args.port)
    line = f"serving {args.scenario} at {address_of(sock)} (Ctrl-C to stop)"
    try:
        serve(session, sock, lambda: print(line, flush=True))
    except KeyboardInterrupt:  # Ctrl-C is how a server is stopped: no error
        pass
    return 0
