"""The two network models: max-min fair sharing by hand, and agreement where nothing overlaps."""

from __future__ import annotations

from collections import Counter

import pandas as pd
import pytest
import simpy
from helpers.regions import US_EU
from helpers.regions import document as regions_document
from helpers.scenarios import make_scenario

from islands.simulator import simulate
from islands.simulator.network.flows import AlphaBetaNetwork, FlowNetwork, max_min_rates
from islands.simulator.network.links import (
    Link,
    Transfer,
    link_segments,
    peak_access_rate,
    take_bursts,
)


def link(capacity: float, worker: int = 0, direction: str = "up") -> Link:
    return Link(worker, direction, capacity)


def flow(*links: Link, cap: float = float("inf")) -> Transfer:
    return Transfer(
        links=links, remaining_bytes=1.0, done=simpy.Environment().event(), cap_bytes_per_s=cap
    )


def test_max_min_shares_a_link_equally():
    shared = link(10.0)
    assert max_min_rates([flow(shared), flow(shared)]) == [5.0, 5.0]


def test_max_min_gives_leftover_to_flows_not_bottlenecked():
    # classic example: A crosses a (cap 10) and b (cap 4); B crosses a; C crosses b.
    # b is the bottleneck: A and C get 2 each; B takes what A leaves on a: 8.
    a, b = link(10.0), link(4.0, direction="down")
    assert max_min_rates([flow(a, b), flow(a), flow(b)]) == [2.0, 8.0, 2.0]


def rate_at(segments: list[tuple[Link, float, float, float]], at_s: float) -> float:
    return sum(rate for _, start, end, rate in segments if start <= at_s < end)


@pytest.mark.parametrize("tracks_links", [True, False])
def test_flow_network_two_overlapping_transfers_each_get_half(tracks_links):
    env = simpy.Environment()
    network = FlowNetwork(env, tracks_links)
    shared = link(100.0)
    finished = {}
    first = network.transfer((shared,), 1000.0, 0.0)
    first.done.callbacks.append(lambda _e: finished.setdefault("first", env.now))
    env.run(until=5.0)  # alone for 5 s: 500 bytes done
    second = network.transfer((shared,), 250.0, 0.0)
    second.done.callbacks.append(lambda _e: finished.setdefault("second", env.now))
    env.run()
    # both at 50 B/s: the second's 250 B end at 10 s; the first's last 250 B at 100 B/s end at 12.5 s.
    assert finished == {"second": pytest.approx(10.0), "first": pytest.approx(12.5)}
    # each transfer's rate over time; the link runs full the whole time and carries exactly 1250 bytes
    first, second = network.carried
    assert [value for segment in first.segments for value in segment] == pytest.approx(
        [0.0, 5.0, 100.0, 5.0, 10.0, 50.0, 10.0, 12.5, 100.0]
    )
    assert [value for segment in second.segments for value in segment] == pytest.approx(
        [5.0, 10.0, 50.0]
    )
    segments = list(link_segments(network.carried))
    assert [rate_at(segments, at_s) for at_s in (0.0, 4.9, 5.0, 9.9, 10.0, 12.4, 12.5)] == [
        100.0
    ] * 6 + [0.0]
    assert sum((end - start) * rate for _, start, end, rate in segments) == pytest.approx(1250.0)
    assert peak_access_rate(network.carried, [shared]) == 100.0


def test_disjoint_flows_move_at_their_rates_alone_and_a_ring_twice_over_a_link_carries_twice():
    env = simpy.Environment()
    network = FlowNetwork(env, tracks_links=False)
    ring = (link(10.0, 0), link(10.0, 0, "down"), link(8.0, 1), link(8.0, 1, "down"))
    backbone = link(12.0, 2)
    twice = (backbone, backbone)  # crossed twice: 6 B/s each time
    finished = ends(network, env, [(0.0, ring, 80.0), (1.0, twice, 60.0)])
    assert finished == pytest.approx([10.0, 11.0])
    assert [flow.segments for flow in network.carried] == [[(0.0, 10.0, 8.0)], [(1.0, 11.0, 6.0)]]
    assert peak_access_rate(network.carried, [*ring, twice[0]]) == 12.0  # 6 B/s, twice on one link


def test_a_mark_before_the_end_moves_when_the_rates_change():
    env = simpy.Environment()
    network = FlowNetwork(env)
    shared = link(10.0)
    fired = {}
    first = network.transfer((shared,), 100.0, 0.0)
    network.before_end(first, 2.0, lambda: fired.setdefault("mark", env.now))
    network.before_end(
        first, 50.0, lambda: fired.setdefault("at once", env.now)
    )  # nearer than that already
    first.done.callbacks.append(lambda _e: fired.setdefault("end", env.now))
    env.run(until=5.0)  # alone: the mark was due at 8 s
    network.transfer((shared,), 100.0, 0.0)  # from 5 s each at 5 B/s: 50 B left, 10 s
    env.run()
    assert fired == {"at once": 0.0, "mark": pytest.approx(13.0), "end": pytest.approx(15.0)}


def test_alpha_beta_marks_its_known_end_and_a_cancelled_transfer_marks_nothing():
    env = simpy.Environment()
    network = AlphaBetaNetwork(env)
    fired = []
    kept = network.transfer((link(10.0),), 100.0, 1.0)
    dropped = network.transfer((link(10.0),), 100.0, 0.0)
    network.before_end(kept, 3.0, lambda: fired.append(("kept", env.now)))
    network.before_end(dropped, 3.0, lambda: fired.append(("dropped", env.now)))
    network.cancel(dropped)
    env.run()
    assert fired == [("kept", pytest.approx(8.0))]  # 1 s latency + 10 s of bytes, less 3 s


def test_flow_network_pays_latency_before_moving_bytes():
    env = simpy.Environment()
    done = FlowNetwork(env).transfer((link(10.0), link(5.0, direction="down")), 50.0, 2.0)
    env.run()
    assert done.done.processed and env.now == pytest.approx(2.0 + 50.0 / 5.0)


def test_alpha_beta_ignores_sharing():
    env = simpy.Environment()
    network = AlphaBetaNetwork(env)
    shared = link(100.0)
    a = network.transfer((shared,), 1000.0, 0.0)
    b = network.transfer((shared,), 1000.0, 0.0)
    env.run()
    assert a.done.processed and b.done.processed and env.now == pytest.approx(10.0)


@pytest.mark.parametrize(
    "overrides",
    [
        ["schedule.algorithm=diloco"],
        ["schedule.algorithm=ddp", "schedule.outer_steps=10"],
        ["schedule.algorithm=streaming", "schedule.fragments=4", "schedule.overlap_steps=2"],
        ["schedule.algorithm=diloco", "island.0.latency_ms=30"],
    ],
)
def test_both_fidelities_agree_when_nothing_shares_a_link(overrides):
    closed = simulate(make_scenario([*overrides, "network.model=alpha-beta"])).summary
    flows = simulate(make_scenario([*overrides, "network.model=flow"])).summary
    assert closed["network_model"] == "alpha-beta" and flows["network_model"] == "flow"
    for key in (
        "wall_time_s",
        "stall_s",
        "compute_utilisation",
        "bytes_per_worker",
        "mean_sync_s",
        "peak_bandwidth_gbps",
    ):
        assert flows[key] == pytest.approx(closed[key], rel=1e-9), key


def test_link_table_records_the_transfer_rate():
    result = simulate(make_scenario(["schedule.outer_steps=1"]))
    up0 = result.links[(result.links["worker"] == 0) & (result.links["direction"] == "up")]
    assert list(up0["time_start_s"]) == [100.0]
    assert list(up0["time_end_s"]) == pytest.approx([124.0])
    assert list(up0["rate_gbps"]) == pytest.approx([1.0])


def ends(network, env, plan: list[tuple[float, tuple[Link, ...], float]]) -> list[float]:
    """Start each (at_s, links, bytes) transfer at its time; return when each one ends."""
    finished: list[float] = [0.0] * len(plan)

    def start(index: int, links: tuple[Link, ...], size: float) -> None:
        handle = network.transfer(links, size, 0.0)
        handle.done.callbacks.append(lambda _e: finished.__setitem__(index, env.now))

    for index, (at_s, links, size) in enumerate(plan):
        env.timeout(at_s).callbacks.append(lambda _e, i=index, ls=links, b=size: start(i, ls, b))
    env.run()
    return finished


@pytest.mark.parametrize("model", [AlphaBetaNetwork, FlowNetwork])
def test_a_token_bucket_sends_its_burst_at_once_and_refills_while_the_link_idles(model):
    env = simpy.Environment()
    shaped = Link(0, "up", 10.0, burst_bytes=30.0)
    # a full bucket: 30 of 100 B at once, 70 B at 10 B/s: ends at 7 s. Idle 7-9 s refills 20 B: the
    # second 100 B end 8 s after 9 s. The third starts 1 s after that (10 B back) with 50 B: 4 s.
    assert ends(
        model(env), env, [(0.0, (shaped,), 100.0), (9.0, (shaped,), 100.0), (18.0, (shaped,), 50.0)]
    ) == pytest.approx([7.0, 17.0, 22.0])


def test_a_burst_is_what_every_link_of_the_transfer_holds_and_refills_at_the_spare_rate():
    env = simpy.Environment()
    network = FlowNetwork(env)
    fast = Link(0, "up", 10.0, burst_bytes=100.0)
    slow = Link(1, "down", 5.0, burst_bytes=20.0)
    # 20 B at once (the slow link's bucket; the fast one keeps 80 B), 80 B at 5 B/s: ends at 16 s;
    # meanwhile the fast link, half used, refills at 5 B/s (back to 100 B). At 16 s a transfer on it
    # alone sends 100 B at once and 50 B at 10 B/s: ends at 21 s.
    assert ends(
        network, env, [(0.0, (fast, slow), 100.0), (16.0, (fast,), 150.0)]
    ) == pytest.approx([16.0, 21.0])


def test_a_transfer_within_the_burst_ends_at_once_and_fires_its_marks():
    env = simpy.Environment()
    network = FlowNetwork(env)
    shaped = Link(0, "up", 10.0, burst_bytes=64.0)
    fired = {}
    handle = network.transfer((shaped,), 50.0, 1.0)
    network.before_end(handle, 0.5, lambda: fired.setdefault("mark", env.now))
    handle.done.callbacks.append(lambda _e: fired.setdefault("done", env.now))
    env.run()
    assert fired == {"mark": 1.0, "done": 1.0}
    late = network.transfer((shaped,), 10.0, 0.0)  # at 1 s too: the 14 B left in the bucket hold it
    network.before_end(late, 0.5, lambda: fired.setdefault("late mark", env.now))
    env.run()
    assert fired["late mark"] == 1.0 and late.done.triggered


def two_into_one(parent_bucket_bytes: float, first_bucket_bytes: float = 1000.0):
    """Two uplinks (A, B) into one downlink (D), each 10 B/s; D's bucket holds ``parent_bucket_bytes``."""
    a = Link(0, "up", 10.0, burst_bytes=first_bucket_bytes)
    b = Link(1, "up", 10.0, burst_bytes=1000.0)
    d = Link(2, "down", 10.0, burst_bytes=parent_bucket_bytes)
    return a, b, d


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_transfers_starting_together_share_a_bucket_whatever_their_order(order):
    env = simpy.Environment()
    a, b, d = two_into_one(40.0)
    plan = [(0.0, (a, d), 60.0), (0.0, (b, d), 60.0)]
    # D's 40 B split evenly: 20 B each at once, the other 40 B each at 5 B/s (D shared): both end at 8 s.
    # (Before: the first started took all 40 B and ended at 4 s, the other at 8 s.)
    assert ends(FlowNetwork(env), env, [plan[i] for i in order]) == pytest.approx([8.0, 8.0])


def test_a_transfer_wanting_less_than_its_share_leaves_the_rest_of_the_burst_to_the_others():
    env = simpy.Environment()
    a, b, d = two_into_one(40.0)
    # Both grow at one pace: the 10 B transfer is done at 10 B (ends at once); the other takes the
    # 20 B left as well, 30 B, and sends its other 70 B alone at 10 B/s: 7 s.
    assert ends(
        FlowNetwork(env), env, [(0.0, (a, d), 10.0), (0.0, (b, d), 100.0)]
    ) == pytest.approx([0.0, 7.0])


def test_a_transfer_held_by_its_own_bucket_leaves_the_shared_one_to_the_other():
    env = simpy.Environment()
    a, b, d = two_into_one(40.0, first_bucket_bytes=10.0)
    # At one pace, A's 10 B bucket runs dry first: that transfer bursts 10 B; the other takes the 30 B
    # D still holds. 90 B and 70 B then share D at 5 B/s: the second ends at 14 s, the first, 20 B
    # left, moves alone at 10 B/s and ends at 16 s.
    assert ends(
        FlowNetwork(env), env, [(0.0, (a, d), 100.0), (0.0, (b, d), 100.0)]
    ) == pytest.approx([16.0, 14.0])


def test_a_transfer_crossing_a_bucket_twice_draws_twice_its_burst_from_it():
    d = Link(2, "down", 10.0, burst_bytes=60.0)
    a = Link(0, "up", 10.0, burst_bytes=1000.0)
    b = Link(1, "up", 10.0, burst_bytes=1000.0)
    # One pace x: 2x (twice across D) + x = 60 B: x = 20 B each; D is dry.
    assert take_bursts([Counter((a, d, d)), Counter((b, d))], 0.0, [100.0, 100.0]) == pytest.approx(
        [20.0, 20.0]
    )
    assert d.tokens_at(0.0) == pytest.approx(0.0)
    assert a.tokens_at(0.0) == b.tokens_at(0.0) == pytest.approx(980.0)


CHURN = [
    "island.0.replicas=6",
    "island.0.mtbf_s=400",
    "island.0.mttr_s=100",
    "schedule.outer_steps=10",
]
TWO_REGIONS = regions_document(["us", "us", "eu", "eu"], US_EU)
SHARING_CASES = {  # (document or the base one, overrides): each has flows that share links and flows that do not
    "churn, rings restarted, joiners downloading": (None, CHURN),
    "churn, partial participation": (None, [*CHURN, "network.on_departure=partial"]),
    "decoupled, a syncer link": (
        None,
        ["schedule.algorithm=decoupled", "syncer.bandwidth_gbps=0.5"],
    ),
    "a tree over two regions": (TWO_REGIONS, ["network.collective=tree"]),
    "hierarchical streaming over two regions": (
        TWO_REGIONS,
        ["network.collective=hierarchical", "schedule.algorithm=streaming", "schedule.fragments=2"],
    ),
}


@pytest.mark.parametrize("case", SHARING_CASES)
def test_flows_on_disjoint_links_move_as_summing_every_link_at_every_change_would_move_them(
    case, monkeypatch
):
    document, overrides = SHARING_CASES[case]
    scenario = make_scenario(overrides, document=document)
    fast = simulate(scenario)
    monkeypatch.setattr(
        "islands.simulator.network.topology.Topology.has_buckets", lambda _topology: True
    )
    summed = simulate(scenario)
    assert summed.summary == fast.summary
    pd.testing.assert_frame_equal(summed.trace, fast.trace)
    pd.testing.assert_frame_equal(summed.links, fast.links)
