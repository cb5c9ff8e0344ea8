"""The order a scenario's tables are written in is not physics (issue #46, item 1).

Workers are numbered by their islands' names (``Scenario.workers``), so reversing or shuffling the
``[[island]]``, ``[[event]]``, ``[[region]]``, ``[[backbone]]`` and ``[[latency]]`` tables changes no
rank, no draw, no ring and no tie-break: every figure of the summary is the same, for every bundled
scenario and for drawn ones (``helpers/strategies.py``), seed for seed.
"""

from __future__ import annotations

import copy
import math
import random
import re
import tomllib
from typing import Any

import pytest
from helpers.strategies import load_document, scenarios
from hypothesis import given
from hypothesis import strategies as st

from islands.scenarios import bundled_names, from_dict, resolve
from islands.simulator import simulate

# a key named by its table's place in the file, as --set takes it (island.1.chip_mtbf_s)
TABLE_INDEX = r"(?<=island\.)\d+\."
RELATIVE = 1e-9  # the same sums taken in another order may differ by rounding, not by more
TABLES = ("island", "event", "region", "backbone", "latency")
# a bundled scenario whose run takes tens of seconds is played for fewer outer steps, both ways
SHORTER = {"decoupled-fleet": ("schedule.outer_steps=40",)}


def keyed(summary: dict[str, Any]) -> dict[str, Any]:
    """The summary with its per-island list keyed by island name (the list follows the file's order)."""
    figures = dict(summary)
    figures["islands"] = {island["name"]: island for island in summary["islands"]}
    return figures


def assert_same_figures(first: Any, second: Any, where: str = "summary") -> None:
    if isinstance(first, dict):
        assert first.keys() == second.keys(), where
        for key in first:
            assert_same_figures(first[key], second[key], f"{where}.{key}")
    elif isinstance(first, float) and isinstance(second, float):
        assert math.isclose(first, second, rel_tol=RELATIVE, abs_tol=1e-9), (where, first, second)
    elif isinstance(first, str) and isinstance(second, str):
        assert re.sub(TABLE_INDEX, "", first) == re.sub(TABLE_INDEX, "", second), where
    else:
        assert first == second, (where, first, second)


def shuffled(document: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """The document with each array of tables in another order."""
    other = copy.deepcopy(document)
    for table in TABLES:
        if table in other:
            rng.shuffle(other[table])
    return other


def reversed_tables(document: dict[str, Any]) -> dict[str, Any]:
    other = copy.deepcopy(document)
    for table in TABLES:
        if table in other:
            other[table].reverse()
    return other


def test_ranks_follow_the_islands_names_not_the_tables_order():
    document = {
        "name": "two-cities",
        "model": {"parameters": 1e6},
        "schedule": {"algorithm": "diloco", "inner_steps": 2, "outer_steps": 1},
        "island": [
            {"name": "zurich", "step_time_s": 1, "bandwidth_gbps": 1, "replicas": 2},
            {"name": "austin", "step_time_s": 1, "bandwidth_gbps": 1},
        ],
    }
    names = [worker.name for worker in from_dict(document).workers()]
    assert names == ["austin", "zurich-0", "zurich-1"]
    assert [worker.rank for worker in from_dict(document).workers()] == [0, 1, 2]


def document_of(name: str) -> dict[str, Any]:
    return tomllib.loads(resolve(name).read_text(encoding="utf-8"))


def reorderable(name: str) -> bool:
    """Whether a bundled scenario has an array of two tables or more."""
    return any(len(document_of(name).get(table, [])) > 1 for table in TABLES)


@pytest.mark.parametrize("name", [name for name in bundled_names() if reorderable(name)])
def test_reversing_a_bundled_scenarios_tables_changes_no_figure(name):
    path = resolve(name)
    document = document_of(name)
    overrides = SHORTER.get(name, ())
    written = simulate(from_dict(document, str(path), overrides)).summary
    reordered = simulate(from_dict(reversed_tables(document), str(path), overrides)).summary
    assert_same_figures(keyed(written), keyed(reordered))


@given(scenarios(), st.randoms(use_true_random=False))
def test_shuffling_a_drawn_scenarios_tables_changes_no_figure(drawn, rng):
    written = simulate(drawn.scenario()).summary
    reordered = simulate(load_document(shuffled(drawn.document, rng))).summary
    assert_same_figures(keyed(written), keyed(reordered))
