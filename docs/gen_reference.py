"""The reference pages written from the code, so they are never stale: the scenario keys and the
trainer keys from their specs (``scenarios/spec.py``, ``scenarios/trainer_keys.py``) and every command
with its options from the argparse parser (``islands/cli.py``).

mkdocs runs this file as a hook (``hooks:`` in mkdocs.yml): ``on_files`` adds the generated pages to
the build (nothing is written into docs/), and ``on_config`` fills the nav's glob entries, so a page
added under docs/ reaches the nav without an edit there. ``python docs/gen_reference.py DIR`` writes
the same pages into DIR for a look without mkdocs.
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from islands.cli import build_parser
from islands.scenarios import spec
from islands.scenarios.spec import ARRAYS, REQUIRED, SECTIONS, TOP_KEYS, Key
from islands.scenarios.trainer_keys import TRAINER_KEYS

PAGES = {
    "index.md": "home_page",
    "reference/commands.md": "commands_page",
    "reference/scenario-keys.md": "scenario_keys_page",
    "reference/trainer-keys.md": "trainer_keys_page",
}

NAMED_RULES = {  # rules that are plain functions, by name
    "positive": "> 0",
    "non_empty": "not empty",
    "non_negative": ">= 0",
    "at_least_one": ">= 1",
    "fraction_below_one": "in [0, 1)",
    "fraction_up_to_one": "in (0, 1]",
    "momentum": "in [0, 1)",
    "unit_interval": "in [0, 1]",
    "fraction_below_half": "in [0, 0.5)",
    "open_unit_interval": "in (0, 1)",
    "tensor_list": "1 to 100000 tensors, each in [1, 1e+14] values",
}

KIND_WORDS = {
    "int": "integer",
    "float": "number",
    "str": "string",
    "bool": "boolean",
    "pair": "two names",
    "values": "list of numbers",
    "float|str": "number or string",
}


def escape(text: str) -> str:
    """Markdown-safe text (a table cell, a list item): code spans kept, everything else escaped."""
    parts = re.split(r"(`[^`]*`)", text.replace("``", "`"))
    out = []
    for part in parts:
        if part.startswith("`"):
            out.append(part)  # a table's pipes inside a code span are no cell border
        else:
            out.append(
                part.replace("\\", "\\\\")
                .replace("|", "\\|")
                .replace("*", "\\*")
                .replace("<", "&lt;")
                .replace(">", "&gt;")
            )
    return "".join(out)


def number(value: float) -> str:
    """A bound as a reader writes it: 10000000, not 1e+07; 1e+14 where the digits would run long."""
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e10 else f"{value:g}"


def rule_text(check: Callable[[Any], str | None] | None) -> str:
    """The rule a key's check enforces, read from the check itself; an unknown kind of check stops
    the build (a new rule needs its words here, not a blank cell)."""
    if check is None:
        return ""
    name = check.__qualname__.split(".<locals>")[0]
    if name in NAMED_RULES:
        return NAMED_RULES[name]
    bound = inspect.getclosurevars(check).nonlocals
    unit = bound.get("unit", "")
    if name == "between":
        return f"in [{number(bound['low'])}, {number(bound['high'])}]{unit}"
    if name == "at_least":
        return f">= {number(bound['low'])}{unit}"
    if name == "zero_or_between":
        return f"0, or in [{number(bound['low'])}, {number(bound['high'])}]{unit}"
    if name == "positive_up_to":
        inner = inspect.getclosurevars(bound["upper"]).nonlocals
        return f"in (0, {number(inner['high'])}]{inner.get('unit', '')}"
    if name == "one_of":
        return ", ".join(f"`{choice}`" for choice in bound["choices"])
    if name == "registered_schedule":
        return ", ".join(f"`{schedule}`" for schedule in spec.SCHEDULES)
    if name == "grace_window":
        return f'`"{spec.ADAPTIVE}"`, or seconds in [0, {number(spec.MAX_GRACE_WINDOW_S)}]'
    raise ValueError(
        f"gen_reference.py: no words for the rule {check.__qualname__}: add them to rule_text"
    )


def default_text(key: Key) -> str:
    if key.default is REQUIRED:
        return "required"
    if key.default is None:
        return "none"
    if isinstance(key.default, bool):
        return f"`{str(key.default).lower()}`"
    if isinstance(key.default, str):
        return f'`"{key.default}"`'
    return f"`{key.default:g}`" if isinstance(key.default, float) else f"`{key.default}`"


def key_rows(prefix: str, keys: dict[str, Key]) -> list[str]:
    return [
        f"| `{prefix}{name}` | {KIND_WORDS.get(key.kind, key.kind)} | {default_text(key)} | "
        f"{escape(rule_text(key.check))} | {escape(key.doc)} |"
        for name, key in keys.items()
    ]


def key_table(groups: list[tuple[str, dict[str, Key]]]) -> str:
    rows = ["| key | type | default | rule | meaning |", "| --- | --- | --- | --- | --- |"]
    for prefix, keys in groups:
        rows += key_rows(prefix, keys)
    return "\n".join(rows)


def scenario_key_names() -> list[str]:
    """Every scenario key as the reference names it (``island.step_time_s``)."""
    names = list(TOP_KEYS)
    names += [
        f"{section}.{key}" for section, keys in {**SECTIONS, **ARRAYS}.items() for key in keys
    ]
    return names


def scenario_keys_page() -> str:
    groups = [("", TOP_KEYS)] + [(f"{section}.", keys) for section, keys in SECTIONS.items()]
    arrays = [(f"{array}.", keys) for array, keys in ARRAYS.items()]
    return (
        "\n\n".join(
            [
                "# Scenario keys",
                "Written from `scenarios/spec.py` at every build of these pages: every key a scenario file may "
                "hold, its type, default, the rule the loader enforces and what it means. `--set KEY=VALUE` and "
                "`--grid KEY=V1,V2` take the same names; an array's entries are reached by index, by name or "
                "all at once (`island.0.latency_ms`, `island.eu.latency_ms`, `island.*.latency_ms`). "
                "The keys explained at more length, with the rules that tie keys together: "
                "[Scenario files](scenario-file.md); every bound and its reason: [limits](../limits.md).",
                "## Sections",
                key_table(groups),
                "## Arrays of tables (`[[island]]`, `[[region]]`, `[[backbone]]`, `[[latency]]`)",
                key_table(arrays),
                "## Events (`[[event]]`)",
                key_table([("event.", spec.EVENT_KEYS)]),
                "Scheduled churn: each `[[event]]` entry has these three keys.",
            ]
        )
        + "\n"
    )


def trainer_keys_page() -> str:
    return (
        "\n\n".join(
            [
                "# Trainer keys",
                "Written from `scenarios/trainer_keys.py` at every build of these pages. The `[trainer]` section "
                "sets up the real trainer (`islands train`, `islands validate`); the simulator reads only "
                "`trainer.aggregation`, which changes the traffic. Every key has a default, so a scenario written "
                "for the simulator also trains.",
                key_table([("trainer.", TRAINER_KEYS)]),
            ]
        )
        + "\n"
    )


def subcommands() -> dict[str, tuple[argparse.ArgumentParser, str]]:
    """Each command's parser and its one-line help, by name."""
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
    return {name: (sub, helps.get(name, "")) for name, sub in action.choices.items()}


def option_line(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if action.option_strings:
        formatter = parser._get_formatter()
        metavar = (
            "" if action.nargs == 0 else " " + formatter._format_args(action, action.dest.upper())
        )
        names = ", ".join(f"`{option}{metavar}`" for option in action.option_strings)
    else:
        names = f"`{action.metavar or action.dest}`"
    words = parser._get_formatter()._expand_help(action) if action.help else ""
    default = action.default
    if (
        action.option_strings
        and action.nargs != 0
        and default not in (None, argparse.SUPPRESS, [], "")
        and "default" not in words
    ):
        words += f" (default: `{default}`)"
    return f"- {names}: {escape(words)}"


def command_section(name: str, parser: argparse.ArgumentParser, help_line: str) -> str:
    usage = parser.format_usage().removeprefix("usage: ").strip()
    description = "\n".join(
        line if line.startswith("    ") else escape(line)  # indented: a code block
        for line in (parser.description or "").strip().splitlines()
    )
    options = [
        option_line(parser, a) for a in parser._actions if not isinstance(a, argparse._HelpAction)
    ]
    return "\n\n".join(
        part
        for part in [
            f"## islands {name}",
            escape(help_line) if help_line else "",
            f"```\n{usage}\n```",
            description,
            "\n".join(options),
        ]
        if part
    )


def commands_page() -> str:
    sections = [
        command_section(name, sub, help_line)
        for name, (sub, help_line) in sorted(subcommands().items())
    ]
    return (
        "\n\n".join(
            [
                "# Commands",
                "Written from the argparse parser (`islands/cli.py`, one module per command in "
                "`islands/commands/`) at every build of these pages: each command's usage, description and "
                "every option, as `islands COMMAND --help` prints them. `islands --version` prints the "
                "installed version. `FILE` is a scenario file or the name of a bundled scenario "
                "(`islands list`).",
                *sections,
            ]
        )
        + "\n"
    )


def home_page() -> str:
    """The site's home page is the README, its links into docs/ made relative to docs/."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    return readme.replace("](docs/", "](")


def generated_pages() -> dict[str, str]:
    """Every generated page: its path under docs/ and its Markdown."""
    return {path: globals()[maker]() for path, maker in PAGES.items()}


# --- mkdocs hooks -------------------------------------------------------------------------------


def expand_nav(nav: list, docs_dir: Path, listed: set[str]) -> list:
    """The nav with every entry whose path holds a ``*`` replaced by the pages it matches (sorted;
    none: the section is dropped), so that new pages join a section by their name alone."""
    expanded = []
    for entry in nav:
        title, value = next(iter(entry.items())) if isinstance(entry, dict) else (None, entry)
        if isinstance(value, list):
            value = expand_nav(value, docs_dir, listed)
        elif isinstance(value, str) and "*" in value:
            value = [path.relative_to(docs_dir).as_posix() for path in sorted(docs_dir.glob(value))]
            listed.update(value)
        if isinstance(value, str):
            listed.add(value)
        if value == []:
            continue
        expanded.append({title: value} if title is not None else value)
    return expanded


def on_config(config: Any) -> Any:
    """Fill the nav's glob entries; any page still outside the nav goes under "More pages"."""
    if not config["nav"]:
        return config
    docs_dir = Path(config["docs_dir"])
    listed: set[str] = set(PAGES)
    nav = expand_nav(config["nav"], docs_dir, listed)
    unlisted = [
        path.relative_to(docs_dir).as_posix()
        for path in sorted(docs_dir.rglob("*.md"))
        if path.relative_to(docs_dir).as_posix() not in listed
    ]
    if unlisted:
        nav.append({"More pages": unlisted})
    config["nav"] = nav
    return config


def on_files(files: Any, config: Any) -> Any:
    """Add the generated pages to the build (in memory: nothing is written into docs/)."""
    from mkdocs.structure.files import File

    for path, text in generated_pages().items():
        files.append(File.generated(config, path, content=text))
    return files


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "site-reference")
    for path, text in generated_pages().items():
        (out / path).parent.mkdir(parents=True, exist_ok=True)
        (out / path).write_text(text)
        print(f"wrote {out / path}")
