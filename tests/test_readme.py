"""The README stays true to the code: its first commands, its key reference (scenario and trainer
keys), every summary key explained, and the docs it links to."""

from __future__ import annotations

import re
from pathlib import Path

from islands.scenarios import load
from islands.scenarios.spec import ARRAYS, SECTIONS, TOP_KEYS
from islands.scenarios.trainer_keys import TRAINER_KEYS
from islands.simulator import simulate

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def undocumented(keys) -> list[str]:
    return [key for key in keys if f"`{key}`" not in README]


def test_readme_starts_with_the_two_commands():
    first_block = README.split("```")[1]
    assert "make demo" in first_block and "make test" in first_block


def test_every_scenario_key_is_documented():
    keys = list(TOP_KEYS) + [f"{array}.{key}" for array, table in ARRAYS.items() for key in table]
    keys += [f"{section}.{key}" for section, table in SECTIONS.items() for key in table]
    assert undocumented(keys) == []


def test_every_trainer_key_is_documented():
    assert len(TRAINER_KEYS) >= 32
    assert undocumented(f"trainer.{key}" for key in TRAINER_KEYS) == []


def test_every_summary_key_is_documented():
    # home-lab has churn, so the run's summary has every key a simulated run can have
    summary = simulate(load("home-lab", ["schedule.outer_steps=2"])).summary
    assert len(summary) > 20 and len(summary["islands"][0]) > 8
    assert undocumented(summary) == []
    assert undocumented(summary["islands"][0]) == []


def test_links_to_docs_lead_to_files():
    linked = set(re.findall(r"\]\((docs/[^)#]+)", README))
    assert {"docs/limits.md", "docs/validation.md", "docs/emulation.md", "docs/training.md"} <= linked
    assert [path for path in linked if not (ROOT / path).is_file() and path != "docs/limits.md"] == []


def test_the_contents_link_to_headings_that_exist():
    anchors = {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
               for heading in re.findall(r"^#+ (.+)$", README, flags=re.M)}
    contents = README.split("## Contents", 1)[1].split("\n## ", 1)[0]
    assert [a for a in re.findall(r"\]\(#([^)]+)\)", contents) if a not in anchors] == []
