"""The summary's schema (``islands/summary_schema.py``) is the one source of its keys: every summary a
player gives holds only its keys, each of its type, and docs/reference/outputs.md is generated from it."""

from __future__ import annotations

import types
import typing

import pytest

from islands.scenarios import load
from islands.simulator import simulate
from islands.summary_schema import (
    ISLAND_ROWS,
    OUTPUTS_DOC,
    SUMMARY_ROWS,
    IslandSummary,
    Summary,
    with_keys_section,
)

RUNS = {  # one run per player, and one of a kind each player leaves out
    "lockstep": ("worked-example", []),
    "one learner": ("worked-example", ["schedule.algorithm=decoupled"]),
    "events": ("worked-example", ["island.0.mtbf_s=20000", "island.0.mttr_s=3000"]),
    "counts": (
        "worked-example",
        [
            "island.0.replicas=2000",
            "schedule.outer_steps=5",
            "island.0.mtbf_s=2000",
            "island.0.mttr_s=50000",
        ],
    ),
}


def documented(rows) -> set[str]:
    return {name for names, _ in rows for name in names}


def test_the_outputs_page_is_generated_from_the_schema():
    page = OUTPUTS_DOC.read_text(encoding="utf-8")
    assert page == with_keys_section(page), "run: python -m islands.summary_schema"


def test_every_key_of_the_types_is_documented_once():
    assert documented(SUMMARY_ROWS) == set(Summary.__annotations__)
    assert documented(ISLAND_ROWS) == set(IslandSummary.__annotations__)
    names = [name for names, _ in SUMMARY_ROWS for name in names]
    assert len(names) == len(set(names))


def of_type(value, hint) -> bool:
    """Whether ``value`` is of the annotated type (None, scalars, unions of them, lists of islands)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(of_type(value, arm) for arm in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if origin is list:
        return isinstance(value, list) and all(
            of_type(item, typing.get_args(hint)[0]) for item in value
        )
    if typing.is_typeddict(hint):
        hints = typing.get_type_hints(hint)
        return (
            isinstance(value, dict)
            and set(value) == set(hints)
            and all(of_type(value[key], hints[key]) for key in hints)
        )
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, hint) and not (hint is int and isinstance(value, bool))


@pytest.mark.parametrize("player", RUNS)
def test_every_player_gives_the_schemas_keys_of_their_types(player):
    name, overrides = RUNS[player]
    summary = simulate(load(name, overrides)).summary
    assert summary["player"] == player
    hints = typing.get_type_hints(Summary)
    assert set(summary) <= set(hints)
    wrong = {key: value for key, value in summary.items() if not of_type(value, hints[key])}
    assert wrong == {}
    assert not of_type(True, int) and not of_type("1", float)  # the check itself tells types apart
