"""Lockstep runs played with arrays (``simulator/fast/lockstep.py``) give the event model's result rank for
rank: the same draws from the same generators, the same trace, links and summary."""

from __future__ import annotations

import pandas as pd
import pytest
from helpers.replicas import GBPS, REGIONS, TWO_KINDS, fleet
from helpers.scenarios import make_scenario
from hypothesis import given, settings
from hypothesis import strategies as st

from islands.scenarios import load
from islands.simulator import RunSetup, chosen, simulate
from islands.simulator.budget import BudgetExceeded

TOPK = ["schedule.compression=topk", "schedule.bits=2"]
DDP_BUCKETS = [
    "schedule.algorithm=ddp",
    "schedule.backward_overlap=0.5",
    'exchange.calls="buckets"',
    "exchange.bucket_cap_mb=300",
    "exchange.call_overhead_s=0.001",
]
JITTERED = [{**TWO_KINDS[0], "jitter_cv": 0.05}, {**TWO_KINDS[1], "jitter_cv": 0.2}]
CASES = {
    "diloco, identical replicas": (TWO_KINDS, {}, []),
    "diloco, jitter on both islands": (JITTERED, {}, []),
    "diloco, backward overlap": (JITTERED, {}, ["schedule.backward_overlap=0.5"]),
    "ddp, jitter": (JITTERED, {}, ["schedule.algorithm=ddp", "schedule.outer_steps=6"]),
    "ddp, buckets during the backward pass, jitter": (
        JITTERED,
        {},
        [*DDP_BUCKETS, "schedule.outer_steps=6"],
    ),
    "ddp, buckets during the backward pass, compute-bound": (
        JITTERED,
        {},
        [*DDP_BUCKETS, "schedule.outer_steps=6", "island.*.bandwidth_gbps=2000"],
    ),
    "all-gather (median)": (JITTERED, {}, ["trainer.aggregation=median"]),
    "regions, optimised ring": (
        [
            {**JITTERED[0], "region": "us"},
            {**JITTERED[1], "region": "eu"},
            {**JITTERED[0], "name": "dc2", "region": "us"},
        ],
        REGIONS,
        ["network.ring_order=optimised"],
    ),
    "streaming under the flow model, jitter": (JITTERED, {}, ["schedule.algorithm=streaming"]),
    "eager, jitter": (JITTERED, {}, ["schedule.algorithm=eager"]),
    "streaming, all-gather, regions": (
        [{**JITTERED[0], "region": "us"}, {**JITTERED[1], "region": "eu"}],
        REGIONS,
        ["schedule.algorithm=streaming", "trainer.aggregation=trimmed_mean"],
    ),
    "top-k through a store in another region, K of M, jitter": (
        [{**JITTERED[0], "region": "us"}, {**JITTERED[1], "region": "eu"}],
        {**REGIONS, "store": {"ingress_gbps": 2.0, "egress_gbps": 1.5, "region": "eu"}},
        [*TOPK, "network.gather=store", "schedule.gather_peers=5"],
    ),
    "top-k gathered direct, K of M, streaming, jitter": (
        JITTERED,
        {},
        [*TOPK, "network.gather=direct", "schedule.gather_peers=3", "schedule.algorithm=streaming"],
    ),
    "ungrouped, more syncs than a chunk": (
        JITTERED,
        {},
        ["schedule.outer_steps=300", "schedule.inner_steps=3"],
    ),
}


def player_of(scenario) -> str:
    """The player ``simulate`` takes for the scenario."""
    return chosen(RunSetup.of(scenario)).name


def assert_same_summary(arrays: dict, events: dict) -> None:
    for key, value in events.items():
        if key == "islands":
            for island_arrays, island_events in zip(arrays[key], value):
                assert_same_summary(island_arrays, island_events)
        elif key == "events":
            assert arrays[key] == 0 and value > 0
        elif key == "player":
            assert (arrays[key], value) == ("lockstep", "events")
        elif isinstance(value, float):
            assert arrays[key] == pytest.approx(value, rel=1e-12, abs=1e-12), key
        else:
            assert arrays[key] == value, key


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("grouped", [True, False])
def test_lockstep_arrays_give_the_event_models_run_rank_for_rank(case, grouped):
    islands, sections, overrides = CASES[case]
    scenario = make_scenario(overrides, document=fleet(islands, **sections))
    assert player_of(scenario) == "lockstep"
    arrays = simulate(scenario, group_replicas=grouped)
    events = simulate(scenario, group_replicas=grouped, player="events")
    assert_same_summary(arrays.summary, events.summary)
    pd.testing.assert_frame_equal(arrays.trace, events.trace, rtol=0, atol=0)
    pd.testing.assert_frame_equal(arrays.links, events.links, rtol=0, atol=0)


@pytest.mark.parametrize(
    "overrides",
    [
        ["network.model=flow"],
        ["island.0.mtbf_s=1000"],
        ["schedule.barrier=adaptive"],
        ["network.exchange_cpu_s_per_value=1e-9"],
        ["island.*.burst_bytes=2e6"],
        ["network.collective=tree"],
    ],
)
def test_what_moves_one_worker_alone_is_played_event_by_event(overrides):
    scenario = make_scenario(overrides, document=fleet(TWO_KINDS))
    assert player_of(scenario) != "lockstep"


def test_the_slowest_worker_sets_the_pace_by_hand():
    # 3 + 5 workers at 0.5 s and 0.8 s per step, H = 20: every interval waits 16 s for the slow island,
    # then the ring over M = 8 at the 0.2 Gbit/s uplink moves 2 * 7/8 * 2e8 B, after 14 hops of 40 ms
    # (the slowest hop: two lab workers, 20 ms each).
    scenario = make_scenario(
        ["schedule.fragments=1", "schedule.overlap_steps=0"], document=fleet(TWO_KINDS)
    )
    summary = simulate(scenario).summary
    sync_s = 14 * 0.040 + 2 * 7 / 8 * 2e8 / (0.2 * GBPS)
    assert summary["events"] == 0
    assert summary["mean_sync_s"] == pytest.approx(sync_s)
    assert summary["wall_time_s"] == pytest.approx(4 * (16 + sync_s))
    assert summary["idle_s"] == pytest.approx(
        4 * (16 - 10) * 3 / 8
    )  # the fast island's 3 workers wait 6 s
    assert summary["stall_s"] == pytest.approx(4 * sync_s)


def test_a_fleet_beyond_the_event_budget_runs_but_its_trace_is_refused_in_one_line():
    # 10,000 jittered workers x 300 syncs would be 7.5 million events: no events at all with arrays
    scenario = load(
        "worked-example",
        ["island.0.replicas=10000", "schedule.outer_steps=300", "island.0.jitter_cv=0.05"],
    )
    result = simulate(scenario)
    assert result.summary["workers"] == 10_000 and result.summary["syncs"] == 300
    assert result.summary["idle_s"] > 0  # the jitter makes every worker but the slowest wait
    with pytest.raises(BudgetExceeded, match="--max-events: the trace would have about 1.2e"):
        _ = result.trace


def test_simulate_refuses_a_trace_too_large_before_the_run_and_writes_nothing(capsys, tmp_path):
    from islands.cli import main

    out = tmp_path / "trace.csv"
    code = main(
        [
            "simulate",
            "worked-example",
            "--set",
            "island.0.replicas=10000",
            "--set",
            "schedule.outer_steps=300",
            "--set",
            "island.0.jitter_cv=0.05",
            "--trace",
            str(out),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and not out.exists()
    assert err.count("\n") == 1 and "--max-events: the trace would have about 1.2e+07 rows" in err


ONE_WORKER = {  # one simulated worker: an island's replicas grouped, or one replica (``Lockstep.play_one``)
    "diloco, 8 replicas grouped": ["island.0.replicas=8"],
    "ddp, backward overlap": [
        "schedule.algorithm=ddp",
        "schedule.outer_steps=40",
        "schedule.backward_overlap=0.5",
    ],
    "ddp, buckets during the backward pass, compute-bound": [
        *DDP_BUCKETS,
        "schedule.outer_steps=40",
        "exchange.bucket_cap_mb=2000",
        "island.0.bandwidth_gbps=1e5",
    ],
    "streaming, 3 replicas at 0.4 Gbit/s": [
        "schedule.algorithm=streaming",
        "island.0.replicas=3",
        "island.0.bandwidth_gbps=0.4",
        "schedule.inner_steps=100",
        "schedule.fragments=5",
        "schedule.overlap_steps=5",
    ],
    "eager, all-gather, more syncs than a chunk": [
        "schedule.algorithm=eager",
        "schedule.inner_steps=20",
        "schedule.fragments=20",
        "schedule.outer_steps=60",
        "trainer.aggregation=median",
    ],
    "streaming, every transfer hidden": ["schedule.algorithm=streaming"],
    "streaming, comm-bound": [
        "schedule.algorithm=streaming",
        "schedule.inner_steps=50",
        "schedule.fragments=2",
        "schedule.overlap_steps=2",
        "island.0.bandwidth_gbps=3.7",
        "island.0.latency_ms=35",
    ],
}


@pytest.mark.parametrize("case", ONE_WORKER)
def test_one_simulated_worker_played_with_floats_gives_the_event_models_bits(case):
    scenario = load("worked-example", ONE_WORKER[case])
    assert len(RunSetup.of(scenario).groups) == 1 and player_of(scenario) == "lockstep"
    floats = simulate(scenario)
    events = simulate(scenario, player="events")
    assert {
        key: value for key, value in floats.summary.items() if key not in ("events", "player")
    } == {
        key: value for key, value in events.summary.items() if key not in ("events", "player")
    }  # to the last bit
    pd.testing.assert_frame_equal(floats.links, events.links, rtol=0, atol=0)
    pd.testing.assert_frame_equal(
        floats.trace, events.trace, rtol=0, atol=0
    )  # replayed with arrays


def test_the_worked_examples_plan_candidates_played_with_floats_give_the_event_models_summary():
    # every coupled candidate of `islands plan worked-example --objective time-to-loss` with H >= 300 (214)
    # (all 343 agree; the smaller H have thousands of collectives each, slow event by event)
    from islands.analysis.planner.objective import candidates
    from islands.scenarios import ScenarioError, ScenarioSource
    from islands.schedules import schedule_of

    source = ScenarioSource.read("worked-example")
    budget_steps = schedule_of(source.scenario).total_steps(source.scenario.schedule)
    played = 0
    for candidate in candidates(
        source.scenario, ["ddp", "diloco", "streaming", "eager"], budget_steps, {}
    ):
        if candidate.inner_steps is not None and candidate.inner_steps < 300:
            continue
        try:
            scenario = source.variant(*candidate.overrides(budget_steps))
        except ScenarioError:
            continue  # refused by the schedule's rules, as the plan refuses it
        assert len(RunSetup.of(scenario).groups) == 1
        floats, events = simulate(scenario).summary, simulate(scenario, player="events").summary
        assert {k: v for k, v in floats.items() if k not in ("events", "player")} == {
            k: v for k, v in events.items() if k not in ("events", "player")
        }, candidate
        played += 1
    assert played == 214


@settings(max_examples=12, deadline=None, derandomize=True)
@given(
    st.sampled_from(
        [
            ["schedule.algorithm=ddp", "schedule.outer_steps=30"],
            [*DDP_BUCKETS[:1], *DDP_BUCKETS[2:], "schedule.outer_steps=30"],
            ["schedule.outer_steps=5"],
            [
                "schedule.algorithm=streaming",
                "schedule.inner_steps=50",
                "schedule.fragments=5",
                "schedule.overlap_steps=4",
                "schedule.outer_steps=4",
            ],
            [
                "schedule.algorithm=eager",
                "schedule.inner_steps=20",
                "schedule.fragments=2",
                "schedule.outer_steps=6",
            ],
        ]
    ),
    st.floats(0.02, 40.0),
    st.floats(0.0, 90.0),
    st.sampled_from([0.0, 0.5]),
    st.sampled_from(["mean", "median"]),
)
def test_drawn_runs_of_one_worker_played_with_floats_give_the_event_models_bits(
    schedule, gbps, latency_ms, lead, aggregation
):
    # odd rates and latencies make collectives that end mid-compute or keep the worker waiting
    scenario = load(
        "worked-example",
        [
            *schedule,
            f"island.0.bandwidth_gbps={gbps}",
            f"island.0.latency_ms={latency_ms}",
            f"schedule.backward_overlap={lead}",
            f"trainer.aggregation={aggregation}",
        ],
    )
    assert len(RunSetup.of(scenario).groups) == 1 and player_of(scenario) == "lockstep"
    floats, events = simulate(scenario), simulate(scenario, player="events")
    assert {
        key: value for key, value in floats.summary.items() if key not in ("events", "player")
    } == {
        key: value for key, value in events.summary.items() if key not in ("events", "player")
    }  # to the last bit
    pd.testing.assert_frame_equal(floats.links, events.links, rtol=0, atol=0)
