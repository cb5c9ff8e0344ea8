"""Regions joined by backbones: closed forms of rings that cross them, ring order, and the loader's rules."""

from __future__ import annotations

import copy

import pytest
import simpy
from helpers.regions import US_EU, document
from helpers.scenarios import make_scenario

from islands.analysis.sweep.grid import key_spec
from islands.scenarios import ScenarioError, ScenarioSource, load
from islands.simulator import simulate
from islands.simulator.budget import estimate
from islands.simulator.network.flows import FlowNetwork, max_min_rates
from islands.simulator.network.links import Link
from islands.validation.scaling import to_toml

S = 2e9  # 1e9 parameters in bf16
V4 = 1.5 * S  # ring all-reduce over four workers: 2(M-1)/M * S through every hop
GBPS = 1e9 / 8  # bytes per second in one Gbit/s
HOP_S = 0.010 + 0.040 + 0.010  # access, backbone, access


@pytest.mark.parametrize("model", ["alpha-beta", "flow"])
def test_a_ring_through_two_regions_crosses_each_way_once_and_pays_the_backbone(model):
    scenario = make_scenario(document=document(["us", "us", "eu", "eu"], US_EU, model=model))
    # hops us->us, us->eu, eu->eu, eu->us: each backbone direction carries the hop's bytes once, at
    # 0.5 Gbit/s below the 1 Gbit/s access links; every one of the 6 steps pays the slowest hop
    summary = simulate(scenario).summary
    assert summary["mean_sync_s"] == pytest.approx(6 * HOP_S + V4 / (0.5 * GBPS))
    assert summary["peak_bandwidth_gbps"] == pytest.approx(0.5)  # access links only


@pytest.mark.parametrize("model", ["alpha-beta", "flow"])
def test_a_ring_that_alternates_regions_crosses_each_backbone_twice_unless_optimised(model):
    alternating = document(["us", "eu", "us", "eu"], US_EU, model=model)
    summary = simulate(make_scenario(document=alternating)).summary
    assert summary["mean_sync_s"] == pytest.approx(
        6 * HOP_S + V4 / (0.25 * GBPS)
    )  # half a backbone each hop
    alternating["network"]["ring_order"] = "optimised"
    summary = simulate(make_scenario(document=alternating)).summary
    assert summary["mean_sync_s"] == pytest.approx(6 * HOP_S + V4 / (0.5 * GBPS))


def test_the_optimised_ring_takes_the_tour_whose_slowest_backbone_is_widest():
    # four regions on a fast square (10 Gbit/s) with slow diagonals (1 Gbit/s); listed a, c, b, d the
    # ring takes both diagonals, optimised it goes round the square
    backbones = [
        {"between": pair, "bandwidth_gbps": rate, "latency_ms": 40}
        for pair, rate in (
            (["a", "b"], 10.0),
            (["b", "c"], 10.0),
            (["c", "d"], 10.0),
            (["d", "a"], 10.0),
            (["a", "c"], 1.0),
            (["b", "d"], 1.0),
        )
    ]
    doc = document(["a", "c", "b", "d"], backbones)
    for island in doc["island"]:
        island["bandwidth_gbps"] = 100.0
    listed = simulate(make_scenario(document=doc)).summary
    assert listed["mean_sync_s"] == pytest.approx(6 * HOP_S + V4 / (1.0 * GBPS))
    optimised = simulate(make_scenario(["network.ring_order=optimised"], document=doc)).summary
    assert optimised["mean_sync_s"] == pytest.approx(6 * HOP_S + V4 / (10.0 * GBPS))


def test_a_flow_that_crosses_a_link_twice_gets_half_of_it_and_shares_it():
    backbone, other = Link(-1, "us>eu", 12.0), Link(0, "up", 100.0)
    twice = FlowNetwork(simpy.Environment()).transfer((backbone, backbone), 1.0, 1.0)
    once = FlowNetwork(simpy.Environment()).transfer((backbone, other), 1.0, 1.0)
    assert max_min_rates([twice]) == [6.0]
    assert max_min_rates([twice, once]) == [4.0, 4.0]  # three crossings share 12 B/s


def test_the_links_table_draws_each_backbone_direction():
    result = simulate(make_scenario(document=document(["us", "us", "eu", "eu"], US_EU)))
    backbone = result.links[result.links["island"] == "backbone"]
    assert sorted(backbone["direction"].unique()) == ["eu>us", "us>eu"]
    assert backbone["rate_gbps"].max() == pytest.approx(0.5)
    assert (backbone["worker"] == -1).all()


def test_a_decoupled_learner_reaches_the_syncer_over_the_backbone():
    doc = document(["us", "eu"], US_EU)
    doc["schedule"] = {
        "algorithm": "decoupled",
        "inner_steps": 100,
        "outer_steps": 2,
        "fragments": 1,
    }
    with pytest.raises(ScenarioError, match="syncer.region: is required once"):
        make_scenario(document=doc)
    doc["syncer"] = {"region": "us"}
    near = simulate(make_scenario(document=doc)).summary
    slower = simulate(make_scenario(["backbone.0.bandwidth_gbps=0.1"], document=doc)).summary
    assert slower["wall_time_s"] > near["wall_time_s"]


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda d: d["backbone"].clear(),
            "backbone: no backbone between regions 'eu' and 'us', which exchange bytes",
        ),
        (
            lambda d: d["island"][0].pop("region"),
            "island.0.region: is required once [[region]] entries are declared",
        ),
        (lambda d: d["region"].append({"name": "us"}), "region.2.name: 'us' is declared twice"),
        (
            lambda d: d["backbone"].append(copy.deepcopy(d["backbone"][0])),
            "backbone.1.between: a second backbone",
        ),
        (
            lambda d: d["backbone"][0].update(between=["us", "asia"]),
            "backbone.0.between: no [[region]] named 'asia'",
        ),
        (
            lambda d: d["backbone"][0].update(between="us"),
            'backbone.0.between: must be two names, e.g. ["us", "eu"]',
        ),
        (
            lambda d: d["island"][1].update(region="europe"),
            "island.1.region: no [[region]] named 'europe'",
        ),
        (
            lambda d: (d.pop("region"), d.pop("backbone")),
            "island.0.region: names region 'us', but no [[region]]",
        ),
    ],
)
def test_a_topology_that_does_not_hold_together_is_refused_in_one_line(change, message):
    doc = document(["us", "eu"], US_EU)
    change(doc)
    with pytest.raises(ScenarioError, match=message.replace("[", r"\[").replace("]", r"\]")):
        make_scenario(document=doc)


def test_set_and_grid_reach_backbones_by_index_and_star():
    doc = document(["us", "eu"], US_EU)
    assert make_scenario(["backbone.*.latency_ms=90"], document=doc).backbones[0].latency_ms == 90.0
    source = ScenarioSource(doc, "regions.toml")
    assert key_spec(source, "backbone.0.bandwidth_gbps")[1] == "bandwidth_gbps"
    with pytest.raises(
        ScenarioError, match="backbone.3.latency_ms: no backbone 3: the scenario has 1"
    ):
        make_scenario(["backbone.3.latency_ms=1"], document=doc)


def measured(doc: dict, tmp_path, csv_text: str | None = None, entries: list[dict] | None = None):
    """The document written to tmp_path with [[latency]] ``entries`` and an rtts.csv beside it."""
    if csv_text is not None:
        (tmp_path / "rtts.csv").write_text(csv_text)
        doc["network"]["rtt_csv"] = "rtts.csv"
    doc["latency"] = entries or []
    return make_scenario_file(doc, tmp_path)


def make_scenario_file(doc: dict, tmp_path):
    path = tmp_path / "scenario.toml"
    path.write_text(to_toml(doc))
    return path


@pytest.mark.parametrize("how", ["entry", "csv"])
def test_a_measured_round_trip_replaces_the_additive_latency_of_its_pair(tmp_path, how):
    doc = document(["us", "eu", "us", "eu"], US_EU)
    if how == "entry":
        path = measured(doc, tmp_path, entries=[{"between": ["w0", "w1"], "rtt_ms": 300.0}])
    else:
        path = measured(doc, tmp_path, csv_text="a,b,rtt_ms\nw1,w0,300\nw0,w2,1\n")
    # the hop w0 -> w1 now takes 150 ms one way and is the slowest of the ring's six steps
    summary = simulate(load(path)).summary
    assert summary["mean_sync_s"] == pytest.approx(6 * 0.150 + V4 / (0.25 * GBPS))


@pytest.mark.parametrize(
    "csv_text, entries, message",
    [
        ("a,b,rtt_ms\nw0,w1,fast\n", [], r"rtts.csv:2: rtt_ms must be a number \(got 'fast'\)"),
        ("a,b,rtt_ms\nw0,w1,-3\n", [], r"rtts.csv:2: rtt_ms must be >= 0 ms"),
        ("a,b,rtt_ms\nw0,w9,3\n", [], r"rtts.csv:2: no island named 'w9'"),
        ("a,b\nw0,w1\n", [], "needs a header a,b,rtt_ms"),
        (
            "a,b,rtt_ms\nw1,w0,3\n",
            [{"between": ["w0", "w1"], "rtt_ms": 4.0}],
            r"rtts.csv:2: the round trip between w1 and w0 is given twice \(also at latency.0.between\)",
        ),
    ],
)
def test_a_latency_matrix_that_does_not_hold_is_refused_naming_the_file_and_line(
    tmp_path, csv_text, entries, message
):
    path = measured(document(["us", "eu"], US_EU), tmp_path, csv_text=csv_text, entries=entries)
    with pytest.raises(ScenarioError, match=message):
        load(path)


def test_a_sweep_ships_the_csv_s_rows_not_its_path(tmp_path):
    path = measured(document(["us", "eu"], US_EU), tmp_path, csv_text="a,b,rtt_ms\nw0,w1,300\n")
    source = ScenarioSource.read(path)
    assert "rtt_csv" not in source.document["network"]
    assert source.document["latency"] == [{"between": ["w0", "w1"], "rtt_ms": 300.0}]
    assert source.scenario.latencies[0].rtt_ms == 300.0


def test_the_budget_and_the_tcp_floor_count_the_backbone_s_latency():
    # one 10 ms access each side and a 40 ms backbone: a 120 ms round trip, not the access links' 40 ms
    windowed = document(["us", "eu"], US_EU, tcp_window_bytes=1e6)
    scenario = make_scenario(document=windowed)
    assert scenario.farthest_hop_latency_s == pytest.approx(0.060)
    assert simulate(scenario).summary["wall_time_s"] <= estimate(scenario).run_length_s
    # a 1 kB window over a 5 s backbone: 8192 bit / 10.04 s = 816 bit/s, below the 1 kbit/s floor
    far = document(["us", "eu"], [{**US_EU[0], "latency_ms": 5000}], tcp_window_bytes=1024)
    with pytest.raises(
        ScenarioError,
        match=r"network.tcp_window_bytes: the TCP cap .* = 816 bit/s at an RTT of 10.04 s",
    ):
        make_scenario(document=far)


def test_a_measured_round_trip_longer_than_the_sum_sets_the_farthest_hop():
    measured = document(["us", "eu"], US_EU, tcp_window_bytes=1e6)
    measured["latency"] = [{"between": ["w0", "w1"], "rtt_ms": 300}]
    assert make_scenario(document=measured).farthest_hop_latency_s == pytest.approx(0.150)
