"""Top-k payloads gathered peer to peer or through an object store (``network.gather``) in the
simulator: the round's chosen peers, each worker's bytes up and down and each round's seconds, worked
by hand for equal and asymmetric links, the store's own link binding and not, a backbone to the
store's region, in both players (the trainer's side: ``test_gather_trainer.py``)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from helpers.scenarios import BASE_DOCUMENT

from islands.errors import UserError
from islands.scenarios import from_dict, load
from islands.schedules.gather import DIRECT, RING, STORE, chosen, downloads, uploads
from islands.simulator import RunSetup, simulate
from islands.simulator import chosen as chosen_player

M, OUTER = 4, 3
N = 4096 * 1000  # one fragment of 1000 whole chunks
PAYLOAD = 112_016  # 1000 chunks x 64 kept x (2 + 12) bits = 112,000 B, + 4 bins x 4 B
LATENCY_S = 0.010  # each worker's one-way access latency
GBPS = 1.0
BYTES_PER_S = GBPS * 1e9 / 8
PLAYERS = ["lockstep", "events"]
DOCS = Path(__file__).resolve().parent.parent / "docs"
TOPK = ["schedule.compression=topk", "schedule.bits=2"]


def document(gather: str, peers: int | None = None, store: dict | None = None) -> dict:
    doc = copy.deepcopy(BASE_DOCUMENT)
    doc["model"]["parameters"] = N
    doc["schedule"].update(compression="topk", bits=2, error_feedback=0.95, inner_steps=10)
    if peers is not None:
        doc["schedule"]["gather_peers"] = peers
    doc["network"] = {"gather": gather}
    doc["island"][0]["latency_ms"] = LATENCY_S * 1e3
    if store:
        doc["store"] = store
    return doc


def down_bytes(result) -> dict[int, float]:
    """Bytes each worker's downlink carried, from the links table."""
    links = result.links
    down = links[links["direction"] == "down"]
    moved = down["rate_gbps"] * 1e9 / 8 * (down["time_end_s"] - down["time_start_s"])
    return moved.groupby(down["worker"]).sum().to_dict()


def with_first_round(steady_s: float, one_way_s: float, round_trips: int = 1) -> float:
    """The mean of OUTER rounds of ``steady_s`` whose first also opens every worker's connections to
    the store: its PUT's, then its GETs', a handshake of ``round_trips`` round trips each."""
    return steady_s + 2 * 2 * round_trips * one_way_s / OUTER


def comm_bytes(result) -> list[list[float]]:
    """Each round's bytes sent, worker by worker."""
    comms = result.trace[result.trace["kind"] == "comm"]
    return [
        comms[comms["outer_step"] == step].sort_values("worker")["bytes"].tolist()
        for step in range(OUTER)
    ]


# --- who and how many, declared once -------------------------------------------------------------------


def test_a_round_draws_k_of_the_workers_from_the_seed_and_the_outer_step():
    draws = [chosen(7, step, range(10), 3) for step in range(20)]
    assert all(len(draw) == 3 and list(draw) == sorted(set(draw)) for draw in draws)
    assert draws == [chosen(7, step, list(reversed(range(10))), 3) for step in range(20)]
    assert len(set(draws)) > 1  # the peers change from round to round
    assert chosen(7, 0, range(10), None) == chosen(7, 0, range(10), 10) == tuple(range(10))
    # pinned: both executors draw with this function; a change to it changes every run's peers
    assert chosen(0, 0, range(4), 2) == (1, 2)


@pytest.mark.parametrize(
    "gather, is_chosen, up, down",
    [
        (RING, True, M - 1, M - 1),
        (DIRECT, True, M - 1, 2 - 1),
        (DIRECT, False, 0, 2),
        (STORE, True, 1, 2),
        (STORE, False, 1, 2),
    ],
)
def test_payloads_per_worker_up_and_down_for_k_2_of_4(gather, is_chosen, up, down):
    assert uploads(gather, M, is_chosen) == up
    assert downloads(gather, M, 2, is_chosen) == down


# --- the store ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("player", PLAYERS)
def test_the_store_takes_one_payload_up_and_k_down_per_worker(player):
    store_s, peers = 0.005, 3
    result = simulate(
        from_dict(document(STORE, peers, {"latency_ms": store_s * 1e3})), player=player
    )
    assert result.summary["player"] == player
    assert comm_bytes(result) == [[PAYLOAD] * M] * OUTER
    assert result.summary["bytes_per_worker"] == OUTER * PAYLOAD
    assert down_bytes(result) == pytest.approx(dict.fromkeys(range(M), OUTER * peers * PAYLOAD))
    # a PUT's round trip (one way: 10 ms access + 5 ms store), 112,016 B at 1 Gbit/s; then a LIST's
    # round trip and a GET's (60 ms) and 3 payloads down: 0.030 + 0.000896128 + 0.060 + 0.002688384
    one_way_s = LATENCY_S + store_s
    put_s = 2 * one_way_s + PAYLOAD / BYTES_PER_S
    expected_s = put_s + 4 * one_way_s + peers * PAYLOAD / BYTES_PER_S
    assert expected_s == pytest.approx(0.093584512)
    # the first round opens the connections: two handshakes, 60 ms more
    assert result.summary["mean_sync_s"] == pytest.approx(expected_s + 0.060 / OUTER)


@pytest.mark.parametrize("player", PLAYERS)
def test_a_store_round_is_three_round_trips_at_the_slowest_workers_way_and_its_bytes(player):
    """Two workers 10 ms from the store's region, two 30 ms, the store 5 ms more: l = 35 ms. A round is
    the PUT's round trip and its 112,016 B at 1 Gbit/s (70 ms + 0.896128 ms), then the LIST's and the
    GET's round trips and K = 3 payloads at 0.5 Gbit/s (140 ms + 5.376768 ms): 216.272896 ms."""
    doc = document(STORE, 3, {"latency_ms": 5.0})
    doc["island"] = [
        {**doc["island"][0], "name": name, "replicas": 2, "latency_ms": ms, "download_gbps": 0.5}
        for name, ms in (("near", 10.0), ("far", 30.0))
    ]
    for island in doc["island"]:
        island["upload_gbps"] = island.pop("bandwidth_gbps")
    result = simulate(from_dict(doc), player=player)
    one_way_s = 0.030 + 0.005
    put_s = 2 * one_way_s + PAYLOAD * 8 / 1e9
    get_s = 2 * one_way_s + 2 * one_way_s + 3 * PAYLOAD * 8 / 0.5e9
    assert put_s + get_s == pytest.approx(0.070 + 0.000896128 + 0.140 + 0.005376768)
    assert result.summary["mean_sync_s"] == pytest.approx(
        with_first_round(put_s + get_s, one_way_s), rel=1e-12
    )


@pytest.mark.parametrize("player", PLAYERS)
def test_the_stores_own_link_binds_its_share_of_every_put_and_get(player):
    """Ingress 2 Gbit/s shared by 4 PUTs (0.5 each, below the 1 Gbit/s uplinks); egress 0.5 Gbit/s
    shared by 4 workers' GETs (0.125 each)."""
    store = {"ingress_gbps": 2.0, "egress_gbps": 0.5}
    result = simulate(from_dict(document(STORE, 2, store)), player=player)
    put_s = PAYLOAD / (2.0e9 / 8 / M)
    get_s = 2 * PAYLOAD / (0.5e9 / 8 / M)
    expected_s = 6 * LATENCY_S + put_s + get_s  # 0.06 + 0.001792256 + 0.014338048
    assert expected_s == pytest.approx(0.076130304)
    assert result.summary["mean_sync_s"] == pytest.approx(with_first_round(expected_s, LATENCY_S))
    assert down_bytes(result) == pytest.approx(dict.fromkeys(range(M), OUTER * 2 * PAYLOAD))


def test_a_store_that_does_not_bind_leaves_the_access_links_the_pace():
    """10 Gbit/s each way is 2.5 a worker, above its 1 Gbit/s: the same round as without a link."""
    fast = simulate(from_dict(document(STORE, 2, {"bandwidth_gbps": 10.0})))
    free = simulate(from_dict(document(STORE, 2)))
    assert fast.summary["mean_sync_s"] == free.summary["mean_sync_s"]
    assert free.summary["mean_sync_s"] == pytest.approx(
        with_first_round(6 * LATENCY_S + 3 * PAYLOAD / BYTES_PER_S, LATENCY_S)
    )


@pytest.mark.parametrize("player", PLAYERS)
def test_covenants_asymmetric_links_put_at_the_uplink_and_get_at_the_downlink(player):
    """110 Mbit/s up, 500 Mbit/s down (Covenant-72B's peers): a PUT at 110, K GETs at 500."""
    doc = document(STORE, 4)
    del doc["island"][0]["bandwidth_gbps"]
    doc["island"][0].update(upload_gbps=0.11, download_gbps=0.5)
    result = simulate(from_dict(doc), player=player)
    expected_s = 6 * LATENCY_S + PAYLOAD / (0.11e9 / 8) + 4 * PAYLOAD / (0.5e9 / 8)
    assert expected_s == pytest.approx(0.06 + 0.008146618 + 0.00716902)
    assert result.summary["mean_sync_s"] == pytest.approx(with_first_round(expected_s, LATENCY_S))
    assert result.summary["bytes_per_worker"] == OUTER * PAYLOAD


@pytest.mark.parametrize("player", PLAYERS)
def test_a_store_in_another_region_puts_and_gets_through_the_backbone(player):
    """Two workers in us, two in eu with the store; a 0.1 Gbit/s backbone of 20 ms each way. The us
    workers' PUTs cross us>eu twice (0.05 Gbit/s each); their GETs of K = 2 cross eu>us four times
    (0.025 Gbit/s each): the backbone binds both stages."""
    doc = document(STORE, 2, {"region": "eu"})
    doc["island"] = [
        {**doc["island"][0], "name": name, "replicas": 2, "region": name} for name in ("us", "eu")
    ]
    doc["region"] = [{"name": "us"}, {"name": "eu"}]
    doc["backbone"] = [{"between": ["us", "eu"], "bandwidth_gbps": 0.1, "latency_ms": 20}]
    result = simulate(from_dict(doc), player=player)
    one_way_s = LATENCY_S + 0.020
    expected_s = 6 * one_way_s + PAYLOAD / (0.1e9 / 8 / 2) + PAYLOAD / (0.1e9 / 8 / 4)
    assert result.summary["mean_sync_s"] == pytest.approx(with_first_round(expected_s, one_way_s))


def round_seconds(result, worker: int = 0) -> list[float]:
    """Each round's sync, from ``worker``'s comm rows, in outer-step order."""
    comms = result.trace[(result.trace["kind"] == "comm") & (result.trace["worker"] == worker)]
    return (comms["time_end_s"] - comms["time_start_s"]).tolist()


STEADY_K2_S = 6 * LATENCY_S + 3 * PAYLOAD / BYTES_PER_S  # 60 ms and 3 x 0.896128 ms: 0.062688384


@pytest.mark.parametrize("player", PLAYERS)
@pytest.mark.parametrize("round_trips", [1, 3])
def test_the_first_round_opens_the_connections_and_pays_their_handshakes(player, round_trips):
    """K = 2 of 4, 10 ms one way: a steady round is 6 one ways and a PUT and two GETs of 0.896128 ms
    (62.688384 ms); the first also opens the PUT's connection, then the GETs', each a handshake of h
    round trips: 4 h one ways more (40 ms for TCP, 120 ms for TLS 1.2's h = 3)."""
    store = {"handshake_round_trips": round_trips}
    result = simulate(from_dict(document(STORE, 2, store)), player=player)
    assert STEADY_K2_S == pytest.approx(0.062688384)
    first_s = STEADY_K2_S + 4 * round_trips * LATENCY_S
    assert first_s == pytest.approx({1: 0.102688384, 3: 0.182688384}[round_trips])
    assert round_seconds(result) == pytest.approx([first_s] + [STEADY_K2_S] * (OUTER - 1))


def test_the_how_tos_store_over_tls_is_its_rounds_by_hand():
    """docs/how-to/compression.md: the worked example, K = 4 of 8, its store 50 ms away over TLS 1.2
    (h = 3): 5 payloads of 0.2734 GB at 1 Gbit/s (10.9375 s) and 6 x 50 ms a round; the first round
    0.6 s more."""
    overrides = [*TOPK, "schedule.error_feedback=0.95", "network.gather=store"]
    overrides += ["schedule.gather_peers=4", "store.latency_ms=50", "store.handshake_round_trips=3"]
    result = simulate(load("worked-example", overrides))
    steady_s = 5 * 273_437_516 * 8 / 1e9 + 6 * 0.050
    assert steady_s == pytest.approx(11.2375, abs=1e-6)
    first_s = steady_s + 4 * 3 * 0.050
    assert round_seconds(result) == pytest.approx([first_s] + [steady_s] * 19)
    assert result.summary["stall_s"] == pytest.approx(19 * steady_s + first_s)
    text = " ".join((DOCS / "how-to" / "compression.md").read_text().split())
    assert f"19 x {steady_s:.4f} + {first_s:.4f} = {19 * steady_s + first_s:.2f} s" in text


def churning(events: list[dict], present: bool = True) -> dict:
    """K = 2 of 4 workers, 4 rounds every 10 s: three in island a, one in b, with ``events`` for b."""
    doc = document(STORE, 2)
    doc["schedule"]["outer_steps"] = 4
    island = doc["island"][0]
    doc["island"] = [
        {**island, "name": "a", "replicas": 3},
        {**island, "name": "b", "replicas": 1, "present": present},
    ]
    doc["event"] = [{"island": "b", **event} for event in events]
    return doc


def test_a_joiners_first_round_opens_its_connections_and_the_round_waits_for_them():
    """b joins at 15 s: round 1 is its first (the others' second), and a stage ends for every member
    at once: the round takes its handshakes, 40 ms more, as the run's first did."""
    result = simulate(from_dict(churning([{"at_s": 15.0, "kind": "join"}], present=False)))
    first_s = STEADY_K2_S + 4 * LATENCY_S
    assert round_seconds(result) == pytest.approx([first_s, first_s, STEADY_K2_S, STEADY_K2_S])


def test_a_worker_back_from_a_departure_opens_its_connections_again():
    """b leaves at 15 s (its process and connections gone) and is back at 25 s: round 1 goes on
    without it, round 2 is its first again."""
    events = [{"at_s": 15.0, "kind": "leave"}, {"at_s": 25.0, "kind": "join"}]
    result = simulate(from_dict(churning(events)))
    first_s = STEADY_K2_S + 4 * LATENCY_S
    assert round_seconds(result) == pytest.approx([first_s, STEADY_K2_S, first_s, STEADY_K2_S])


# --- peer to peer ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("player", PLAYERS)
def test_a_direct_gather_sends_m_minus_1_copies_from_each_of_the_k(player):
    peers = 2
    result = simulate(from_dict(document(DIRECT, peers)), player=player)
    draws = [chosen(0, step, range(M), peers) for step in range(OUTER)]
    assert comm_bytes(result) == [
        [(M - 1) * PAYLOAD if rank in draw else 0.0 for rank in range(M)] for draw in draws
    ]
    received = {
        rank: sum((peers - 1 if rank in draw else peers) * PAYLOAD for draw in draws)
        for rank in range(M)
    }
    assert down_bytes(result) == pytest.approx(received)
    # one hop (10 + 10 ms), then a chosen peer's uplink carries its 3 copies: 3 x 0.896128 ms
    expected_s = 2 * LATENCY_S + (M - 1) * PAYLOAD / BYTES_PER_S
    assert result.summary["mean_sync_s"] == pytest.approx(expected_s)


@pytest.mark.parametrize("player", PLAYERS)
def test_a_direct_gather_of_every_payload_moves_a_ring_all_gathers_bytes_at_one_hop(player):
    direct = simulate(from_dict(document(DIRECT)), player=player)
    ring = simulate(from_dict(document(RING)), player=player)
    assert direct.summary["bytes_per_worker"] == ring.summary["bytes_per_worker"]
    assert down_bytes(direct) == pytest.approx(down_bytes(ring))
    # the ring pays M - 1 hops of latency, the direct gather one
    hops_s = (M - 1) * 2 * LATENCY_S
    assert direct.summary["mean_sync_s"] == pytest.approx(
        ring.summary["mean_sync_s"] - hops_s + 2 * LATENCY_S
    )


def test_a_direct_gather_on_asymmetric_links_is_paced_by_the_senders_uplinks():
    """K = 2 of 4, 110 Mbit/s up, 500 down: a sender's uplink carries 3 copies, a downlink 2 at most."""
    doc = document(DIRECT, 2)
    del doc["island"][0]["bandwidth_gbps"]
    doc["island"][0].update(upload_gbps=0.11, download_gbps=0.5)
    result = simulate(from_dict(doc))
    expected_s = 2 * LATENCY_S + (M - 1) * PAYLOAD / (0.11e9 / 8)
    assert result.summary["mean_sync_s"] == pytest.approx(expected_s)


# --- what is refused ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["schedule.compression=none", "schedule.error_feedback=0", "schedule.bits=16"],
            'network.gather: "store" gathers top-k payloads',
        ),
        (["schedule.gather_peers=5"], "schedule.gather_peers: must be at most the 4 workers"),
        (
            ["network.gather=ring"],
            'schedule.gather_peers: has no effect with network.gather = "ring"',
        ),
        (
            ["network.gather=direct", "store.latency_ms=1"],
            'store.latency_ms: has no effect with network.gather = "direct"',
        ),
        (["exchange.call_overhead_s=0.1"], "[exchange]: prices a ring's collective calls"),
        (
            ["network.on_departure=partial"],
            'network.on_departure: "partial" goes on with a ring\'s',
        ),
        (["store.region=eu"], "store.region: names region 'eu', but no [[region]] is declared"),
    ],
)
def test_what_a_gather_cannot_run_is_refused_in_one_line(overrides, message):
    with pytest.raises(UserError) as refused:
        from_dict(document(STORE, 2), "g.toml", overrides)
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_the_counts_player_leaves_a_gather_to_the_event_model():
    """The counts of a churning fleet price a ring; a store's round is the event model's to play."""
    churning = [
        "island.0.replicas=1000",
        "schedule.outer_steps=300",
        "island.0.mtbf_s=21600",
        "island.0.mttr_s=3600",
        *TOPK,
    ]
    setup = RunSetup.of(load("worked-example", churning + ["network.gather=store"]))
    assert chosen_player(setup).name == "events"
    with pytest.raises(UserError, match='cannot play this run: network.gather = "store"'):
        chosen_player(setup, "counts")
    assert chosen_player(RunSetup.of(load("worked-example", churning))).name == "counts"
