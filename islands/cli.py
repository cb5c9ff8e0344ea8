"""The ``islands`` command: a thin layer over the Python API, one module per subcommand.

Each module in ``islands.commands`` provides ``add_parser(subparsers)``, which registers its
arguments and sets ``handler``. Modules import heavy dependencies (torch, matplotlib) inside their
handlers, so ``islands simulate`` does not pay for the trainer.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from .errors import UserError

COMMANDS = ("simulate", "demo")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="islands", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"islands.commands.{name}").add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args) or 0
    except UserError as exc:
        print(f"islands {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"islands {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
