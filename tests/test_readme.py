"""The README stays the short front door: it starts with the two commands, fits in 200 lines, its
command lines parse with the real parser and its links into docs/ lead to pages. The reference it
used to hold lives in the docs site, kept true by tests/test_docs.py."""

from __future__ import annotations

import re

from docs_text import ROOT, command_lines, parse_error

README = (ROOT / "README.md").read_text()


def test_readme_starts_with_the_two_commands():
    before_first_block, first_block = README.split("```")[:2]
    assert before_first_block.strip() == "# islands"
    assert first_block.split()[:2] == ["make", "demo"] and "make test" in first_block


def test_readme_is_at_most_200_lines():
    assert len(README.splitlines()) <= 200


def test_readme_command_lines_parse():
    lines = command_lines(README)
    assert len(lines) >= 6 and {"demo", "list", "simulate", "plan", "report"} <= {args[0] for args in lines}
    assert [" ".join(args) for args in lines if parse_error(args)] == []


def test_readme_links_lead_to_docs_pages():
    linked = set(re.findall(r"\]\((docs/[^)#]+)", README))
    assert {"docs/getting-started.md", "docs/tutorials/simulate.md", "docs/how-to/sweep-and-plan.md",
            "docs/limits.md", "docs/validation.md", "docs/contributing.md"} <= linked
    assert sorted(path for path in linked if not (ROOT / path).is_file()) == []
