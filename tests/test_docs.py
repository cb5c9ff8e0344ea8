"""The documentation stays true to the code: every `islands` command line in its code blocks parses
with the real parser, the quick ones run (and the bad-input examples print the error they show),
every key it names exists, the generated reference holds every command, option and key, every
summary key is explained, and the site builds with `mkdocs build --strict`."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.docs_text import (
    ROOT,
    Example,
    all_pages,
    command_examples,
    gen_reference,
    inline_commands,
    named_keys,
    parse_error,
    written_pages,
)

from islands.cli import build_parser, command_names, main
from islands.scenarios import load
from islands.scenarios.spec import ARRAYS, EVENT_KEYS, SECTIONS, TOP_KEYS
from islands.scenarios.trainer_keys import TRAINER_KEYS
from islands.simulator import simulate

PAGES = all_pages()
EXAMPLES = [(page, example) for page, text in PAGES.items() for example in command_examples(text)]
# The commands fast enough to run on every `make test` (each well under a few seconds): run when
# their line names only bundled scenarios, not a placeholder (FILE, my.toml) or a cluster.
QUICK = {"list", "simulate", "plan"}


def known_keys() -> set[str]:
    keys = {
        f"{section}.{key}" for section, table in {**SECTIONS, **ARRAYS}.items() for key in table
    }
    return (
        keys | {f"trainer.{key}" for key in TRAINER_KEYS} | {f"event.{key}" for key in EVENT_KEYS}
    )


def run_islands(args: list[str], cwd: Path) -> tuple[int, str, str]:
    stdout, stderr = io.StringIO(), io.StringIO()
    here = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            code = main(args)
    finally:
        os.chdir(here)
    return code, stdout.getvalue(), stderr.getvalue()


def runs_here(example: Example) -> bool:
    """Whether the line can run as written from any folder: no placeholder (FILE), no scenario file
    of the reader's (`my.toml`, or one the page shows beside it), no cluster, no profile."""
    elsewhere = ("FILE", "--dask", "--network-profile", "--profile")
    return not any(word in elsewhere or word.endswith(".toml") for word in example.args)


def is_quick(example: Example) -> bool:
    return example.args[0] in QUICK and runs_here(example)


def wrong_on_purpose(text: str) -> set[str]:
    """Keys a page names to show them refused: those on a line that shows the refusal."""
    return set().union(*(named_keys(line) for line in text.splitlines() if ": error: " in line))


def test_the_docs_show_command_lines_of_every_kind():
    commands = {example.args[0] for _, example in EXAMPLES}
    assert len(EXAMPLES) >= 30
    assert {
        "demo",
        "list",
        "simulate",
        "sweep",
        "plan",
        "plot",
        "train",
        "validate",
        "calibrate",
    } <= commands


def test_every_documented_command_line_parses():
    refused = [
        (page, " ".join(example.args), parse_error(list(example.args)))
        for page, example in EXAMPLES
        if parse_error(list(example.args))
    ]
    assert refused == []


def test_every_command_and_option_named_in_prose_exists():
    commands = gen_reference().subcommands()
    named = [
        (page, command, options)
        for page, text in PAGES.items()
        for command, options in inline_commands(text)
    ]
    assert len(named) > 50
    unknown = [
        (page, command, option)
        for page, command, options in named
        for option in [None, *options]
        if command not in commands
        or option
        and option not in commands[command][0]._option_string_actions
    ]
    assert unknown == []


def test_a_wrong_command_line_would_be_caught():
    assert "invalid choice" in parse_error(["simulat", "worked-example"])
    assert "unrecognized arguments" in parse_error(["simulate", "worked-example", "--sett", "x=1"])


@pytest.mark.parametrize(
    "example",
    sorted(
        {example for _, example in EXAMPLES if is_quick(example) and example.error is None}, key=str
    ),
)
def test_the_quick_command_lines_run_and_print_what_the_page_shows(example, tmp_path):
    code, stdout, stderr = run_islands(list(example.args), tmp_path)
    assert code == 0 and "error" not in stderr, (
        f"islands {' '.join(example.args)}: {stderr[-2000:]}"
    )
    printed = [line.rstrip() for line in stdout.splitlines()]
    assert (
        printed and [line for line in example.shown if line.strip() and line not in printed] == []
    )


@pytest.mark.parametrize(
    "example",
    sorted({example for _, example in EXAMPLES if example.error and runs_here(example)}, key=str),
)
def test_the_bad_input_examples_print_the_error_they_show(example, tmp_path):
    code, _, stderr = run_islands(list(example.args), tmp_path)
    assert code == 2
    assert stderr.strip() == example.error


def test_every_key_the_docs_name_exists():
    named = set().union(*(named_keys(text) for text in PAGES.values()))
    refused = set().union(*(wrong_on_purpose(text) for text in PAGES.values()))
    assert len(named) > 80 and "schedule.inner_stepz" in refused
    assert sorted(named - known_keys() - refused) == []


def test_the_generated_reference_names_every_key():
    pages = gen_reference().generated_pages()
    scenario, trainer = pages["reference/scenario-keys.md"], pages["reference/trainer-keys.md"]
    keys = (
        list(TOP_KEYS)
        + [f"{section}.{key}" for section, table in {**SECTIONS, **ARRAYS}.items() for key in table]
        + [f"event.{key}" for key in EVENT_KEYS]
    )
    assert [key for key in keys if f"| `{key}` |" not in scenario] == []
    assert len(TRAINER_KEYS) >= 32
    assert [key for key in TRAINER_KEYS if f"| `trainer.{key}` |" not in trainer] == []


def test_the_generated_reference_names_every_command_and_option():
    page = gen_reference().generated_pages()["reference/commands.md"]
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert len(subparsers.choices) == len(command_names()) >= 15  # every module of islands/commands
    missing = [
        f"{name} {option}"
        for name, sub in subparsers.choices.items()
        for action in sub._actions
        if not isinstance(action, argparse._HelpAction)
        for option in action.option_strings or [action.metavar or action.dest]
        if f"`{option}" not in page.split(f"## islands {name}\n", 1)[1].split("\n## ", 1)[0]
    ]
    assert missing == []


def test_the_generated_rules_read_from_the_checks():
    rows = {
        line.split(" | ")[0].strip("| `"): line.split(" | ")
        for line in gen_reference().generated_pages()["reference/scenario-keys.md"].splitlines()
        if line.startswith("| `")
    }
    assert rows["island.jitter_cv"][3] == "in [0, 10]"  # MAX_JITTER_CV
    assert rows["island.latency_ms"][3] == "in [0, 60000] ms"
    assert rows["network.tcp_window_bytes"][3] == "0, or in [1024, 1073741824] bytes"
    assert rows["schedule.algorithm"][3].startswith("`ddp`, `diloco`, `streaming`")
    assert rows["schedule.outer_steps"][2] == "required"


def test_an_unknown_kind_of_rule_stops_the_build():
    with pytest.raises(ValueError, match="no words for the rule"):
        gen_reference().rule_text(lambda value: None)


@pytest.mark.parametrize("scenario", ["home-lab", "decoupled-fleet"])
def test_every_summary_key_is_explained(scenario):
    # home-lab has churn and decoupled-fleet a syncer: between them every key a simulated run can have
    outputs = written_pages()["reference/outputs.md"]
    summary = simulate(load(scenario, ["schedule.outer_steps=2"])).summary
    assert len(summary) > 20 and len(summary["islands"][0]) > 8
    assert [key for key in summary if f"`{key}`" not in outputs] == []
    assert [key for key in summary["islands"][0] if f"`{key}`" not in outputs] == []


def test_the_site_builds_strict(tmp_path):
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent)) or shutil.which("mkdocs")
    if mkdocs is None:
        pytest.skip(
            "mkdocs is not installed: `pip install -e '.[dev]'` (make does) installs mkdocs-material"
        )
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    built = subprocess.run(
        [mkdocs, "build", "--strict", "--quiet", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    commands = (tmp_path / "site" / "reference" / "commands" / "index.html").read_text()
    assert [
        name for name in gen_reference().subcommands() if f"islands {name}" not in commands
    ] == []
    assert "fonts.googleapis" not in (tmp_path / "site" / "index.html").read_text()


def test_new_pages_reach_the_nav_without_an_edit(tmp_path):
    for page in (
        "index.md",
        "bad-inputs-run.md",
        "bad-inputs-simulation.md",
        "how-to/new-guide.md",
        "extra.md",
    ):
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / page).write_text("# A page\n")
    nav = [
        {"Home": "index.md"},
        {"How-to guides": [{"New": "how-to/new-guide.md"}]},
        {"Reference: bad inputs": "bad-inputs-*.md"},
        {"Nothing yet": "none-*.md"},
    ]
    config = gen_reference().on_config({"nav": nav, "docs_dir": str(tmp_path)})
    assert config["nav"] == [
        {"Home": "index.md"},
        {"How-to guides": [{"New": "how-to/new-guide.md"}]},
        {"Reference: bad inputs": ["bad-inputs-run.md", "bad-inputs-simulation.md"]},
        {"More pages": ["extra.md"]},
    ]
