"""The plan of a top-k scenario: its density search against the closed form of a store round, the
crossover where gathering stops beating a dense ring against the roots worked by hand, and the
report's density slider.

covenant-72b: 72e9 values, 64 of each 4,096 kept at 2 bits (14 bits a kept value), 20 peers on
110 Mbit/s up and 500 Mbit/s down, each round one PUT and K = 20 GETs through a store that never
binds, 3 round trips of 100 ms (PUT, LIST, GET), 30 steps of 40 s.
"""

from __future__ import annotations

import json
import math

import pytest

from islands.analysis.planner.crossover import gather_crossover
from islands.analysis.planner.plan import density_candidates, make_utilisation_plan
from islands.analysis.planner.plan_tables import plan_tables, runs_text
from islands.analysis.report.whatif import run_whatif, whatif_axes
from islands.cli import main
from islands.errors import UserError
from islands.scenarios import ScenarioSource, load
from islands.scenarios.spec import MAX_REPLICAS
from islands.schedules.compression import TopK

COVENANT = "covenant-72b"
VALUES, CHUNK = 72_000_000_000, 4096
UP_GBPS, DOWN_GBPS, PEERS, LATENCY_S, COMPUTE_S = 0.11, 0.5, 20, 0.05, 30 * 40.0
SPARSE_10B = ["schedule.compression=topk", "schedule.bits=2", "schedule.error_feedback=0.95"]


def payload(topk: int, values: int = VALUES, bits: int = 2) -> int:
    return TopK(CHUNK, topk, bits).payload_bytes(values)


def store_round_s(topk: int, up_gbps: float = UP_GBPS, down_gbps: float = DOWN_GBPS) -> float:
    gigabits = payload(topk) * 8 / 1e9
    return gigabits / up_gbps + PEERS * gigabits / down_gbps + 6 * LATENCY_S


@pytest.fixture(scope="module")
def plan():
    return make_utilisation_plan(
        COVENANT, target=0.9, targets=(0.9,), fragments=False, densities=(1 / 128, 1 / 64), jobs=1
    )


def test_the_densities_searched_are_the_fractions_of_the_chunk_and_the_scenarios_own():
    scenario = load(COVENANT)
    assert density_candidates(scenario, None) == [16, 32, 64, 128, 256, 512, 1024]
    assert density_candidates(scenario, [0.01]) == [41, 64]  # round(40.96), and the scenario's k
    assert density_candidates(scenario, [1e-9]) == [1, 64]  # at least one value a chunk
    assert density_candidates(load("worked-example"), None) == []
    with pytest.raises(UserError, match="exchanges dense payloads"):
        density_candidates(load("worked-example"), [0.01])
    with pytest.raises(UserError, match=r"--densities: each must be in \(0, 1\]"):
        density_candidates(scenario, [0.0])


def test_each_densitys_bandwidth_is_the_store_rounds_closed_form(plan):
    # 1200 / (1200 + 21 s / b + 0.3) = 0.9, every link at b both ways
    allowed_s = COMPUTE_S * (1 / 0.9 - 1) - 6 * LATENCY_S
    assert sorted(plan.density_bandwidth) == [32, 64]
    for topk, found in plan.density_bandwidth.items():
        by_hand = (1 + PEERS) * payload(topk) * 8 / 1e9 / allowed_s
        assert found.value == pytest.approx(by_hand, rel=2e-3)
    assert plan.density_bandwidth[64].value == pytest.approx(2.49, abs=0.01)


def test_each_densitys_smallest_h_is_the_closed_form_at_the_scenarios_links(plan):
    # H x 40 / (H x 40 + T) >= 0.9  ->  H >= 9 T / 40
    for topk, found in plan.density_inner_steps.items():
        assert found.value == math.ceil(store_round_s(topk) * 0.9 / 0.1 / 40)
    assert plan.density_inner_steps[64].value == 175  # 773.5 s x 9 / 40 = 174.03, rounded up
    assert plan.density_inner_steps[32].value == 88  # half the payload, about half the H


def test_the_density_table_shows_the_searched_numbers(plan):
    text = "\n".join(table.text() for table in plan_tables(plan))
    assert "1.56% (scenario)" in text and "1.97 GB" in text and "984 MB" in text
    assert "2.49 Gbit/s" in text and " 175 " in text
    assert "(110 Mbit/s up, 500 Mbit/s down)" in text


def test_against_a_ring_gathering_stops_at_2_s_over_s():
    # the 10B worked example, SparseLoCo's payload of 273,437,600 bytes, 1 Gbit/s both ways
    found = gather_crossover(load("worked-example", SPARSE_10B))
    s = payload(64, 10_000_000_000)
    assert found.payload_bytes == s == 273_437_600
    rows = {row.dense_bits: row for row in found.rows}
    assert sorted(rows) == [4, 8, 16]  # the dense formats up to the model's bf16
    for row in rows.values():
        last = math.floor(2 * row.dense_bytes / s)  # 146 at bf16, 73 at int8
        assert row.beats["ring"] == row.beats["direct"] == ((2, last),)
    assert rows[16].beats["ring"] == ((2, 146),) and rows[8].beats["ring"] == ((2, 73),)


def test_through_a_store_gathering_every_payload_stops_at_the_larger_root():
    # K = M: M (M + 1) s < 2 (M - 1) S  ->  s M^2 + (s - 2 S) M + 2 S < 0, up to its larger root
    found = gather_crossover(load("worked-example", [*SPARSE_10B, "network.gather=store"]))
    s, big = payload(64, 10_000_000_000), 20e9
    root = ((2 * big - s) + math.sqrt((2 * big - s) ** 2 - 8 * big * s)) / (2 * s)
    bf16 = next(row for row in found.rows if row.dense_bits == 16)
    assert bf16.beats["store"] == ((2, math.floor(root)),) == ((2, 144),)


def test_a_binding_egress_bounds_the_store_where_the_docs_say():
    # K = 16, E = 100 Gbit/s, int8 (S = 10 GB), b = 1: s / b + M K s / E < 2 (M - 1) S / (M b), i.e.
    # K s b M^2 + (s E - 2 S E) M + 2 S E < 0: up to the larger root, 449 (docs/how-to/compression.md)
    scenario = load(
        "worked-example",
        [
            *SPARSE_10B,
            "network.gather=store",
            "schedule.gather_peers=16",
            "store.egress_gbps=100",
            "island.0.replicas=450",
        ],
    )
    s, big, egress, peers = payload(64, 10_000_000_000) * 8 / 1e9, 80.0, 100.0, 16
    a, b, c = peers * s, s * egress - 2 * big * egress, 2 * big * egress
    root = (-b + math.sqrt(b * b - 4 * a * c)) / (2 * a)
    int8 = next(row for row in gather_crossover(scenario).rows if row.dense_bits == 8)
    assert int8.beats["store"] == ((2, math.floor(root)),) == ((2, 449),)


def test_a_store_that_never_binds_with_fixed_k_beats_the_ring_at_every_m_from_where_it_starts():
    # covenant: s / u + 20 s / d = 773.2 s against 2 (M - 1) / M x S / r, S = 36 GB at 4 bits and
    # r = 110 Mbit/s: from M = 2 on (1,309 s at M = 2)
    found = gather_crossover(load(COVENANT))
    assert found.payload_bytes == payload(64) == 1_968_750_016
    for row in found.rows:
        assert row.beats["store"] == ((2, MAX_REPLICAS),)
        assert row.beats["ring"] == ((2, math.floor(2 * row.dense_bytes / found.payload_bytes)),)
    assert runs_text(found.rows[0].beats["store"]) == "every M from 2"
    assert runs_text(()) == "never" and runs_text(((2, 73),)) == "2 to 73"
    assert gather_crossover(load("worked-example")) is None


def test_a_store_whose_k_exceeds_the_crossover_stops_at_the_every_payload_root():
    # K = 100 of 200 at 1 Gbit/s against int4 (S = 5 GB): up to M = K every payload is fetched,
    # s M^2 + (s - 2 S) M + 2 S < 0 up to its larger root (34.5); beyond M = 100, 101 s = 27.6 GB is
    # more than the ring's 2 (M - 1) / M x S < 10 GB at every M
    found = gather_crossover(
        load(
            "worked-example",
            [
                *SPARSE_10B,
                "network.gather=store",
                "schedule.gather_peers=100",
                "island.0.replicas=200",
            ],
        )
    )
    s, big = payload(64, 10_000_000_000), 5e9
    root = ((2 * big - s) + math.sqrt((2 * big - s) ** 2 - 8 * big * s)) / (2 * s)
    int4 = next(row for row in found.rows if row.dense_bits == 4)
    assert int4.dense_bytes == big and 101 * s > 2 * big
    assert int4.beats["store"] == ((2, math.floor(root)),) == ((2, 34),)


def test_the_plan_json_carries_the_densities_and_the_crossover(capsys):
    code = main(
        [
            "plan",
            COVENANT,
            "--target-utilisation",
            "0.9",
            "--targets",
            "0.9",
            "--no-fragments",
            "--densities",
            "0.0078125",
            "--json",
            "--jobs",
            "1",
        ]
    )
    assert code == 0
    document = json.loads(capsys.readouterr().out)
    assert [row["topk"] for row in document["density"]] == [32, 64]
    own = document["density"][1]
    assert own["payload_bytes"] == payload(64) and own["density"] == 64 / CHUNK
    assert own["inner_steps"]["value"] == 175
    crossover = document["gather_crossover"]
    assert crossover["payload_bytes"] == payload(64) and crossover["gather"] == "store"
    int8 = next(row for row in crossover["dense"] if row["bits"] == 8)
    assert int8["gather_faster_at_workers"]["ring"] == [[2, 73]]


def test_a_dense_plan_has_no_density_search_and_no_crossover():
    plan = make_utilisation_plan(
        "worked-example", targets=(0.95,), fragments=False, overrides=["schedule.outer_steps=2"]
    )
    assert plan.density_bandwidth == {} and plan.crossover is None
    assert plan_tables(plan)[-1].title.startswith("Smallest H")


def test_a_compressed_scenario_has_a_density_slider_and_2_and_1_bits():
    axes = {axis.key: axis for axis in whatif_axes(load(COVENANT))}
    density = axes["density"]
    assert density.values == tuple(k / CHUNK for k in (16, 32, 64, 128, 256))
    assert density.start == 2 and density.overrides[2] == ()
    assert density.overrides[0] == ("schedule.topk=16",)
    assert axes["bits"].values == (1, 2, 4, 8, 16) and axes["bits"].start == 1
    assert "density" not in {axis.key for axis in whatif_axes(load("worked-example"))}


def test_the_density_slider_stops_at_one_value_and_at_the_whole_chunk():
    small = {a.key: a for a in whatif_axes(load(COVENANT, ["schedule.topk=2"]))}["density"]
    assert small.values == tuple(k / CHUNK for k in (1, 2, 4, 8))  # a quarter of 2 is 1, as half
    whole = {a.key: a for a in whatif_axes(load(COVENANT, ["schedule.topk=2048"]))}["density"]
    assert whole.values == tuple(k / CHUNK for k in (512, 1024, 2048, 4096))


def test_each_density_stop_sends_its_own_payload():
    source = ScenarioSource.read(COVENANT, ["schedule.outer_steps=1"])
    density = next(axis for axis in whatif_axes(source.scenario) if axis.key == "density")
    grid = run_whatif(source, [density], jobs=1)
    sent = [point["bytes_per_worker"] for point in grid.points]
    assert sent == [payload(k) for k in (16, 32, 64, 128, 256)]  # one PUT a round
