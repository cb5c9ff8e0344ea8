"""Unequal links behind one FIFO per egress (``scenarios/fifo.py`` "Unequal links",
``simulator/network/ring_caps.py``): a member whose download the upload of a member feeding it fills
(around a ring its predecessor; in the trainer's all-to-all the fastest other) keeps
e = 1 / (1 + k_u u(rho)) of its link, among three or more. Computed by hand; both players agreeing;
equal links and two members charged nothing, bit for bit; and ``islands validate --shaper fifo``
adding only this share to its calibrated cases."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.scenarios import make_scenario
from hypothesis import given
from hypothesis import strategies as st

from islands.emulation import Shaper
from islands.errors import UserError
from islands.scenarios.fifo import (
    K_UNEQUAL,
    RHO_FULL,
    fitted_k_u,
    unequal_cap_bytes_per_s,
    unequal_shares,
)
from islands.simulator import RunSetup, simulate
from islands.simulator.network.ring_caps import fifo_cap_bytes_per_s, ring_cap_bytes_per_s
from islands.trainer.config import check_supported
from islands.validation.case import unequal_fifo_overrides

PARAMETERS = 10e6  # 20 MB of bf16 per exchange
S = PARAMETERS * 2
SLOW = 50e6 / 8  # bytes/s: the slowest island, 50 Mbit/s
# A FIFO at no cost of its own on equal links: only the unequal links' share is left
FREE_FIFO = ['network.egress_queue="fifo"', "network.fifo_k_s=0", "network.fifo_k_so=0"]


def document(gbps: list[float]) -> dict:
    return {
        "name": "unequal",
        "model": {"parameters": PARAMETERS, "bytes_per_param": 2},
        "schedule": {"algorithm": "diloco", "inner_steps": 8, "outer_steps": 3},
        "island": [
            {"name": f"i{k}", "step_time_s": 0.3, "bandwidth_gbps": rate}
            for k, rate in enumerate(gbps)
        ],
    }


def mean_syncs(overrides: list[str], gbps: list[float]) -> list[float]:
    scenario = make_scenario(overrides, document(gbps))
    return [
        simulate(scenario).summary["mean_sync_s"],
        simulate(scenario, player="events").summary["mean_sync_s"],
    ]


def test_the_shares_by_hand():
    # k_u = 0.175, full from rho = 2: rho = 4 and 2 give 1 / 1.175 = 0.851064; rho = 1.5,
    # u = ln 1.5 / ln 2 = 0.584963 and 1 / (1 + 0.175 x 0.584963) = 0.907138; rho <= 1, 1
    shares = unequal_shares(np.array([4.0, 2.0, 1.5, 1.0, 0.5]), np.ones(5), K_UNEQUAL)
    assert shares == pytest.approx([0.851064, 0.851064, 0.907138, 1.0, 1.0], abs=1e-6)
    assert K_UNEQUAL == 0.175 and RHO_FULL == 2.0


def test_a_ring_of_4_2_1_moves_at_the_slowest_member_s_share():
    # 200 / 100 / 50 Mbit/s, the trainer's all-to-all: the 50 Mbit/s island's download is filled by
    # the 200 Mbit/s one's upload (rho 4): 50 / 1.175 Mbit/s; the 100 Mbit/s island (rho 2) keeps
    # 100 / 1.175. Three members: 2 x 2/3 x 20 MB through each link, no latency.
    volume = 2 * 2 / 3 * S
    fair, fifo = mean_syncs([], [0.2, 0.1, 0.05]), mean_syncs(FREE_FIFO, [0.2, 0.1, 0.05])
    for sync_s in fair:
        assert sync_s == pytest.approx(volume / SLOW, rel=1e-9)
    for sync_s in fifo:
        assert sync_s == pytest.approx(volume * 1.175 / SLOW, rel=1e-9)


def test_a_scenario_s_own_k_u_prices_the_ring_in_its_place():
    # fifo_k_u = 0.1 (a user's, measured on their hosts): rho = 4 gives 1 / 1.1 of the 50 Mbit/s
    # link; fifo_k_u = 0 charges nothing
    volume = 2 * 2 / 3 * S
    gbps = [0.2, 0.1, 0.05]
    for sync_s in mean_syncs([*FREE_FIFO, "network.fifo_k_u=0.1"], gbps):
        assert sync_s == pytest.approx(volume * 1.1 / SLOW, rel=1e-9)
    assert mean_syncs([*FREE_FIFO, "network.fifo_k_u=0"], gbps) == mean_syncs([], gbps)


def test_an_upload_past_twice_a_download_costs_no_more_than_twice():
    # 500 / 50 Mbit/s and a third at 50: rho = 10, the whole loss as from rho = 2 (the standing
    # queue is the faster sender's window, not the ratio): 50 / 1.175 Mbit/s
    volume = 2 * 2 / 3 * S
    for sync_s in mean_syncs(FREE_FIFO, [0.5, 0.05, 0.05]):
        assert sync_s == pytest.approx(volume * 1.175 / SLOW, rel=1e-9)


def test_two_members_and_equal_links_are_not_charged():
    for gbps in ([0.2, 0.05], [0.05, 0.05, 0.05]):
        assert mean_syncs(FREE_FIFO, gbps) == mean_syncs([], gbps)


def test_a_ring_all_gather_is_charged_by_each_member_s_predecessor():
    # top-k payloads go around the ring all-gather, i0 -> i1 -> i2 -> i0: i2's download (50) is fed
    # by i1's upload (100, rho 2), i1's (100) by i0's (200, rho 2), i0's by i2's (none): the ring
    # moves at 50 / 1.175 Mbit/s, its bytes 1.175 times as long as under fair queues
    topk = ['schedule.compression="topk"', "schedule.topk=64"]
    gbps = [0.2, 0.1, 0.05]
    for fifo_s, fair_s in zip(mean_syncs(FREE_FIFO + topk, gbps), mean_syncs(topk, gbps)):
        assert fifo_s == pytest.approx(fair_s * 1.175, rel=1e-9)


def test_a_ring_all_reduce_is_charged_by_its_neighbours_not_the_fastest_member():
    # 200 / 60 / 50 Mbit/s. Around the ring (NCCL's, gloo's: every step to the next member) i2's
    # download is fed by i1's 60 (rho 1.2, u = ln 1.2 / ln 2 = 0.263034): 50 / (1 + 0.175 x
    # 0.263034) = 47.7997 Mbit/s, while i1 (fed by i0's 200, rho 3.33) keeps 60 / 1.175 = 51.06.
    # The all-to-all's i2 is fed by the fastest, 200: 50 / 1.175 = 42.553 Mbit/s.
    volume = 2 * 2 / 3 * S
    gbps = [0.2, 0.06, 0.05]
    ring = [*FREE_FIFO, 'network.reduce_scatter="ring"']
    for sync_s in mean_syncs(ring, gbps):
        assert sync_s == pytest.approx(volume / (47.799730 / 50 * SLOW), rel=1e-6)
    for sync_s in mean_syncs(FREE_FIFO, gbps):
        assert sync_s == pytest.approx(volume * 1.175 / SLOW, rel=1e-9)


def test_the_trainer_refuses_a_reduce_scatter_around_the_ring_in_one_line():
    scenario = make_scenario(['network.reduce_scatter="ring"'], document([0.1, 0.1]))
    with pytest.raises(UserError) as refused:
        check_supported(scenario)
    message = str(refused.value)
    assert "network.reduce_scatter:" in message and "'ring'" in message and "\n" not in message


def test_the_players_agree_on_an_unequal_fifo_with_jitter_and_calls():
    run = ["island.0.jitter_cv=0.2", 'exchange.calls="per_tensor"', "exchange.tensors=10"]
    links = document([0.4, 0.1, 0.05, 0.05])
    scenario = make_scenario(['network.egress_queue="fifo"', *run], links)
    arrays, events = simulate(scenario), simulate(scenario, player="events", group_replicas=False)
    fair = simulate(make_scenario(run, links)).summary["mean_sync_s"]
    assert arrays.summary["mean_sync_s"] > fair
    for key in ("wall_time_s", "stall_s", "idle_s", "mean_sync_s", "bytes_per_worker"):
        assert arrays.summary[key] == pytest.approx(events.summary[key], rel=1e-12)


def test_a_member_standing_for_several_has_its_copies_among_the_others():
    # uplinks 4 and 3, downlinks 2.5 and 3, as an all-to-all: alone, the first's download is fed by
    # the second's 3 (rho 1.2, u = 0.263034): 2.5 / (1 + 0.175 x 0.263034) = 2.389986; standing for
    # two, by its own copy's 4 (rho 1.6, u = 0.678072): 2.5 / (1 + 0.175 x 0.678072) = 2.234811.
    # The second (rho 4/3) keeps 3 / 1.0726 and never binds.
    up, down = np.array([4.0, 3.0]), np.array([2.5, 3.0])
    alone = unequal_cap_bytes_per_s(up, down, np.array([False, False]), K_UNEQUAL, False)
    several = unequal_cap_bytes_per_s(up, down, np.array([True, False]), K_UNEQUAL, False)
    assert alone == pytest.approx(2.389986, rel=1e-6)
    assert several == pytest.approx(2.234811, rel=1e-6)


def test_validate_adds_only_the_unequal_share_under_a_fifo():
    diloco = make_scenario([], document([0.2, 0.1, 0.05]))
    assert unequal_fifo_overrides(diloco, Shaper("fifo", 50.0)) == [
        'network.egress_queue="fifo"',
        "network.fifo_queue_ms=50.0",
        "network.fifo_k_s=0",
        "network.fifo_k_so=0",
        'network.reduce_scatter="all_to_all"',
        'network.tcp_congestion_control="cubic"',
    ]
    assert unequal_fifo_overrides(diloco, Shaper("fair")) == []
    decoupled = make_scenario(['schedule.algorithm="decoupled"'], document([0.2, 0.1, 0.05]))
    assert unequal_fifo_overrides(decoupled, Shaper("fifo")) == []


# --- properties ---------------------------------------------------------------------------------------

RATES = st.floats(1e3, 1e12)  # bytes/s


@given(st.lists(RATES, min_size=1, max_size=12), st.lists(RATES, min_size=1, max_size=12))
def test_a_share_is_in_0_1_and_never_rises_as_the_feeder_speeds_up(feeders, downloads):
    size = min(len(feeders), len(downloads))
    feeder, download = np.array(feeders[:size]), np.array(downloads[:size])
    shares = unequal_shares(feeder, download, K_UNEQUAL)
    faster = unequal_shares(feeder * 2, download, K_UNEQUAL)
    assert np.all((shares > 0) & (shares <= 1) & (faster <= shares))
    assert np.all(shares >= 1 / (1 + K_UNEQUAL))
    assert np.all(shares[feeder <= download] == 1.0)


@given(
    st.lists(st.tuples(RATES, RATES, st.booleans()), min_size=3, max_size=12),
)
def test_a_ring_is_never_charged_more_than_an_all_to_all_over_the_same_members(members):
    """Around a ring a member is fed by its predecessor alone, in an all-to-all by the fastest other:
    never a faster feeder, so never a smaller share."""
    up, down, several = (np.array(column) for column in zip(*members))
    ring = unequal_cap_bytes_per_s(up, down, several, K_UNEQUAL, True)
    all_to_all = unequal_cap_bytes_per_s(up, down, several, K_UNEQUAL, False)
    assert ring >= all_to_all


@given(st.lists(st.tuples(RATES, RATES), min_size=3, max_size=12), st.floats(0.05, 1.0))
def test_the_k_u_a_ring_measured_carries_its_rate_exactly(links, share):
    """``fitted_k_u`` at a ring rate of ``share`` x the slowest link: where it gives a k_u, the ring's
    unequal cap at that k_u is the measured rate (the binding member's); where it gives none, the
    fit's k_u already carries the rate, or no member is charged."""
    up, down = (np.array(column) for column in zip(*links))
    ring_bytes_per_s = share * float(np.minimum(up, down).min())
    k_u = fitted_k_u(up, down, ring_bytes_per_s)
    alone = np.zeros(len(up), bool)
    if k_u is None:
        assert unequal_cap_bytes_per_s(up, down, alone, K_UNEQUAL, True) >= ring_bytes_per_s * (
            1 - 1e-12
        )
    elif k_u == 0:  # the ring moved at its slowest link: nothing left to charge
        assert ring_bytes_per_s == float(np.minimum(up, down).min())
    else:
        assert k_u < K_UNEQUAL
        cap = unequal_cap_bytes_per_s(up, down, alone, k_u, True)
        assert cap == pytest.approx(ring_bytes_per_s, rel=1e-9)


@given(
    rate=RATES,
    members=st.integers(2, 12),
    streams=st.integers(1, 64),
    queue_ms=st.floats(1.0, 1000.0),
    k_s=st.floats(0.0, 10.0),
    latency_ms=st.sampled_from((0.0, 1.0, 40.0)),
)
def test_equal_links_behind_a_fifo_are_capped_as_before(
    rate, members, streams, queue_ms, k_s, latency_ms
):
    """Equal links: the ring's cap is the FIFO's share of the egress and TCP's caps, the expression
    ``ring_cap_bytes_per_s`` had before unequal links were priced, bit for bit."""
    scenario = make_scenario(
        [
            'network.egress_queue="fifo"',
            f"network.streams={streams}",
            f"network.fifo_queue_ms={queue_ms}",
            f"network.fifo_k_s={k_s}",
            f"island.0.replicas={members}",
            f"island.0.bandwidth_gbps={rate * 8 / 1e9}",
            f"island.0.latency_ms={latency_ms}",
            "network.tcp_window_bytes=65536",
        ]
    )
    setup = RunSetup.of(scenario, group_replicas=False)
    participants = tuple(range(members))
    links, _ = setup.topology.ring_route(participants)
    hop_s = 2 * latency_ms / 1e3
    before = fifo_cap_bytes_per_s(scenario.network, setup.topology.arrays.up_capacity[0], hop_s)
    assert (
        ring_cap_bytes_per_s(
            scenario.network, setup.topology, participants, links, hop_s, reduces=True
        )
        == before
    )
