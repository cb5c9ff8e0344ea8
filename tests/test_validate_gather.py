"""The scaled replica of a top-k exchange, gathered around the ring, peer to peer or through the object
store: its payload is the trainer's, its rates keep the gather's time over compute, and the probe's
costs price it as the trainer runs it. (The real runs: tests/test_validate_gather_real.py.)"""

from __future__ import annotations

import math
import subprocess
import sys
import time
import tomllib

import pytest
import torch

from islands.errors import UserError
from islands.scenarios import load
from islands.schedules.compression import TopK
from islands.schedules.store_round import GET, PUT
from islands.simulator import simulate
from islands.trainer.exchange.object_store import HttpStore, wait_for
from islands.trainer.exchange.sparse import TopKCodec
from islands.validation import suite
from islands.validation.scaling import ScaleOptions, scale, to_toml, trainer_model_values
from islands.validation.topk.costs import GatherCosts, gather_overrides
from islands.validation.topk.replica import scaled_peers

TOPK = [*suite.TOPK, "schedule.bits=2"]
STORE = list(next(c for c in suite.GATHER_CASES if c.name == "topk-store-m3-k2").overrides)
BITS_PER_BYTE = 8


def test_the_scaled_payload_is_the_closed_form_of_the_trainers_model():
    """N values in chunks of 4096: each full chunk keeps 256 values of 2 bits with a 12-bit place; the
    tail of N mod 4096 keeps 256 with a bitmap where that is smaller; then 2^2 fp32 bin means."""
    case = scale(
        load("worked-example", [*TOPK, "island.*.bandwidth_gbps=10"]), ScaleOptions(max_workers=3)
    )
    layers, _ = trainer_model_values(2)
    n = sum(layers)
    full, tail = divmod(n, 4096)
    tail_bits = 256 * 2 + min(256 * 12, tail)
    payload = math.ceil((full * 256 * (2 + 12) + tail_bits) / BITS_PER_BYTE) + 4 * 2**2
    assert (n, full, tail, payload) == (2_553_600, 623, 1_792, 279_408)
    assert case.document["model"]["parameters"] == n
    codec = TopKCodec(TopK(4096, 256, 2), n)
    assert codec.size_bytes == payload
    assert (
        codec.encode(torch.randn(n, generator=torch.Generator().manual_seed(0)))[0].numel()
        == payload
    )
    summary = simulate(case.scenario()).summary  # around the ring: M - 1 payloads up per round
    assert summary["bytes_per_worker"] == 2 * payload * case.document["schedule"]["outer_steps"]


def gather_over_compute(document: dict, workers: int, peers: int) -> float:
    """Closed form for equal links: a store round's PUT at min(up, ingress / M), its K GETs at
    min(down, egress / M), over H steps."""
    island, store = document["island"][0], document["store"]
    payload = TopKCodec(TopK(4096, 256, 2), round(document["model"]["parameters"])).size_bytes
    put_s = payload / (min(island["upload_gbps"], store["ingress_gbps"] / workers) * 1e9 / 8)
    get_s = (
        peers * payload / (min(island["download_gbps"], store["egress_gbps"] / workers) * 1e9 / 8)
    )
    return (put_s + get_s) / (document["schedule"]["inner_steps"] * island["step_time_s"])


def test_a_store_case_keeps_its_gather_time_over_compute_and_each_workers_share_of_the_store():
    original = load("worked-example", STORE)
    case = scale(original, ScaleOptions(max_workers=3))
    document = case.document
    assert "K 6 of 8 -> 2 of 3" in case.notes
    assert document["schedule"]["gather_peers"] == 2 and document["network"] == {"gather": "store"}
    # the original: 1.09 GB payloads; PUT at 10 Gbit/s (80 / 8 = 10 each), 6 GETs at 30 / 8 each
    payload = TopK(4096, 256, 2).payload_bytes(10**10)
    original_s = payload / (10e9 / 8) + 6 * payload / (30e9 / 8 / 8)
    assert gather_over_compute(document, 3, 2) == pytest.approx(original_s / (20 * 1.5), rel=1e-9)
    island, store = document["island"][0], document["store"]
    assert store["egress_gbps"] / 3 / island["download_gbps"] == pytest.approx(30 / 8 / 40)
    assert store["ingress_gbps"] / 3 / island["upload_gbps"] == pytest.approx(80 / 8 / 10)
    assert store["latency_ms"] == pytest.approx(100 * case.time_factor)
    assert tomllib.loads(to_toml(document)) == document


def test_a_ring_and_a_direct_gather_keep_theirs():
    """Equal links b: around the ring (M - 1) S / b, directly the senders' uplinks (M - 1) S / b."""
    for way in ("ring", "direct"):
        original = load(
            "worked-example", [*TOPK, f'network.gather="{way}"', "island.*.bandwidth_gbps=10"]
        )
        document = scale(original, ScaleOptions(max_workers=3)).document
        payload = TopKCodec(TopK(4096, 256, 2), round(document["model"]["parameters"])).size_bytes
        scaled_s = 2 * payload / (document["island"][0]["upload_gbps"] * 1e9 / 8)
        original_s = 7 * TopK(4096, 256, 2).payload_bytes(10**10) / (10e9 / 8)
        assert scaled_s / (20 * 0.2) == pytest.approx(original_s / (20 * 1.5), rel=1e-9), way


def test_k_shrinks_with_m_and_a_sample_stays_a_sample():
    assert scaled_peers(None, 8, 3) is None
    assert scaled_peers(6, 8, 3) == 2  # 2.25
    assert scaled_peers(7, 8, 3) == 2  # 2.6 rounds to 3 = M': kept below M'
    assert scaled_peers(8, 8, 3) == 3  # every worker stays every worker
    assert scaled_peers(1, 8, 3) == 1  # at least one
    assert scaled_peers(2, 3, 3) == 2  # M kept: K kept


def test_churn_with_compression_is_named_as_not_validated():
    scenario = load("worked-example", [*TOPK, "island.*.bandwidth_gbps=10", "island.*.mtbf_s=1e5"])
    notes = scale(scenario, ScaleOptions(max_workers=2)).notes
    assert "churn: not validated (random churn (mtbf_s) is simulated only); run without it" in notes


def costs(**overrides) -> GatherCosts:
    values = dict(screen_s=0.2, fixed_s=0.12, values=2_553_600, hosted_store=True)
    return GatherCosts(**{**values, **overrides})


def test_the_probe_prices_a_store_round_as_the_trainer_runs_it():
    """The simulator's store round, alone on its links: a PUT at the slower of the uplink and a third of
    the ingress, two GETs at the slower of the downlink and a third of the egress, every rate at the
    TCP stream's ratio; then the round's three round trips to the store (PUT, LIST, GET: 0 ms own
    latency + 13.3 ms the store's, there and back), which the trainer makes and the simulator prices
    alike (``schedules/store_round.py``), and the probe's fixed cost spread over those three requests
    as the store's time to answer each (``store.request_ms``: 40 ms). The first round also opens the
    connections, two TCP handshakes of a round trip each at the store's latency alone, as the trainer
    waits them: 4 x 13.3 ms more, none of the fixed cost among them."""
    case = scale(load("worked-example", STORE), ScaleOptions(max_workers=3))
    document, ratio = case.document, 0.95
    overrides = gather_overrides(document, costs(), ratio)
    store_ms = document["store"]["latency_ms"]
    assert document["island"][0]["latency_ms"] == 0.0 and store_ms == pytest.approx(13.3, abs=0.05)
    assert f"store.request_ms={0.12 / 3 * 1000!r}" in overrides
    assert f"network.exchange_cpu_s_per_value={0.2 / 2_553_600!r}" in overrides
    assert not [o for o in overrides if "latency_ms" in o]  # the islands' and the store's, as given
    island, store = document["island"][0], document["store"]
    payload = 279_408
    put_s = payload * 8 / (min(island["upload_gbps"], store["ingress_gbps"] / 3) * 1e9 * ratio)
    get_s = 2 * payload * 8 / (min(island["download_gbps"], store["egress_gbps"] / 3) * 1e9 * ratio)
    round_s = put_s + get_s + 0.12 + 6 * store_ms / 1000
    first_s = round_s + 4 * store_ms / 1000
    rounds = document["schedule"]["outer_steps"]
    assert simulate(case.scenario(tuple(overrides))).summary["mean_sync_s"] == pytest.approx(
        (first_s + (rounds - 1) * round_s) / rounds, rel=1e-9
    )


def test_a_cases_own_store_request_time_is_scaled_and_served_on_top_of_the_probes():
    """A store that takes 30 ms to answer each request: the replica's takes k times that (as its
    latency), and the prediction holds it on top of the probe's fixed cost per request."""
    case = scale(
        load("worked-example", [*STORE, "store.request_ms=30"]), ScaleOptions(max_workers=3)
    )
    request_ms = case.document["store"]["request_ms"]
    assert request_ms == pytest.approx(30 * case.time_factor, rel=1e-12)
    overrides = gather_overrides(case.document, costs(), 1.0)
    assert f"store.request_ms={request_ms + 0.12 / 3 * 1000!r}" in overrides


def test_around_the_ring_the_fixed_cost_spreads_over_its_hops():
    """M = 3: two hops of sender's + receiver's latency carry the fixed cost (no emulated latency);
    directly, one hop; in-process the directory store makes the host's requests, the same price: the
    fixed cost over its three requests."""
    for way, one_ways in (("ring", 4), ("direct", 2)):
        original = load(
            "worked-example", [*TOPK, f'network.gather="{way}"', "island.*.bandwidth_gbps=10"]
        )
        overrides = gather_overrides(
            scale(original, ScaleOptions(max_workers=3)).document, costs(), 1.0
        )
        assert f"island.2.latency_ms={0.12 / one_ways * 1000!r}" in overrides, way
    document = scale(load("worked-example", STORE), ScaleOptions(max_workers=3)).document
    in_process = gather_overrides(document, costs(hosted_store=False), 1.0)
    assert in_process == gather_overrides(document, costs(), 1.0)
    assert f"store.request_ms={0.12 / 3 * 1000!r}" in in_process


def test_the_suite_runs_the_cases_named_and_refuses_an_unknown_one():
    names = ("topk-store-m3-k2", "topk-ring-m3")
    assert [case.name for case in suite.select(False, names)] == [
        "topk-ring-m3",
        "topk-store-m3-k2",
    ]
    with pytest.raises(UserError, match="^--case nowhere: no such case"):
        suite.select(False, ("nowhere",))


@pytest.fixture
def store_host(tmp_path):
    """The object store host on loopback, its address."""
    host = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "islands.trainer.runtime.object_store_host",
            "--root",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = host.stdout.readline()
        assert line.startswith("listening on 127.0.0.1:"), line
        yield f"http://{line.split()[-1]}", tmp_path
    finally:
        host.terminate()
        host.wait(timeout=10)


def test_the_store_host_serves_the_directory_store(store_host):
    address, root = store_host
    store = HttpStore(address)
    store.put("0-0-1.topk", b"\x01\x02\x03")
    store.put("0-1-1.topk", b"")
    assert (root / "0-0-1.topk").read_bytes() == b"\x01\x02\x03"  # the trainer's directory store
    assert store.get(["0-0-1.topk", "0-0-2.topk"]) == [b"\x01\x02\x03", None]
    assert store.listing("0-0-") == ["0-0-1.topk"] and store.listing("") == [
        "0-0-1.topk",
        "0-1-1.topk",
    ]
    started = time.monotonic()
    names = ["0-0-1.topk", "0-0-2.topk"]
    assert not wait_for(store, "0-0-", names, started + 0.2)  # one missing: the deadline
    assert time.monotonic() - started >= 0.2
    store.delete("0-0-1.topk")
    assert store.get(["0-0-1.topk"]) == [None] and not (root / "0-0-1.topk").exists()
    assert store.request(GET, "/..")[0] == 404  # a name outside the directory: none
    assert store.opened == {"own": 1, "fetch": 2, "sweep": 1}
    assert store.request(PUT, "/a%2Fb", b"x")[0] == 400  # a name outside the directory
    assert store.listing("0-1-") == ["0-1-1.topk"]  # the host closed the refused PUT's connection:
    assert store.opened == {"own": 2, "fetch": 2, "sweep": 1}  # the LIST opens a new one
    store.close()


def test_a_store_address_that_is_not_http_host_port_is_refused():
    with pytest.raises(ValueError, match="not an http://host:port address"):
        HttpStore("ftp://store:21")
