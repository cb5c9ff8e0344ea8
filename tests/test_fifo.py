"""One FIFO per island's egress (``network.egress_queue = "fifo"``, ``scenarios/fifo.py``,
``simulator/network/ring_caps.py``): the model's terms and a ring's sync computed by hand, its properties
(an efficiency in (0, 1] that never falls as the rate or the depth grow; fair queues priced as
before, bit for bit), both players agreeing, and its keys refused where they do nothing."""

from __future__ import annotations

import math

import pytest
from helpers.held_out import BASE, HOP_S, PARAMETERS, RATE, M, S
from helpers.scenarios import make_scenario
from hypothesis import given
from hypothesis import strategies as st

from islands.scenarios import ScenarioError
from islands.scenarios.fifo import FITTED, Fifo, fitted_k_s
from islands.scenarios.spec import CONGESTION_CONTROLS
from islands.simulator import RunSetup, simulate
from islands.simulator.network.collectives import RingAllReduce, ring_leg
from islands.simulator.network.ring_caps import ring_cap_bytes_per_s

VOLUME = 2 * (M - 1) / M * S  # bytes through each link per sync
RING_LATENCY_S = 2 * (M - 1) * HOP_S
# four streams through a 20 ms FIFO, k_s = 0.3, k_so = 0.1
FIFO = [
    'network.egress_queue="fifo"',
    "network.streams=4",
    "network.fifo_queue_ms=20",
    "network.fifo_k_s=0.3",
    "network.fifo_k_so=0.1",
]
# At 50 Mbit/s a GSO packet is 4 ms of the rate, 25,000 bytes (below 64 KiB): four flows keep
# 4 x 2 x 25,000 bytes standing, D = 0.032 s, of which the 20 ms FIFO holds 0.625: o = 0.375,
# d = 0.020 s. s = sqrt(4 x 10 / 50), c = 1: T_fifo / T_fair = 1 + sqrt(0.8) x (0.3 + 0.1 x 0.375).
STRETCH_50 = math.sqrt(0.8) * (0.3 + 0.1 * 0.375)  # 0.301869...
ACK_WAIT_50_S = 0.020


def both(overrides: list[str]) -> list[dict]:
    scenario = make_scenario(BASE + overrides)
    return [simulate(scenario).summary, simulate(scenario, player="events").summary]


def test_the_terms_at_50_mbit_s_by_hand():
    model = Fifo(flows=4, queue_s=0.020, k_s=0.3, k_so=0.1)
    assert model.standing_s(RATE) == pytest.approx(0.032, rel=1e-12)
    assert model.overflow(RATE) == pytest.approx(0.375, rel=1e-12)
    assert model.ack_wait_s(RATE) == pytest.approx(ACK_WAIT_50_S, rel=1e-12)
    assert model.efficiency(RATE) == pytest.approx(1 / (1 + STRETCH_50), rel=1e-12)
    assert 1 / (1 + STRETCH_50) == pytest.approx(0.76813, abs=1e-5)


def test_above_131_mbit_s_the_standing_packets_and_the_cost_shrink_as_one_over_the_rate():
    # 1 Gbit/s, two flows, 200 ms deep: each flow keeps two packets of 64 KiB, D = 4 x 65,536 /
    # 1.25e8 s, held whole (o = 0); c = 65,536 / (0.004 x 1.25e8) = 0.131072.
    model, rate = Fifo(flows=2, queue_s=0.2, k_s=0.3, k_so=0.1), 1e9 / 8
    assert model.ack_wait_s(rate) == pytest.approx(4 * 65536 / 1.25e8, rel=1e-12)
    assert model.overflow(rate) == 0.0
    assert model.efficiency(rate) == pytest.approx(
        1 / (1 + math.sqrt(0.02) * 0.131072 * 0.3), rel=1e-12
    )


def test_a_ring_behind_one_fifo_moves_its_bytes_at_the_model_s_share_of_the_link():
    efficiency = 1 / (1 + STRETCH_50)
    for summary in both(FIFO):
        assert summary["mean_sync_s"] == pytest.approx(
            RING_LATENCY_S + VOLUME / (efficiency * RATE), rel=1e-9
        )
        assert summary["peak_bandwidth_gbps"] == pytest.approx(efficiency * 0.05, rel=1e-9)


def test_the_acks_wait_lengthens_the_round_trip_tcp_s_window_covers():
    # A 16 KiB window per stream: under fair queues 4 x 16,384 / (2 x 0.002) = 16.4 MB/s, above the
    # link; behind the FIFO the round trip is 0.004 + d = 0.024 s: 2.73 MB/s, below e x the link.
    window_cap = 4 * 16384 / (2 * HOP_S + ACK_WAIT_50_S)
    assert window_cap < RATE / (1 + STRETCH_50)
    for summary in both(FIFO + ["network.tcp_window_bytes=16384"]):
        assert summary["mean_sync_s"] == pytest.approx(RING_LATENCY_S + VOLUME / window_cap)
    for summary in both(["network.streams=4", "network.tcp_window_bytes=16384"]):
        assert summary["mean_sync_s"] == pytest.approx(RING_LATENCY_S + VOLUME / RATE)


def test_a_fifo_at_no_cost_is_fair_queues():
    free = ['network.egress_queue="fifo"', "network.fifo_k_s=0", "network.fifo_k_so=0"]
    assert both(free) == both([])


def test_the_fitted_coefficients_are_taken_by_tcp():
    for control in CONGESTION_CONTROLS:
        scenario = make_scenario(
            BASE + ['network.egress_queue="fifo"', f'network.tcp_congestion_control="{control}"']
        )
        k_s, k_so = FITTED[control]
        # one flow through a 200 ms FIFO at 50 Mbit/s: D = 8 ms, o = 0, s = sqrt(0.2), c = 1
        efficiency = 1 / (1 + math.sqrt(0.2) * k_s)
        assert simulate(scenario).summary["mean_sync_s"] == pytest.approx(
            RING_LATENCY_S + VOLUME / (efficiency * RATE), rel=1e-9
        )
        assert k_so > 0  # read only where the FIFO overflows


def test_a_jittered_run_in_calls_agrees_between_the_players_rank_for_rank():
    scenario = make_scenario(
        BASE
        + FIFO
        + [
            "island.0.jitter_cv=0.2",
            'exchange.calls="per_tensor"',
            "exchange.tensors=40",
            "exchange.outer_step_s=0.02",
            "network.tcp_window_bytes=65536",
        ]
    )
    arrays, events = simulate(scenario), simulate(scenario, player="events", group_replicas=False)
    assert arrays.summary["mean_sync_s"] > both([])[0]["mean_sync_s"]
    for key in ("wall_time_s", "stall_s", "idle_s", "mean_sync_s", "bytes_per_worker"):
        assert arrays.summary[key] == pytest.approx(events.summary[key], rel=1e-12)


def test_the_slowest_egress_sets_the_share_of_unequal_islands():
    # islands at 50 and 200 Mbit/s: the ring is charged at the 50 Mbit/s egress, as one of equal links
    document = {
        "name": "two",
        "model": {"parameters": PARAMETERS, "bytes_per_param": 4},
        "schedule": {"algorithm": "diloco", "inner_steps": 8, "outer_steps": 2},
        "island": [
            {"name": "a", "replicas": 2, "step_time_s": 0.3, "bandwidth_gbps": 0.05},
            {"name": "b", "replicas": 2, "step_time_s": 0.3, "bandwidth_gbps": 0.2},
        ],
    }
    summary = simulate(make_scenario(FIFO, document)).summary
    assert summary["mean_sync_s"] == pytest.approx(VOLUME / (RATE / (1 + STRETCH_50)), rel=1e-9)


# --- properties ---------------------------------------------------------------------------------------

RATES = st.floats(1e3, 1e12)  # bytes/s: 8 kbit/s to 8 Tbit/s
MODELS = st.builds(
    Fifo,
    flows=st.integers(1, 1024),
    queue_s=st.floats(1e-4, 10.0),
    k_s=st.floats(0.0, 10.0),
    k_so=st.floats(0.0, 10.0),
)


@given(MODELS, RATES, RATES)
def test_the_efficiency_is_a_share_that_never_falls_as_the_rate_grows(model, rate, other):
    low, high = sorted((rate, other))
    assert 0 < model.efficiency(low) <= model.efficiency(high) <= 1


@given(MODELS, RATES, st.floats(1e-4, 10.0))
def test_the_efficiency_never_falls_as_the_fifo_deepens(model, rate, depth_s):
    shallow, deep = sorted((model.queue_s, depth_s))
    as_deep = [Fifo(model.flows, queue_s, model.k_s, model.k_so) for queue_s in (shallow, deep)]
    assert as_deep[0].efficiency(rate) <= as_deep[1].efficiency(rate)
    assert as_deep[0].ack_wait_s(rate) <= as_deep[1].ack_wait_s(rate)


@given(MODELS, RATES, st.floats(0.05, 1.0))
def test_a_measured_efficiency_gives_back_a_k_s_that_remakes_it(model, rate, efficiency):
    k_s = fitted_k_s(efficiency, rate, model)
    remade = Fifo(model.flows, model.queue_s, k_s, model.k_so).efficiency(rate)
    if k_s > 0:
        assert remade == pytest.approx(efficiency, rel=1e-9)
    else:  # its overflow alone costs as much: nothing is left to k_s
        assert remade <= efficiency * (1 + 1e-12)


@given(
    window=st.sampled_from((0.0, 16384.0, 4e6)),
    loss=st.sampled_from((0.0, 1e-4)),
    latency_ms=st.sampled_from((0.0, 1.0, 40.0)),
    efficiency=st.sampled_from((1.0, 0.79, 0.5)),
    streams=st.integers(1, 16),
)
def test_fair_queues_cap_a_ring_as_before(window, loss, latency_ms, efficiency, streams):
    """Fair queues (the default): the ring's cap is TCP's at its round trip, and a ring efficiency
    of its slowest link, the expression ``ring_leg`` had before the FIFO was priced."""
    scenario = make_scenario(
        BASE
        + [
            f"network.tcp_window_bytes={window}",
            f"network.loss_rate={loss}",
            f"island.0.latency_ms={latency_ms}",
            f"network.ring_efficiency={efficiency}",
            f"network.streams={streams}",
        ]
    )
    setup = RunSetup.of(scenario, group_replicas=False)
    participants = tuple(range(M))
    network, topology = scenario.network, setup.topology
    hop_s = 2 * latency_ms / 1e3
    links, _ = topology.ring_route(participants)
    before = network.tcp_cap_bytes_per_s(hop_s)
    if efficiency < 1:
        before = min(before, efficiency * min(link.capacity_bytes_per_s for link in links))
    assert ring_cap_bytes_per_s(network, topology, participants, links, hop_s) == before
    leg = ring_leg(RingAllReduce(participants, S), topology, network)
    assert leg.cap_bytes_per_s == before


# --- keys refused where they do nothing -----------------------------------------------------------


@pytest.mark.parametrize(
    "overrides, key, words",
    [
        (["network.fifo_queue_ms=50"], "network.fifo_queue_ms", 'under egress_queue = "fair"'),
        (["network.fifo_k_s=0.3"], "network.fifo_k_s", 'under egress_queue = "fair"'),
        (["network.fifo_k_so=0.3"], "network.fifo_k_so", 'under egress_queue = "fair"'),
        (["network.fifo_k_u=0.3"], "network.fifo_k_u", 'under egress_queue = "fair"'),
        (
            ['network.tcp_congestion_control="bbr"'],
            "network.tcp_congestion_control",
            'under egress_queue = "fair"',
        ),
        (
            ['network.egress_queue="fifo"', "network.ring_efficiency=0.9"],
            "network.ring_efficiency",
            "charges the FIFO twice",
        ),
        (
            ['network.egress_queue="fifo"', 'network.collective="hierarchical"'],
            "network.egress_queue",
            'network.collective = "hierarchical" is not priced by it',
        ),
        (
            ['network.egress_queue="fifo"', 'schedule.algorithm="decoupled"'],
            "network.egress_queue",
            'algorithm = "decoupled" has none',
        ),
        (
            [
                'network.egress_queue="fifo"',
                'schedule.compression="topk"',
                'network.gather="direct"',
            ],
            "network.egress_queue",
            'network.gather = "direct" is not priced by it',
        ),
        (
            [
                'network.egress_queue="fifo"',
                'network.tcp_congestion_control="bbr"',
                "network.fifo_k_s=0.1",
                "network.fifo_k_so=0.1",
            ],
            "network.tcp_congestion_control",
            "fifo_k_s and fifo_k_so are both given",
        ),
        (['network.egress_queue="lifo"'], "network.egress_queue", "must be one of"),
        (["network.fifo_queue_ms=0"], "network.fifo_queue_ms", "must be > 0"),
        (["network.fifo_queue_ms=20000"], "network.fifo_queue_ms", "must be <= 10000 ms"),
        (["network.fifo_k_s=11"], "network.fifo_k_s", "must be <= 10"),
        (["network.fifo_k_so=-1"], "network.fifo_k_so", "must be >= 0"),
        (["network.fifo_k_u=-1"], "network.fifo_k_u", "must be >= 0"),
        (["network.fifo_k_u=nan"], "network.fifo_k_u", "must be a finite number"),
        (["network.fifo_k_u=11"], "network.fifo_k_u", "must be <= 10"),
        (['network.tcp_congestion_control="reno"'], "network.tcp_congestion_control", "one of"),
    ],
)
def test_a_bad_or_idle_fifo_key_is_refused_naming_it(overrides, key, words):
    with pytest.raises(ScenarioError) as refused:
        make_scenario(BASE + overrides)
    assert refused.value.key == key and words in str(refused.value), refused.value


def test_the_budget_s_bound_on_a_run_holds_behind_a_fifo():
    """``run_length_s`` bounds the run: its ring rate takes the FIFO's share of the slowest egress (at
    the share of a 20 ms FIFO the bytes take 1.30 times as long as the link's rate allows)."""
    from islands.simulator.budget import estimate

    scenario = make_scenario(BASE + FIFO)
    wall_s = simulate(scenario).summary["wall_time_s"]
    assert wall_s == pytest.approx(
        5 * (8 * 0.3 + RING_LATENCY_S + VOLUME * (1 + STRETCH_50) / RATE), rel=1e-9
    )
    assert estimate(scenario).run_length_s >= wall_s


def test_a_wall_time_that_is_not_finite_is_refused_in_one_line_never_printed_as_nan():
    """Shrunk from ``network.ring_efficiency = 1e-320``, which passed "(0, 1]" and printed nan%
    with exit 0: the key's range now refuses it, and a scenario built past the ranges (the Python
    API) meets the result's own check."""
    import dataclasses

    scenario = make_scenario(BASE)
    past_the_ranges = dataclasses.replace(
        scenario, network=dataclasses.replace(scenario.network, ring_efficiency=1e-320)
    )
    with pytest.raises(
        ScenarioError, match=r"^test\.toml: the run's wall time came out (inf|nan) s"
    ):
        simulate(past_the_ranges)
