"""Generated bad scenario files: a valid scenario drawn (``helpers/strategies.py``: every schedule,
network model, churn and failure setting) and written as TOML, then changed at one place
(``helpers/mutations.py``: a value of another type, out of range, NaN, an infinity, 401 digits,
arrays 100,000 deep; a key or table removed, an unknown one added, a key or an ``[[island]]``
written twice), and every bundled scenario cut at sampled bytes. Each is loaded, or refused in one
line naming the file (``ScenarioError``); ``islands simulate`` answers 0 or 2 in one line, never a
traceback, within a small ``--max-events``."""

from __future__ import annotations

import contextlib
import io
import tomllib
from pathlib import Path

import pytest
from helpers.mutations import answer, cuts, mutated, toml_text
from helpers.strategies import scenarios
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from islands.cli import main
from islands.scenarios import load
from islands.scenarios.loader import resolve

FIXTURES = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
BUNDLED = sorted(Path(str(resolve("worked-example"))).parent.glob("*.toml"))


def simulate_answers(path: Path) -> None:
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(["simulate", str(path), "--max-events", "20000"])
    assert code in (0, 2) and len(err.getvalue().splitlines()) == (code == 2), err.getvalue()


@given(scenarios(), st.data())
@FIXTURES
def test_a_scenario_changed_at_one_place_is_loaded_or_refused_naming_it(tmp_path, drawn, data):
    changed, what = data.draw(mutated(drawn.document))
    path = tmp_path / "scenario.toml"
    path.write_text(toml_text(changed))
    if answer(lambda: load(path), path) is not None:
        simulate_answers(path)


@given(scenarios())
@FIXTURES
def test_the_mutations_writer_writes_a_drawn_scenario_as_it_is(tmp_path, drawn):
    """The writer's own check: a document it writes unchanged reads back the same, and loads."""
    path = tmp_path / "scenario.toml"
    path.write_text(toml_text(drawn.document))
    assert tomllib.loads(path.read_text()) == drawn.document
    load(path)


@pytest.mark.parametrize("bundled", BUNDLED, ids=[path.stem for path in BUNDLED])
def test_a_bundled_scenario_cut_at_sampled_bytes_is_loaded_or_refused_naming_it(tmp_path, bundled):
    data = bundled.read_bytes()
    path = tmp_path / bundled.name
    for length in cuts(len(data), most=120):
        path.write_bytes(data[:length])
        answer(lambda: load(path), path)
