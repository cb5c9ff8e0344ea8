"""Every byte counted, worked by hand: the bytes of a ring attempt that a departure broke, of a member
dropped from one, of a download or a learner's round trip cut by its departure and of what is in
flight when the run stops are sent bytes (``bytes_per_worker``) and, apart, ``wasted_bytes_per_worker``;
a collective that restarted lasts, in ``mean_sync_s``, from its first attempt to its end: what its
members waited. Every player that plays churn agrees: the event model, the counts (a departure drawn
by hand) and the learners (rank for rank: ``tests/test_simulator_learners.py``); the others, which
play no churn, waste nothing. The links' integral: ``tests/test_properties_bytes.py``."""

from __future__ import annotations

import copy
import dataclasses

import pytest
from helpers.scenarios import BASE_DOCUMENT, make_scenario

from islands.scenarios import load
from islands.simulator import RunSetup, simulate
from islands.simulator.events.engine import Simulation
from islands.simulator.events.player import EVENT_PLAYER
from islands.simulator.fast import counts, returning
from islands.simulator.result import result_of
from islands.trace import NO_FRAGMENT

S = 2e9  # 1e9 parameters in bf16
RATE = 1.25e8  # bytes per second of a 1 Gbit/s link
DETECT_S = 30.0  # network.detection_timeout_s, the default
RING3_S = 2 * 2 / 3 * S / RATE  # a ring of three moves 2 x 2/3 x S per member: 21.33 s
RING2_S = 2 * 1 / 2 * S / RATE  # a ring of two moves S per member: 16 s


def fleet(replicas: int, *events: dict, **schedule) -> dict:
    doc = copy.deepcopy(BASE_DOCUMENT)
    doc["island"][0]["replicas"] = replicas
    doc["schedule"].update(schedule)
    doc["event"] = list(events)
    return doc


def test_a_ring_broken_mid_flight_is_sent_wasted_and_the_sync_spans_both_attempts():
    """Three workers, DiLoCo with H = 100 steps of 1 s. The first ring starts at 100 s; a-2 leaves at
    110 s, when each member has moved 10 s at 1 Gbit/s: 1.25 GB each, thrown away. The two others
    notice at 140 s and ring again from scratch (16 s); then two outer steps between two."""
    doc = fleet(3, {"at_s": 110.0, "island": "a-2", "kind": "leave"})
    result = simulate(make_scenario(document=doc))
    summary, trace = result.summary, result.trace
    assert summary["wall_time_s"] == pytest.approx(110 + DETECT_S + RING2_S + 2 * (100 + RING2_S))
    broken = 10 * RATE  # per member of the broken attempt
    wasted = trace[trace["kind"] == "wasted"]
    assert list(wasted["worker"]) == [0, 1, 2] and set(wasted["fragment"]) == {0}
    assert set(wasted["time_start_s"]) == {100.0} and set(wasted["time_end_s"]) == {110.0}
    assert list(wasted["bytes"]) == pytest.approx([broken] * 3)
    completed = 3 * 2 * S  # three syncs, each S from each of the two
    assert summary["bytes_per_worker"] == pytest.approx((3 * broken + completed) / 3)
    assert summary["wasted_bytes_per_worker"] == pytest.approx(broken)
    island = summary["islands"][0]
    assert island["bytes_per_worker"] == pytest.approx(summary["bytes_per_worker"])
    assert island["wasted_bytes_per_worker"] == pytest.approx(broken)
    # the first sync from its first attempt at 100 s to its end at 156 s; the others 16 s each
    first_sync_s = 110 + DETECT_S + RING2_S - 100
    assert summary["syncs"] == 3
    assert summary["mean_sync_s"] == pytest.approx((first_sync_s + 2 * RING2_S) / 3)


def test_a_collective_broken_twice_has_one_wasted_row_per_worker_over_its_attempts():
    """Four workers: the ring of four from 100 s breaks at 110 s (a-3 leaves: 10 s x 125 MB/s each);
    the three ring again from 140 s until a-2 leaves at 150 s (10 s more each); the two ring from
    180 s (16 s). Each worker's wasted row runs from the first attempt to its last break (or its
    departure), with the bytes of both; the sync lasts from 100 s to 196 s."""
    doc = fleet(
        4,
        {"at_s": 110.0, "island": "a-3", "kind": "leave"},
        {"at_s": 150.0, "island": "a-2", "kind": "leave"},
    )
    result = simulate(make_scenario(document=doc))
    summary, trace = result.summary, result.trace
    broken = 10 * RATE  # per member and broken attempt
    wasted = trace[trace["kind"] == "wasted"].set_index("worker")
    assert wasted["time_start_s"].to_dict() == {0: 100.0, 1: 100.0, 2: 100.0, 3: 100.0}
    assert wasted["time_end_s"].to_dict() == {0: 150.0, 1: 150.0, 2: 150.0, 3: 110.0}
    assert list(wasted["bytes"]) == pytest.approx([2 * broken, 2 * broken, 2 * broken, broken])
    assert summary["wasted_bytes_per_worker"] == pytest.approx(7 * broken / 4)
    assert summary["bytes_per_worker"] == pytest.approx((7 * broken + 3 * 2 * S) / 4)
    first_sync_s = 150 + DETECT_S + RING2_S - 100
    assert summary["mean_sync_s"] == pytest.approx((first_sync_s + 2 * RING2_S) / 3)


def test_a_joiners_download_cut_by_its_departure_is_sent_and_wasted():
    """A newcomer on a 0.5 Gbit/s link joins at 10 s and downloads the 2 GB state through its downlink
    (62.5 MB/s whoever sends it); it leaves at 20 s, 625 MB in, before the first sync at 100 s."""
    newcomer = {"name": "new", "step_time_s": 1.0, "bandwidth_gbps": 0.5, "present": False}
    doc = fleet(
        4,
        {"at_s": 10.0, "island": "new", "kind": "join"},
        {"at_s": 20.0, "island": "new", "kind": "leave"},
    )
    doc["island"].append(newcomer)
    result = simulate(make_scenario(document=doc))
    summary, trace = result.summary, result.trace
    cut = 10 * 0.5e9 / 8
    wasted = trace[trace["kind"] == "wasted"]
    assert list(wasted["worker"]) == [4] and list(wasted["fragment"]) == [NO_FRAGMENT]
    assert list(wasted["time_start_s"]) == [10.0] and list(wasted["time_end_s"]) == [20.0]
    assert list(wasted["bytes"]) == pytest.approx([cut])
    rings = 3 * 4 * 2 * 3 / 4 * S  # three syncs among the four members
    assert summary["workers"] == 5
    assert summary["bytes_per_worker"] == pytest.approx((rings + cut) / 5)
    assert summary["wasted_bytes_per_worker"] == pytest.approx(cut / 5)
    assert [island["wasted_bytes_per_worker"] for island in summary["islands"]] == pytest.approx(
        [0.0, cut]
    )


def test_a_learners_round_trip_cut_by_its_departure_is_sent_and_wasted():
    """Decoupled DiLoCo, two learners: each uploads S (16 s) after 100 steps. a-1 leaves at 108 s,
    8 s into its upload: 1 GB sent and thrown away (its learner redoes that outer step)."""
    doc = fleet(
        2,
        {"at_s": 108.0, "island": "a-1", "kind": "leave"},
        algorithm="decoupled",
        outer_steps=2,
        fragments=1,
        overlap_steps=0,
        quorum=1,
    )
    result = simulate(make_scenario(document=doc))
    summary, trace = result.summary, result.trace
    cut = 8 * RATE
    wasted = trace[trace["kind"] == "wasted"]
    assert list(wasted["worker"]) == [1] and list(wasted["fragment"]) == [0]
    assert list(wasted["time_start_s"]) == [100.0] and list(wasted["time_end_s"]) == [108.0]
    assert list(wasted["bytes"]) == pytest.approx([cut])
    assert summary["bytes_per_worker"] == pytest.approx((2 * S + cut) / 2)  # a-0 uploads twice
    assert summary["wasted_bytes_per_worker"] == pytest.approx(cut / 2)
    # a learner's round trip cut short is no sync: a-0's two round trips of 2 x 16 s
    assert summary["syncs"] == 2 and summary["mean_sync_s"] == pytest.approx(2 * RING2_S)


def test_a_ring_in_flight_when_the_run_stops_at_its_horizon_is_wasted():
    """Three workers, stopped at 110 s: the first ring, from 100 s, never completes."""
    setup = RunSetup.of(make_scenario(document=fleet(3)))
    budget = dataclasses.replace(EVENT_PLAYER.budget(setup), horizon_s=110.0)
    summary = result_of(setup, Simulation(setup, budget).play()).summary
    assert summary["horizon_reached"] and summary["syncs"] == 0 and summary["mean_sync_s"] == 0.0
    assert summary["bytes_per_worker"] == summary["wasted_bytes_per_worker"]
    assert summary["wasted_bytes_per_worker"] == pytest.approx(10 * RATE)


def test_the_counts_and_the_event_model_waste_a_broken_ring_alike(monkeypatch):
    """A 20 GB payload, four workers, one outer step of 750 s: the ring of four (240 s) starts at
    750 s; a member leaves at 850 s, 100 s in (12.5 GB each, thrown away); the three notice at 880 s
    and ring again (213 s). Drawn by hand for the counts, scheduled for the event model."""
    payload, rate, period_s, departure_s = 20e9, 0.125e9, 750.0, 850.0
    ring3_s = 2 * 2 / 3 * payload / rate
    doc = {
        "name": "four",
        "model": {"parameters": 10e9, "bytes_per_param": 2},
        "schedule": {"algorithm": "diloco", "inner_steps": 500, "outer_steps": 1},
        "island": [{"name": "dc", "replicas": 4, "step_time_s": 1.5, "bandwidth_gbps": 1.0}],
    }
    churning = copy.deepcopy(doc)
    churning["island"][0].update({"mtbf_s": 1e6, "mttr_s": 1e6})
    # each of the counts' steps draws the next change: none before the compute ends (at 750 s) nor
    # before the ring starts (at once), then member 0 leaves 100 s later; then none
    draws = iter([(1e30, 0.0), (1e30, 0.0), ((departure_s - period_s) * 4 / 1e6, 0.0)])
    monkeypatch.setattr(counts.Counts, "draw", lambda self: next(draws, (1e30, 0.0)))
    setup = RunSetup.of(make_scenario(document=churning))
    on_counts = result_of(
        setup, returning.RETURNING.play(setup, returning.RETURNING.budget(setup))
    ).summary
    doc["event"] = [{"at_s": departure_s, "island": "dc-0", "kind": "leave"}]
    events = simulate(make_scenario(document=doc), player="events").summary
    broken = 100 * rate
    for summary in (on_counts, events):
        assert summary["wall_time_s"] == pytest.approx(departure_s + DETECT_S + ring3_s)
        assert summary["wasted_bytes_per_worker"] == pytest.approx(4 * broken / 4)
        assert summary["bytes_per_worker"] == pytest.approx(
            (4 * broken + 3 * 2 * 2 / 3 * payload) / 4
        )
        assert summary["mean_sync_s"] == pytest.approx(departure_s + DETECT_S + ring3_s - period_s)


@pytest.mark.parametrize(
    "name, overrides",
    [("worked-example", []), ("worked-example", ["schedule.algorithm=decoupled"])],
)
def test_players_without_churn_waste_nothing(name, overrides):
    summary = simulate(load(name, overrides)).summary
    assert summary["player"] in ("lockstep", "one learner")
    assert summary["wasted_bytes_per_worker"] == 0.0
    assert all(island["wasted_bytes_per_worker"] == 0.0 for island in summary["islands"])


def test_collectives_a_failure_drops_are_wasted_but_no_attempt_of_a_sync():
    """A chip failure with ``schedule.elastic = false`` stops every worker and restarts the run from
    its checkpoint: the collectives in flight (Streaming DiLoCo's, which overlap the compute) are
    thrown away, as rows without a fragment: the sync that runs again later is a new one, not a
    restart of theirs."""
    overrides = [
        "schedule.algorithm=streaming",
        "island.0.replicas=4",
        "schedule.outer_steps=4",
        "island.0.chips=8",
        "island.0.chip_mtbf_s=40000",
        "island.0.recovery_s=60",
        "seed=2",
    ]
    result = simulate(load("worked-example", overrides), player="events")
    trace, summary = result.trace, result.summary
    wasted = trace[trace["kind"] == "wasted"]
    assert summary["restarts"] > 0 and len(wasted) > 0
    assert set(wasted["fragment"]) == {NO_FRAGMENT}
    assert summary["wasted_bytes_per_worker"] * summary["workers"] == pytest.approx(
        wasted["bytes"].sum()
    )
