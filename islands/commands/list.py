"""``islands list``: the bundled scenarios, each with the one-line description from its own file.

Any of the names works wherever a command takes FILE (``islands simulate home-lab``).
"""

from __future__ import annotations

import argparse
import tomllib

from islands.scenarios import bundled_names, resolve


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "list", help="list the bundled scenarios with their descriptions", description=__doc__
    )
    parser.set_defaults(handler=run)


def bundled_descriptions() -> dict[str, str]:
    """Each bundled scenario's name and its ``description`` key, read from the file."""
    return {
        name: tomllib.loads(resolve(name).read_text(encoding="utf-8")).get("description", "")
        for name in bundled_names()
    }


def run(args: argparse.Namespace) -> int:
    descriptions = bundled_descriptions()
    width = max(len(name) for name in descriptions)
    for name, description in descriptions.items():
        print(f"{name:<{width}}  {description}")
    print(
        "\nA name works wherever a command takes FILE, e.g. islands simulate home-lab "
        "(the files: scenarios/library/ in the repository)."
    )
    return 0
