"""The README stays true to the code: its first commands and its key reference."""

from __future__ import annotations

from pathlib import Path

from islands.scenarios.spec import ISLAND_KEYS, SECTIONS, TOP_KEYS

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_readme_starts_with_the_two_commands():
    first_block = README.split("```")[1]
    assert "make demo" in first_block and "make test" in first_block


def test_every_scenario_key_is_documented():
    keys = list(TOP_KEYS) + [f"island.{key}" for key in ISLAND_KEYS]
    keys += [f"{section}.{key}" for section, table in SECTIONS.items() for key in table]
    missing = [key for key in keys if f"`{key}`" not in README]
    assert missing == []
