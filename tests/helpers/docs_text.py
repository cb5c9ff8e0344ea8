"""What the documentation says, read for the tests that keep it true: its pages (written and
generated), the `islands` command lines in their code blocks, and the scenario keys they name."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from islands.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

# A command line in a code block: `islands ...`, `bin/islands ...`, after a `$ ` or `host-0$ ` prompt,
# or a module run (`-m islands.cli train ...`, `-m islands calibrate ...`, e.g. under torchrun).
COMMAND = re.compile(r"^(?:[\w.-]*\$ )?(?:bin/|\.venv/bin/)?islands (?P<args>.*)$")
MODULE_RUN = re.compile(r"-m islands(?:\.cli)? (?P<args>.*)$")
PROMPT = re.compile(r"^\s*[\w.-]*\$ ")
ERROR_LINE = re.compile(r"^[\w-]+: error: ")  # what a command prints on bad input, after `islands `
SECTIONS = (
    "model",
    "schedule",
    "network",
    "compute",
    "syncer",
    "island",
    "region",
    "backbone",
    "latency",
    "event",
    "trainer",
)
# a key as the docs name it: `schedule.inner_steps`, `island.0.latency_ms`, `island.*.bandwidth_gbps`,
# `island.eu.latency_ms`; not a module (`islands.trainer.launch`) nor a file (`network.py`)
KEY = re.compile(
    r"(?<![\w./-])(?P<section>" + "|".join(SECTIONS) + r")\.(?:(?:\d+|\*|[a-z][\w-]*)\.)?"
    r"(?!(?:py|md|toml|csv|json)\b)(?P<key>[a-z][a-z0-9_]*)\b(?![\w(/-])"
)


def gen_reference():
    """docs/gen_reference.py, the generator the mkdocs hook runs, as a module."""
    spec = importlib.util.spec_from_file_location("gen_reference", DOCS / "gen_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def written_pages() -> dict[str, str]:
    return {
        path.relative_to(DOCS).as_posix(): path.read_text() for path in sorted(DOCS.rglob("*.md"))
    }


def all_pages() -> dict[str, str]:
    """Every page of the site: the written ones and the generated ones (README as the home page)."""
    return {**written_pages(), **gen_reference().generated_pages()}


def code_blocks(markdown: str) -> list[str]:
    """The fenced code blocks' text."""
    return re.findall(r"^```[^\n]*\n(.*?)^```", markdown, flags=re.M | re.S)


def logical_lines(block: str) -> list[str]:
    """A block's lines with backslash continuations joined."""
    return re.sub(r"\\\n\s*", " ", block).splitlines()


@dataclass(frozen=True)
class Example:
    """One documented command line: the arguments after `islands`, and the lines the page shows it
    printing (those after a `$ islands ...` prompt, up to the next prompt or the block's end)."""

    args: tuple[str, ...]
    shown: tuple[str, ...]

    @property
    def error(self) -> str | None:
        """The error line the page shows the command printing (`islands simulate: error: ...`)."""
        first = self.shown[0] if self.shown else ""
        return (
            first
            if first.startswith("islands ") and ERROR_LINE.match(first[len("islands ") :])
            else None
        )


def command_examples(markdown: str) -> list[Example]:
    """Every `islands` command line in the page's code blocks. A synopsis (`[--set KEY=VALUE ...]`,
    `|`) is not a command and is left out."""
    examples = []
    for block in code_blocks(markdown):
        lines = logical_lines(block)
        for number, line in enumerate(lines):
            match = COMMAND.match(line.strip()) or MODULE_RUN.search(line)
            if (
                not match
                or ERROR_LINE.match(match.group("args"))
                or re.search(r"\[[-A-Z]|\.\.\.\]| \| ", line)
            ):
                continue
            shown: list[str] = []
            if line.lstrip().startswith("$ "):
                for after in lines[number + 1 :]:
                    if PROMPT.match(after):
                        break
                    shown.append(after.rstrip())
            examples.append(
                Example(tuple(shlex.split(match.group("args"), comments=True)), tuple(shown))
            )
    return examples


def command_lines(markdown: str) -> list[list[str]]:
    return [list(example.args) for example in command_examples(markdown)]


def inline_commands(markdown: str) -> list[tuple[str, list[str]]]:
    """The `islands COMMAND ...` code spans of the page's prose (often partial: `islands train`,
    `plan --objective cost`'s options alone), as the command and the options it names."""
    prose = re.sub(r"^```.*?^```", "", markdown, flags=re.M | re.S)
    spans = re.findall(r"`(?:bin/)?islands ([a-z][a-z-]*)([^`]*)`", prose)
    return [
        (command, re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", rest)) for command, rest in spans
    ]


def parse_error(args: list[str]) -> str | None:
    """None when the real parser accepts the line, else what it said."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            build_parser().parse_args(args)
    except SystemExit as stop:
        return stderr.getvalue().strip().splitlines()[-1] if stop.code else None
    return None


def named_keys(markdown: str) -> set[str]:
    """Every scenario or trainer key the page names, as `section.key`."""
    return {f"{m.group('section')}.{m.group('key')}" for m in KEY.finditer(markdown)}
