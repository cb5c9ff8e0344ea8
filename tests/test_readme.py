"""The README stays the short front door: it starts with the two commands, fits in 200 lines, its
command lines parse with the real parser, its demo table is what the demo computes, and its links
into docs/ lead to pages. The reference it
used to hold lives in the docs site, kept true by tests/test_docs.py."""

from __future__ import annotations

import re

from helpers.docs_text import ROOT, command_examples, command_lines, parse_error

from islands.analysis.side_by_side import schedule_table, simulate_schedules, work_line
from islands.scenarios import ScenarioSource

README = (ROOT / "README.md").read_text()


def test_readme_starts_with_the_two_commands():
    before_first_block, first_block = README.split("```")[:2]
    assert before_first_block.strip() == "# islands"
    assert first_block.split()[:2] == ["make", "demo"] and "make test" in first_block


def test_readme_is_at_most_200_lines():
    assert len(README.splitlines()) <= 200


def test_readme_command_lines_parse():
    lines = command_lines(README)
    assert len(lines) >= 6 and {"demo", "list", "simulate", "plan", "report"} <= {
        args[0] for args in lines
    }
    assert [" ".join(args) for args in lines if parse_error(args)] == []


def test_readme_links_lead_to_docs_pages():
    linked = set(re.findall(r"\]\((docs/[^)#]+)", README))
    assert {
        "docs/getting-started.md",
        "docs/tutorials/simulate.md",
        "docs/how-to/sweep-and-plan.md",
        "docs/limits.md",
        "docs/validation.md",
        "docs/contributing.md",
    } <= linked
    assert sorted(path for path in linked if not (ROOT / path).is_file()) == []


def test_the_demo_table_shown_is_what_the_demo_computes():
    """The README's and Getting started's (which goes on to the real run's output)."""
    source = ScenarioSource.read("worked-example")
    summaries = {name: result.summary for name, result in simulate_schedules(source).items()}
    scenario = source.scenario
    computed = [
        f"Scenario {scenario.name}: {scenario.description}",
        work_line(summaries),
        *schedule_table(summaries).splitlines(),
    ]
    started = (ROOT / "docs" / "getting-started.md").read_text()
    for page in (README, started):
        shown = next(e.shown for e in command_examples(page) if e.args == ("demo",) and e.shown)
        assert len(summaries) == 5 and list(shown[: len(computed)]) == computed
    assert len(next(e.shown for e in command_examples(README) if e.args == ("demo",))) == len(
        computed
    )
