"""Generated scenarios that gather top-k payloads (``network.gather``, ``schedule.gather_peers``,
``[store]``): drawn valid (way, K, the store's links, latency and region, equal or asymmetric island
links), their bytes per worker the closed form, then changed at one place (``helpers/mutations.py``:
another type, out of range, NaN, an infinity, 401 digits, a key or table removed or added) and
written as TOML: loaded, or refused in one line naming the file; ``islands simulate`` answers 0 or 2
in one line, never a traceback."""

from __future__ import annotations

import contextlib
import io

from helpers.mutations import answer, mutated, toml_text
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from islands.cli import main
from islands.scenarios import from_dict, load
from islands.schedules import schedule_of
from islands.schedules.gather import DIRECT, RING, STORE, chosen, uploads
from islands.simulator import simulate

FIXTURES = settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=40)
GBPS = (0.05, 0.11, 0.5, 1.0, 10.0)


@st.composite
def gathered_documents(draw) -> dict:
    """A valid scenario whose top-k payloads are gathered one of the three ways."""
    way = draw(st.sampled_from((RING, DIRECT, STORE)))
    workers = draw(st.integers(2, 5))
    island = {
        "name": "peers",
        "replicas": workers,
        "step_time_s": 1.0,
        "latency_ms": draw(st.sampled_from((0.0, 10.0))),
    }
    if draw(st.booleans()):
        island["bandwidth_gbps"] = draw(st.sampled_from(GBPS))
    else:
        island.update(
            upload_gbps=draw(st.sampled_from(GBPS)), download_gbps=draw(st.sampled_from(GBPS))
        )
    schedule = {
        "algorithm": draw(st.sampled_from(("diloco", "streaming"))),
        "inner_steps": 4,
        "outer_steps": 3,
        "compression": "topk",
        "bits": draw(st.sampled_from((1, 2, 8))),
    }
    if schedule["algorithm"] == "streaming":
        schedule["fragments"] = 2
    document = {
        "name": "gathered",
        "seed": draw(st.integers(0, 5)),
        "model": {"parameters": 4096 * 100, "bytes_per_param": 2, "layers": 2},
        "schedule": schedule,
        "network": {"gather": way},
        "island": [island],
    }
    if way != RING and draw(st.booleans()):
        schedule["gather_peers"] = draw(st.integers(1, workers))
    if way == STORE:
        document["store"] = draw(
            st.fixed_dictionaries(
                {},
                optional={
                    "bandwidth_gbps": st.sampled_from(GBPS),
                    "ingress_gbps": st.sampled_from(GBPS),
                    "egress_gbps": st.sampled_from(GBPS),
                    "latency_ms": st.sampled_from((0.0, 5.0)),
                },
            )
        )
    return document


@given(gathered_documents())
@settings(max_examples=40)
def test_each_worker_sends_the_closed_forms_payloads(document):
    scenario = from_dict(document)
    result = simulate(scenario)
    workers = scenario.worker_count
    rounds = [
        (point.outer_step, point.payload_bytes)
        for point in schedule_of(scenario).sync_points(scenario)
    ]
    expected = {
        rank: sum(
            uploads(
                scenario.network.gather,
                workers,
                rank in chosen(scenario.seed, step, range(workers), scenario.schedule.gather_peers),
            )
            * payload
            for step, payload in rounds
        )
        for rank in range(workers)
    }
    comms = result.trace[result.trace["kind"] == "comm"]
    sent = comms.groupby("worker")["bytes"].sum().to_dict()
    assert sent == expected


@given(gathered_documents(), st.data())
@FIXTURES
def test_a_gathered_scenario_changed_at_one_place_is_loaded_or_refused_naming_it(
    tmp_path, document, data
):
    changed, _ = data.draw(mutated(document))
    path = tmp_path / "scenario.toml"
    path.write_text(toml_text(changed))
    if answer(lambda: load(path), path) is None:
        return
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(["simulate", str(path), "--max-events", "20000"])
    assert code in (0, 2) and len(err.getvalue().splitlines()) == (code == 2), err.getvalue()
