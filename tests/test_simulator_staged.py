"""Staged collectives: the hierarchical all-reduce's three stages and the binary tree's levels by
closed form, where each beats a ring and where it loses, their bytes per member, and the rules."""

from __future__ import annotations

import copy

import pytest
from helpers.scenarios import make_scenario

from islands.errors import UserError
from islands.scenarios import ScenarioError, load
from islands.simulator import RunSetup, network_model_for, simulate
from islands.simulator.budget import estimate, events_per_change
from islands.simulator.events.engine import Simulation
from islands.simulator.network.collectives import PendingCollective, RingAllReduce
from islands.simulator.replicas import groups
from islands.trainer.config import check_supported

GBPS = 1e9 / 8  # bytes per second in one Gbit/s


def two_regions(
    per_region: int, parameters: float, access_ms: float, backbone_ms: float, **network
) -> dict:
    """``per_region`` workers in us then as many in eu, 1 Gbit/s access links, a 0.5 Gbit/s backbone."""
    regions = ["us"] * per_region + ["eu"] * per_region
    return {
        "name": "hierarchy",
        "model": {"parameters": parameters, "bytes_per_param": 2},
        "schedule": {"algorithm": "diloco", "inner_steps": 100, "outer_steps": 2},
        "network": {"collective": "hierarchical", **network},
        "region": [{"name": "us"}, {"name": "eu"}],
        "backbone": [{"between": ["us", "eu"], "bandwidth_gbps": 0.5, "latency_ms": backbone_ms}],
        "island": [
            {
                "name": f"w{i}",
                "step_time_s": 1.0,
                "bandwidth_gbps": 1.0,
                "latency_ms": access_ms,
                "region": r,
            }
            for i, r in enumerate(regions)
        ],
    }


@pytest.mark.parametrize("model", ["alpha-beta", "flow"])
def test_reduce_ring_broadcast_take_their_closed_forms_and_leaders_send_more(model):
    s = 2e9  # 1e9 parameters in bf16
    result = simulate(make_scenario(document=two_regions(2, 1e9, 10, 40, model=model)))
    # reduce: w1 -> w0 and w3 -> w2 at once, one 20 ms hop and S at 1 Gbit/s; ring of the two leaders
    # over the 0.5 Gbit/s backbone: 2(R-1)/R S = S, 2 hops of 10 + 40 + 10 ms; broadcast as the reduce
    chain_s = 0.020 + s / GBPS
    ring_s = 2 * 0.060 + s / (0.5 * GBPS)
    assert result.summary["mean_sync_s"] == pytest.approx(2 * chain_s + ring_s)
    comm = result.trace[result.trace["kind"] == "comm"].groupby("worker")["bytes"].sum()
    assert comm.to_dict() == pytest.approx(
        {0: 2 * 2 * s, 1: 2 * s, 2: 2 * 2 * s, 3: 2 * s}
    )  # 2 syncs


def test_where_latency_rules_the_hierarchy_beats_one_ring():
    # 1,000 bf16 values over 4 + 4 workers, 1 ms access, a 100 ms backbone: the ring's 14 hops all pay
    # the backbone; the hierarchy pays it on the leaders' 2 hops only
    hierarchical = simulate(make_scenario(document=two_regions(4, 1e3, 1, 100))).summary
    ring = simulate(
        make_scenario(["network.collective=ring"], document=two_regions(4, 1e3, 1, 100))
    ).summary
    s = 2e3
    assert ring["mean_sync_s"] == pytest.approx(14 * 0.102 + 2 * 7 / 8 * s / (0.5 * GBPS))
    chain_s = 3 * 0.002 + s / GBPS
    assert hierarchical["mean_sync_s"] == pytest.approx(2 * chain_s + 2 * 0.102 + s / (0.5 * GBPS))
    assert hierarchical["mean_sync_s"] < ring["mean_sync_s"] / 6


def test_without_regions_it_is_a_reduce_and_a_broadcast_along_one_chain():
    # the worked example: 8 islands at 1 Gbit/s, S = 20 GB, no latency: S / 1 Gbit/s twice, 320 s
    summary = simulate(load("worked-example", ["network.collective=hierarchical"])).summary
    assert summary["mean_sync_s"] == pytest.approx(2 * 20e9 / GBPS)
    assert summary["compute_utilisation"] == pytest.approx(750 / (750 + 320))


def test_a_departure_restarts_it_among_the_survivors_and_the_budget_bounds_it():
    document = two_regions(3, 1e9, 10, 40)
    document["event"] = [{"at_s": 110.0, "kind": "leave", "island": "w4"}]
    scenario = make_scenario(document=document)
    result = simulate(scenario)
    assert result.summary["complete"] and result.summary["leaves"] == 1
    budget = estimate(scenario)
    assert result.summary["events"] <= budget.events
    assert result.summary["wall_time_s"] <= budget.run_length_s
    second = result.trace[(result.trace["kind"] == "comm") & (result.trace["outer_step"] == 1)]
    assert sorted(second["worker"]) == [0, 1, 2, 3, 5]  # w4 left during the first sync's stages


def test_a_change_in_a_staged_collective_plays_its_stages_again():
    """A change costs 6 events on a ring (its restart included, as measured); in a hierarchical
    collective of two regions (a reduce and a broadcast per region and the leaders' ring: 5 legs of
    3.5 events, and its process's 4) a departure mid-way restarts them all, 18 events more than a
    ring's 3.5, weighted by the share of an outer step spent in collectives: by hand, a quarter."""
    assert events_per_change(load("worked-example"), 300.0, 100.0) == 6
    staged = make_scenario(document=two_regions(3, 1e9, 10, 40))
    assert events_per_change(staged, 300.0, 100.0) == pytest.approx(6 + (5 * 3.5 + 4 - 3.5) / 4)


def test_every_worker_runs_for_itself_and_only_a_coupled_mean_without_end_spread_takes_it():
    scenario = load("worked-example", ["network.collective=hierarchical"])
    assert [count for _, count in groups(scenario, scenario.workers())] == [1] * 8
    for overrides, key in (
        (["trainer.aggregation=median"], "network.collective"),
        (["schedule.algorithm=decoupled"], "network.collective"),
        (["network.exchange_end_spread_s=0.01"], "network.exchange_end_spread_s"),
    ):
        with pytest.raises(ScenarioError, match=key):
            load("worked-example", ["network.collective=hierarchical", *overrides])


def test_the_trainer_refuses_it_in_one_line():
    with pytest.raises(
        UserError, match=r"network.collective: the real trainer runs a ring all-reduce"
    ):
        check_supported(load("worked-example", ["network.collective=hierarchical"]))
    document = copy.deepcopy(two_regions(2, 1e9, 10, 40))
    document["network"]["collective"] = "ring"
    check_supported(make_scenario(document=document))


def star(members: int, parameters: float, latency_ms: float, **network) -> dict:
    """``members`` islands at 1 Gbit/s with ``latency_ms`` each, no regions."""
    return {
        "name": "star",
        "model": {"parameters": parameters, "bytes_per_param": 2},
        "schedule": {"algorithm": "diloco", "inner_steps": 100, "outer_steps": 2},
        "network": {"collective": "tree", **network},
        "island": [
            {"name": f"w{i}", "step_time_s": 1.0, "bandwidth_gbps": 1.0, "latency_ms": latency_ms}
            for i in range(members)
        ],
    }


def test_a_tree_reduces_and_broadcasts_level_by_level_with_siblings_sharing_their_parent_s_link():
    s = 2e9
    scenario = make_scenario(document=star(4, 1e9, 10))
    assert network_model_for(scenario) == "flow"
    result = simulate(scenario)
    # member 3 -> 1; then 1 and 2 -> 0, sharing 0's downlink; then 0 -> 1 and 2, sharing 0's uplink;
    # then 1 -> 3: four levels of one 20 ms hop, moving S, 2S, 2S and S at 1 Gbit/s
    assert result.summary["mean_sync_s"] == pytest.approx(4 * 0.020 + 6 * s / GBPS)
    comm = result.trace[result.trace["kind"] == "comm"].groupby("worker")["bytes"].sum()
    assert comm.to_dict() == pytest.approx({0: 2 * 2 * s, 1: 2 * 2 * s, 2: 2 * s, 3: 2 * s})


def test_over_many_members_a_tree_pays_fewer_latencies_than_a_ring():
    # 1,000 bf16 values over 16 members with 50 ms each: the ring's 30 hops of 100 ms against the
    # tree's 2 x ceil(log2 17) - 2 = 8 levels (bytes take microseconds)
    tree = simulate(make_scenario(document=star(16, 1e3, 50))).summary
    ring = simulate(make_scenario(["network.collective=ring"], document=star(16, 1e3, 50))).summary
    assert ring["mean_sync_s"] == pytest.approx(30 * 0.100, rel=1e-3)
    assert tree["mean_sync_s"] == pytest.approx(8 * 0.100, rel=1e-3)
    assert tree["events"] <= estimate(make_scenario(document=star(16, 1e3, 50))).events


def test_a_tree_under_the_alpha_beta_model_is_refused():
    with pytest.raises(
        ScenarioError, match=r"network.model: alpha-beta prices each transfer alone"
    ):
        make_scenario(document=star(4, 1e9, 10, model="alpha-beta"))


@pytest.mark.parametrize("collective", ["hierarchical", "tree"])
def test_a_last_survivor_s_collective_moves_nothing_and_the_run_finishes(collective):
    document = star(2, 1e9, 10, collective=collective)
    document["event"] = [{"at_s": 50.0, "kind": "leave", "island": "w1"}]
    summary = simulate(make_scenario(document=document)).summary
    assert summary["complete"] and summary["leaves"] == 1
    assert summary["islands"][0]["bytes_per_worker"] == 0.0  # w0 alone at both syncs
    assert summary["mean_sync_s"] == 0.0


@pytest.mark.parametrize("collective", ["hierarchical", "tree"])
def test_a_staged_collective_is_in_flight_from_the_instant_it_starts(collective):
    # so that a departure in that same instant breaks it, and no second start doubles it
    scenario = make_scenario(document=star(4, 1e9, 10, collective=collective))
    simulation = Simulation(RunSetup.of(scenario), estimate(scenario))
    pending = PendingCollective(
        (0, 0), 2e9, RingAllReduce, {0, 1, 2, 3}, simulation.env.event(), {0, 1, 2, 3}
    )
    simulation.exchanges.pending[pending.key] = pending
    simulation.exchanges.start(pending)
    assert pending.in_flight and not pending.ready()


def tree_over(regions: dict[str, str], ring_order: str) -> float:
    """Mean sync of a 2 GB payload's tree over four 1 Gbit/s islands (no access latency) in ``regions``
    (island name -> region) joined by a 0.5 Gbit/s, 40 ms backbone."""
    document = {
        "name": "tree-regions",
        "model": {"parameters": 1e9, "bytes_per_param": 2},
        "schedule": {"algorithm": "diloco", "inner_steps": 100, "outer_steps": 2},
        "network": {"collective": "tree", "model": "flow", "ring_order": ring_order},
        "region": [{"name": "us"}, {"name": "eu"}],
        "backbone": [{"between": ["us", "eu"], "bandwidth_gbps": 0.5, "latency_ms": 40}],
        "island": [
            {"name": name, "region": region, "step_time_s": 1.0, "bandwidth_gbps": 1.0}
            for name, region in regions.items()
        ],
    }
    return simulate(make_scenario(document=document)).summary["mean_sync_s"]


def test_an_optimised_tree_crosses_the_backbone_once_where_the_ranked_one_crosses_three_times():
    """Ranked a(us), b(eu), c(eu), d(us): root a, its children b and c, b's child d: three pairs
    cross. Level by level (S = 2 GB, access 1.25e8 B/s, backbone 6.25e7 B/s, 40 ms):
    up d>b alone on the backbone 32.04 s, b>a and c>a share it 64.04 s, and back down the same,
    192.16 s. Optimised: a and d together, b and c together in pre-order (the smaller subtree first):
    a at the root, b under it with c under b, d beside b: one crossing pair. Up c>b 16 s, then b>a
    over the backbone and d>a beside it, sharing a's downlink at 6.25e7 each, 32.04 s; down the same:
    96.08 s. The ring's grouping laid out level by level (a, d, b, c) would cross twice (128.16 s)."""
    regions = {"a": "us", "b": "eu", "c": "eu", "d": "us"}
    assert tree_over(regions, "ranked") == pytest.approx(192.16, rel=1e-9)
    assert tree_over(regions, "optimised") == pytest.approx(96.08, rel=1e-9)


def test_an_optimised_tree_keeps_a_ranked_order_that_already_crosses_least():
    regions = {"a": "us", "b": "eu", "c": "us", "d": "eu"}  # root a, b and c under it, d under b
    assert tree_over(regions, "optimised") == pytest.approx(96.08, rel=1e-9)
    assert tree_over(regions, "ranked") == pytest.approx(96.08, rel=1e-9)
