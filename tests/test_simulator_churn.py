"""Leaving and joining: lost work, detection, weight downloads, random churn, determinism."""

from __future__ import annotations

import copy

import pytest
from helpers.scenarios import BASE_DOCUMENT, make_scenario

from islands.errors import UserError
from islands.scenarios import ScenarioError, load
from islands.simulator import simulate
from islands.summary import present_seconds
from islands.trainer.config import check_supported

S = 2e9
RING4_S = 1.5 * S / 1.25e8
RING3_S = 4 / 3 * S / 1.25e8
RING5_S = 1.6 * S / 1.25e8


def with_events(*events: dict, extra_islands: tuple = (), **schedule) -> dict:
    doc = copy.deepcopy(BASE_DOCUMENT)
    doc["island"] += list(extra_islands)
    doc["event"] = list(events)
    doc["schedule"].update(schedule)
    return doc


def test_departure_mid_interval_loses_exactly_that_interval():
    doc = with_events({"at_s": 150.0, "island": "a-3", "kind": "leave"})
    summary = simulate(make_scenario(document=doc)).summary
    # a-3 synced at 124 s and computed 26 s of the next interval before leaving: lost.
    assert summary["lost_compute_s"] == pytest.approx(150.0 - (100.0 + RING4_S))
    assert summary["leaves"] == 1
    # detected at 180 s, long before the 224 s barrier: the next two syncs run among three
    assert summary["wall_time_s"] == pytest.approx(100 + RING4_S + 2 * (100 + RING3_S))
    compute_s = 3 * 300 + (100 + 26)  # three stay all run; a-3 did 126 s before leaving
    present_s = 3 * summary["wall_time_s"] + 150.0  # a-3 was there for 150 s
    assert summary["compute_utilisation"] == pytest.approx(compute_s / present_s)
    assert summary["compute_utilisation_run"] == pytest.approx(
        compute_s / (4 * summary["wall_time_s"])
    )


def test_survivors_wait_for_the_detection_timeout():
    doc = with_events({"at_s": 90.0, "island": "a-3", "kind": "leave"})
    result = simulate(make_scenario(["network.detection_timeout_s=30"], document=doc))
    summary, trace = result.summary, result.trace
    # the three reach the barrier at 100 s but only learn of the departure at 120 s
    idle = trace[(trace["worker"] == 0) & (trace["kind"] == "idle")]
    assert list(idle["time_start_s"]) == [100.0] and list(idle["time_end_s"]) == [120.0]
    assert summary["lost_compute_s"] == pytest.approx(90.0)
    assert summary["wall_time_s"] == pytest.approx(120 + RING3_S + 2 * (100 + RING3_S))


def test_ddp_departure_mid_allreduce_stalls_until_the_ring_reforms():
    doc = with_events(
        {"at_s": 2.0, "island": "a-3", "kind": "leave"}, algorithm="ddp", outer_steps=2
    )
    summary = simulate(make_scenario(["network.detection_timeout_s=10"], document=doc)).summary
    # step 0: compute 1 s, ring from 1 s; broken at 2 s, detected at 12 s, redone among three
    assert summary["wall_time_s"] == pytest.approx(12.0 + RING3_S + 1.0 + RING3_S)
    assert summary["lost_compute_s"] == pytest.approx(1.0)


def test_joiner_downloads_in_the_background_takes_part_in_the_next_sync_then_computes():
    """The trainer's rule (trainer/elastic/joining.py): the download starts at the join, the joiner is one
    more member of the next ring (contributing nothing), then computes from the next outer step."""
    newcomer = {"name": "new", "step_time_s": 1.0, "bandwidth_gbps": 0.5, "present": False}
    doc = with_events({"at_s": 10.0, "island": "new", "kind": "join"}, extra_islands=(newcomer,))
    result = simulate(make_scenario(document=doc))
    trace = result.trace
    download = trace[(trace["worker"] == 4) & (trace["kind"] == "comm")].iloc[0]
    # 1e9 params * 2 B = 2 GB over its own 0.5 Gbit/s downlink: 32 s
    assert download["time_start_s"] == 10.0
    assert download["time_end_s"] == pytest.approx(10.0 + 2e9 / (0.5e9 / 8))
    assert download["bytes"] == 2e9 and download["fragment"] == -1
    # the first sync's ring has five members, the joiner's 0.5 Gbit/s link the slowest of them
    ring5_via_joiner_s = 2 * 4 / 5 * S / (0.5e9 / 8)
    syncs = trace[(trace["kind"] == "comm") & (trace["outer_step"] == 0) & (trace["fragment"] == 0)]
    assert sorted(syncs["worker"]) == [0, 1, 2, 3, 4]
    assert set(syncs["bytes"]) == {2 * 4 / 5 * S}
    first_compute = trace[(trace["worker"] == 4) & (trace["kind"] == "compute")].iloc[0]
    assert first_compute["time_start_s"] == pytest.approx(100 + ring5_via_joiner_s)
    assert first_compute["outer_step"] == 1
    summary = result.summary
    assert summary["joins"] == 1
    # all three syncs have five members now, each paced by the newcomer's 0.5 Gbit/s
    assert summary["wall_time_s"] == pytest.approx(3 * (100 + ring5_via_joiner_s))
    downlink = result.links[(result.links["worker"] == 4) & (result.links["direction"] == "down")]
    assert downlink["rate_gbps"].iloc[0] == pytest.approx(0.5)


def test_leave_then_return_counts_presence_without_the_gap():
    doc = with_events(
        {"at_s": 50.0, "island": "a-3", "kind": "leave"},
        {"at_s": 60.0, "island": "a-3", "kind": "join"},
    )
    summary = simulate(make_scenario(["network.detection_timeout_s=5"], document=doc)).summary
    assert summary["leaves"] == 1 and summary["joins"] == 1
    assert summary["lost_compute_s"] == pytest.approx(50.0)
    # away from 50 s to 60 s, then downloads the weights and waits for the next boundary
    trace = simulate(make_scenario(["network.detection_timeout_s=5"], document=doc)).trace
    a3 = trace[trace["worker"] == 3]
    assert a3[a3["kind"] == "comm"]["time_start_s"].iloc[0] == 60.0
    assert present_seconds(trace)[3] == pytest.approx(summary["wall_time_s"] - 10.0)


def test_random_churn_is_seeded():
    overrides = ["island.0.mtbf_s=400", "island.0.mttr_s=100", "schedule.outer_steps=10"]
    first = simulate(make_scenario([*overrides, "seed=1"])).summary
    again = simulate(make_scenario([*overrides, "seed=1"])).summary
    other = simulate(make_scenario([*overrides, "seed=2"])).summary
    assert first == again
    assert first["leaves"] > 0
    assert (first["leaves"], first["lost_compute_s"]) != (other["leaves"], other["lost_compute_s"])
    assert first["outer_steps"] == 10


def test_a_run_that_churn_never_lets_finish_stops_at_the_horizon():
    # a worker leaves every ~20 s on average while an interval takes 100 s, and none comes back
    summary = simulate(make_scenario(["island.0.mtbf_s=20"])).summary
    assert summary["horizon_reached"] or summary["outer_steps"] < summary["outer_steps_planned"]
    assert summary["outer_steps"] < 3


def test_streaming_ends_when_the_last_fragment_is_applied():
    scenario = make_scenario(
        ["schedule.algorithm=streaming", "schedule.fragments=4", "schedule.overlap_steps=10"]
    )
    summary = simulate(scenario).summary
    assert summary["wall_time_s"] == pytest.approx(
        3 * 100.0
    )  # every fragment hides; the last is due at 300
    assert summary["islands"][0]["inner_steps"] == 300


def test_events_name_an_existing_island():
    with pytest.raises(
        ScenarioError,
        match=r"event.0.island: no island or worker named 'a-9' \(did you mean 'a-\d'\?\)",
    ):
        make_scenario(document=with_events({"at_s": 1.0, "island": "a-9", "kind": "leave"}))
    with pytest.raises(ScenarioError, match=r"event.0.kind: must be one of 'leave', 'join'"):
        make_scenario(document=with_events({"at_s": 1.0, "island": "a-1", "kind": "crash"}))


def partial(*events: dict, timeout_s: float, **schedule):
    doc = with_events(*events, **schedule)
    return simulate(
        make_scenario(
            ["network.on_departure=partial", f"network.detection_timeout_s={timeout_s}"],
            document=doc,
        )
    )


def test_partial_participation_finishes_the_ring_without_the_departed_member():
    # the first sync runs 100 s .. 124 s among four; a-3 leaves at 110 s. Restarted, the three would
    # redo their ring from the detection at 115 s; under "partial" they go on and end at 124 s
    # (detection at 115 s is earlier), then run two intervals among three
    result = partial({"at_s": 110.0, "island": "a-3", "kind": "leave"}, timeout_s=5)
    summary, trace = result.summary, result.trace
    assert summary["wall_time_s"] == pytest.approx(100 + RING4_S + 2 * (100 + RING3_S))
    assert summary["dropped_members"] == 1 and summary["leaves"] == 1
    assert summary["lost_compute_s"] == pytest.approx(
        100.0
    )  # a-3's interval never reached the model
    comm = trace[(trace["kind"] == "comm") & (trace["outer_step"] == 0)].set_index("worker")
    assert list(comm["time_end_s"]) == pytest.approx([100 + RING4_S] * 3)
    # a ring of four moves 2 * 3/4 * S per member; a-3 sent 10 of its 24 s worth before leaving, bytes
    # thrown away with its share: a wasted row
    assert list(comm["bytes"]) == pytest.approx([1.5 * S] * 3)
    dropped = trace[trace["kind"] == "wasted"]
    assert list(dropped["worker"]) == [3] and list(dropped["time_end_s"]) == [110.0]
    assert list(dropped["bytes"]) == pytest.approx([1.5 * S * 10 / RING4_S])
    assert summary["wasted_bytes_per_worker"] == pytest.approx(1.5 * S * 10 / RING4_S / 4)
    restarted = simulate(
        make_scenario(
            ["network.detection_timeout_s=5"],
            document=with_events({"at_s": 110.0, "island": "a-3", "kind": "leave"}),
        )
    )
    assert restarted.summary["wall_time_s"] == pytest.approx(115 + RING3_S + 2 * (100 + RING3_S))
    assert restarted.summary["dropped_members"] == 0


def test_partial_participation_waits_for_the_missing_part_until_the_timeout():
    # a-2 leaves at 105 s and a-3 at 120 s, mid-ring: the two left wait for their parts until 120 + 30 s,
    # after the bytes are through at 124 s; then two intervals between two (a ring of 2: S each way)
    ring2_s = S / 1.25e8
    result = partial(
        {"at_s": 105.0, "island": "a-2", "kind": "leave"},
        {"at_s": 120.0, "island": "a-3", "kind": "leave"},
        timeout_s=30,
    )
    summary, trace = result.summary, result.trace
    assert summary["dropped_members"] == 2
    assert summary["wall_time_s"] == pytest.approx(150 + 2 * (100 + ring2_s))
    first = trace[trace["kind"].isin(["comm", "wasted"]) & (trace["outer_step"] == 0)]
    ends = first.set_index(["kind", "worker"])["time_end_s"]
    assert ends.to_dict() == pytest.approx(
        {("comm", 0): 150.0, ("comm", 1): 150.0, ("wasted", 2): 105.0, ("wasted", 3): 120.0}
    )
    stall = trace[(trace["worker"] == 0) & (trace["kind"] == "stall") & (trace["outer_step"] == 0)]
    assert stall["time_end_s"].max() == pytest.approx(
        150.0
    )  # the survivors stall until the timeout


def test_partial_participation_breaks_the_ring_when_no_member_holding_the_state_is_left():
    doc = with_events({"at_s": 110.0, "island": "a", "kind": "leave"})  # every member at once
    summary = simulate(make_scenario(["network.on_departure=partial"], document=doc)).summary
    assert summary["dropped_members"] == 3 and summary["leaves"] == 4  # the last one breaks it
    assert not summary["complete"]


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["schedule.algorithm=decoupled"], "network.on_departure"),
        (["network.collective=tree"], "network.on_departure"),
        (["network.exchange_end_spread_s=0.1"], "network.exchange_end_spread_s"),
    ],
)
def test_partial_participation_is_refused_where_it_means_nothing(overrides, key):
    with pytest.raises(ScenarioError, match=key):
        make_scenario(["network.on_departure=partial", *overrides])


def test_the_real_trainer_refuses_partial_participation():
    with pytest.raises(UserError, match=r"network.on_departure: the real trainer restarts"):
        check_supported(make_scenario(["network.on_departure=partial"]))


def test_under_heavy_churn_partial_participation_keeps_more_of_the_fleet_computing():
    # 64 islands, each away every 6,400 s on average for 600 s: a departure every 100 s or so, while a
    # ring of 64 takes 315 s. Restarted rings rarely finish; partial ones always do.
    runs = {
        policy: simulate(
            load(
                "worked-example",
                [
                    "island.0.replicas=64",
                    "island.0.mtbf_s=6400",
                    "island.0.mttr_s=600",
                    "schedule.outer_steps=5",
                    f"network.on_departure={policy}",
                ],
            )
        ).summary
        for policy in ("restart", "partial")
    }
    assert runs["partial"]["dropped_members"] > 0 and runs["restart"]["dropped_members"] == 0
    assert runs["partial"]["wall_time_s"] < runs["restart"]["wall_time_s"] / 1.5
    assert runs["partial"]["compute_utilisation"] > 1.5 * runs["restart"]["compute_utilisation"]


def test_a_ring_broken_after_drops_restarts_as_a_new_attempt():
    # a-3 leaves at 110 s mid-ring and is dropped, then a-0 and a-1 (dropped) and a-2 (the last holder:
    # the ring breaks) at 115 s. a-0 returns at 116 s with nobody to fetch the state from: it computes
    # outer step 0 again, 116 s .. 216 s, and restarts the collective alone. Its row is the new
    # attempt's, not cut at its departure from the broken one (115 s, before the attempt started).
    doc = with_events(
        {"at_s": 110.0, "island": "a-3", "kind": "leave"},
        *({"at_s": 115.0, "island": f"a-{i}", "kind": "leave"} for i in range(3)),
        {"at_s": 116.0, "island": "a-0", "kind": "join"},
        outer_steps=1,
    )
    result = simulate(make_scenario(["network.on_departure=partial"], document=doc))
    assert result.summary["dropped_members"] == 3 and result.summary[
        "wall_time_s"
    ] == pytest.approx(216.0)
    comm = result.trace[result.trace["kind"] == "comm"]
    assert list(zip(comm["worker"], comm["time_start_s"], comm["time_end_s"])) == [
        (0, 216.0, 216.0)
    ]
