"""islands: predict, then measure, DDP and the DiLoCo family across islands of compute.

The command is a thin layer over the Python API, one module per subcommand.

Each module in ``islands.commands`` (but ``common``) is a subcommand and provides
``add_parser(subparsers)``, which registers its arguments and sets ``handler``. Modules import heavy
dependencies (torch, matplotlib, pandas) inside their handlers, so ``islands simulate`` does not pay
for the trainer, nor ``islands plan`` for pandas.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from importlib import metadata

from . import __version__, commands
from .errors import UserError

HELPER_MODULES = {"common"}


def command_names() -> list[str]:
    """Every module of ``islands.commands`` is a subcommand, except shared helpers."""
    return sorted(
        m.name for m in pkgutil.iter_modules(commands.__path__) if m.name not in HELPER_MODULES
    )


def installed_version() -> str:
    """The version in the package metadata (pyproject.toml), or ``__version__`` when not installed."""
    try:
        return metadata.version("islands")
    except metadata.PackageNotFoundError:
        return __version__


class OneLineParser(argparse.ArgumentParser):
    """Bad usage answered in one line, as every other refusal (``islands train: error: argument
    --workers: invalid int value: 'two' (see islands train --help)``), exit code 2; its subcommands'
    parsers are of this class too."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="islands", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"islands {installed_version()}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in command_names():
        importlib.import_module(f"islands.commands.{name}").add_parser(subparsers)
    return parser


def refuse_empty_values(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """An empty argument (``--trace ""``, a FILE of ``""``) names nothing: refused in one line, never taken
    as the current folder or left unset."""
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    command = subparsers.choices[args.command]
    for action in command._actions:
        value = getattr(args, action.dest, None)
        if value == "" or (isinstance(value, list) and "" in value):
            command.error(
                f"argument {'/'.join(action.option_strings) or action.metavar or action.dest}: is empty"
            )


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    refuse_empty_values(parser, args)
    try:
        return args.handler(args) or 0
    except UserError as exc:
        print(f"islands {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"islands {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `islands simulate ... | head`: stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
