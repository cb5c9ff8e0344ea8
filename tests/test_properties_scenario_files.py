"""Generated bad scenario files: a valid scenario drawn (``helpers/strategies.py``: every schedule,
network model, churn and failure setting) and written as TOML, then changed at one place
(``helpers/mutations.py``: a value of another type, out of range, NaN, an infinity, 401 digits,
arrays 100,000 deep; a key or table removed, an unknown one added, a key or an ``[[island]]``
written twice), the same with the keys of how a stack makes its exchange set (its reduce-scatter,
buckets from listed tensors, or a store's handshakes), and every bundled scenario cut at sampled
bytes. Each is loaded, or refused in one
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


@st.composite
def exchange_and_store_keys(draw) -> dict:
    """A drawn valid scenario given the keys of how a stack makes its exchange, which the drawn ones
    leave at their defaults: ``network.reduce_scatter``, and either DDP-style buckets laid out from
    listed tensors (``exchange.calls = "buckets"``, ``bucket_cap_mb``, ``first_bucket_mb``,
    ``tensor_values``), one FIFO per egress with unequal links' ``fifo_k_u``, or a top-k round through
    an object store (``[store]``, ``handshake_round_trips``, ``request_ms``)."""
    through_store = draw(st.booleans())
    algorithms = ("diloco",) if through_store else ("ddp", "diloco", "streaming")
    document = draw(scenarios(algorithms)).document
    network = document.setdefault("network", {})
    network.update(reduce_scatter="ring", collective="ring", on_departure="restart")
    document["trainer"]["aggregation"] = "mean"
    parameters = document["model"]["parameters"]
    if through_store:
        document["schedule"]["compression"] = "topk"
        network["gather"] = "store"
        network.pop("exchange_end_spread_s", None)  # a ring's, refused beside a store
        document["store"] = {"latency_ms": 20.0, "handshake_round_trips": 3, "request_ms": 30.0}
        if document.get("region"):
            document["store"]["region"] = document["region"][0]["name"]
    elif draw(st.booleans()):  # behind one FIFO per egress, unequal links' own k_u
        network.update(egress_queue="fifo", reduce_scatter="all_to_all", fifo_k_u=0.2)
        network.pop("ring_efficiency", None)  # measured through a FIFO: refused beside one
    else:
        document["exchange"] = {
            "calls": "buckets",
            "bucket_cap_mb": 2.0,
            "first_bucket_mb": 0.5,
            "tensor_values": [parameters * 0.6, parameters * 0.3, parameters * 0.1],
        }
    return document


@given(exchange_and_store_keys(), st.data())
@FIXTURES
def test_a_stacks_exchange_keys_changed_at_one_place_are_loaded_or_refused_naming_them(
    tmp_path, document, data
):
    path = tmp_path / "scenario.toml"
    path.write_text(toml_text(document))
    load(path)  # valid before it is changed
    changed, what = data.draw(mutated(document))
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
