"""The object store's own time to answer a request (``store.request_ms``, r), declared once
(``schedules/store_round.py``): paid once by each request on a round's path (the PUT, the LIST, the K
GETs at once), never per handshake round trip; priced by both players, bounded by the budget, waited
by the trainer's paced directory store and by the store host (each request on its own thread, the K
GETs at once); the how-to's worked number; the live page's slider."""

from __future__ import annotations

import argparse
import copy
import threading
from pathlib import Path

import pandas as pd
import pytest
from helpers.fake_clock import fake_clock_shaper, serving
from helpers.scenarios import BASE_DOCUMENT

from islands.analysis.live.controls import panel
from islands.emulation.link_specs import LinkSpec
from islands.scenarios import ScenarioSource, from_dict, load
from islands.scenarios.model import StoreSpec
from islands.schedules.store_round import GET_STAGE, PUT_STAGE, ROUND_REQUESTS, requests
from islands.simulator import simulate
from islands.simulator.network.gather_rounds import store_extra_s
from islands.trainer.exchange.object_store import DirectoryStore, HttpStore
from islands.trainer.runtime.object_store_host import StoreServer, request_ms
from islands.trainer.runtime.paced import PacedStore

DOCS = Path(__file__).resolve().parent.parent / "docs"
OUTER = 3
N = 4096 * 1000  # one fragment of 1000 whole chunks
PAYLOAD = 112_016  # 1000 chunks x 64 kept x (2 + 12) bits = 112,000 B, + 4 bins x 4 B
BYTES_PER_S = 1e9 / 8  # every link 1 Gbit/s
ISLAND_MS = (10.0, 20.0, 5.0)  # three islands, one worker each
STORE_MS, REQUEST_MS, K, H = 5.0, 30.0, 2, 2


def document(store: dict) -> dict:
    """K = 2 of M = 3 workers through a store, 3 rounds of 10 steps."""
    doc = copy.deepcopy(BASE_DOCUMENT)
    doc["model"]["parameters"] = N
    doc["schedule"].update(
        compression="topk", bits=2, error_feedback=0.95, inner_steps=10, gather_peers=K
    )
    doc["network"] = {"gather": "store"}
    island = doc["island"][0]
    doc["island"] = [
        {**island, "name": f"i{index}", "replicas": 1, "latency_ms": ms}
        for index, ms in enumerate(ISLAND_MS)
    ]
    doc["store"] = store
    return doc


def round_seconds(result) -> list[float]:
    """Each round's sync, from worker 0's comm rows, in outer-step order."""
    comms = result.trace[(result.trace["kind"] == "comm") & (result.trace["worker"] == 0)]
    return (comms["time_end_s"] - comms["time_start_s"]).tolist()


def test_a_round_waits_the_stores_answer_once_per_request_on_its_path():
    """The PUT stage holds one request, the GET stage two (the LIST, then the K GETs at once)."""
    assert (requests(PUT_STAGE), requests(GET_STAGE), ROUND_REQUESTS) == (1, 2, 3)


@pytest.mark.parametrize("player", ["lockstep", "events"])
def test_the_simulator_prices_a_first_and_a_steady_round_by_hand(player):
    """l = 20 + 5 = 25 ms, the slowest worker's way to the store; r = 30 ms; h = 2; S = 112,016 B at
    1 Gbit/s (0.896128 ms). A steady round: the PUT stage 2 l + r + S / b (80.896128 ms), the GET
    stage 4 l + 2 r + 2 S / b (161.792256 ms): 242.688384 ms. The first also opens the PUT's
    connection and the K GETs', 2 h round trips at l alone (4 h l = 200 ms), no r among them."""
    store = {"latency_ms": STORE_MS, "request_ms": REQUEST_MS, "handshake_round_trips": H}
    result = simulate(from_dict(document(store)), player=player)
    assert result.summary["player"] == player
    assert result.summary["bytes_per_worker"] == OUTER * PAYLOAD
    l_s, r_s, s_s = 0.025, 0.030, PAYLOAD / BYTES_PER_S
    steady_s = (2 * l_s + r_s + s_s) + (4 * l_s + 2 * r_s + K * s_s)
    first_s = steady_s + 4 * H * l_s
    assert (steady_s, first_s) == (pytest.approx(0.242688384), pytest.approx(0.442688384))
    assert round_seconds(result) == pytest.approx([first_s] + [steady_s] * (OUTER - 1), rel=1e-12)


@pytest.mark.parametrize("player", ["lockstep", "events"])
def test_a_store_that_answers_at_once_keeps_todays_rounds(player):
    """request_ms = 0 (given or not): the rounds of before the key, 6 l and the bytes, the first 4 h l
    more; the same trace row for row."""
    store = {"latency_ms": STORE_MS, "handshake_round_trips": H}
    default = simulate(from_dict(document(store)), player=player)
    given = simulate(from_dict(document({**store, "request_ms": 0.0})), player=player)
    pd.testing.assert_frame_equal(default.trace, given.trace)
    assert default.summary == given.summary
    steady_s = 6 * 0.025 + (1 + K) * PAYLOAD / BYTES_PER_S
    assert round_seconds(default) == pytest.approx(
        [steady_s + 4 * H * 0.025] + [steady_s] * (OUTER - 1), rel=1e-12
    )


def test_the_how_tos_store_that_takes_40_ms_to_answer_is_its_rounds_by_hand():
    """docs/how-to/compression.md: the worked example, K = 4 of 8, its store 50 ms away over TLS 1.2
    (h = 3), 40 ms to answer each request: 5 payloads of 0.2734 GB at 1 Gbit/s, 6 x 50 ms and
    3 x 40 ms a round; the first round 0.6 s more, no answer's time among it. Folded into the
    latency instead (70 ms), the first round would be 4 h x 20 ms longer."""
    overrides = ["schedule.compression=topk", "schedule.bits=2", "schedule.error_feedback=0.95"]
    overrides += ["network.gather=store", "schedule.gather_peers=4", "store.latency_ms=50"]
    overrides += ["store.handshake_round_trips=3"]
    result = simulate(load("worked-example", [*overrides, "store.request_ms=40"]))
    steady_s = 5 * 273_437_516 * 8 / 1e9 + 6 * 0.050 + 3 * 0.040
    first_s = steady_s + 4 * 3 * 0.050
    assert (steady_s, first_s) == (
        pytest.approx(11.3575, abs=1e-6),
        pytest.approx(11.9575, abs=1e-6),
    )
    assert result.summary["stall_s"] == pytest.approx(19 * steady_s + first_s)
    folded = simulate(load("worked-example", [*overrides, "store.latency_ms=70"]))
    assert folded.summary["stall_s"] - result.summary["stall_s"] == pytest.approx(4 * 3 * 0.020)
    text = " ".join((DOCS / "how-to" / "compression.md").read_text().split())
    assert f"19 x {steady_s:.4f} + {first_s:.4f} = {19 * steady_s + first_s:.2f} s" in text
    assert f"{result.summary['stall_s']:.1f} s in the summary" in text
    assert "4 x 3 x 20 ms = 0.24 s longer" in text


def test_the_budget_bounds_a_round_with_the_stores_answers():
    """The budget's extra seconds for a store round grow by the round's three answers, 3 r."""
    scenario = from_dict(document({"latency_ms": STORE_MS, "request_ms": REQUEST_MS}))
    at_once = from_dict(document({"latency_ms": STORE_MS}))
    extra_s = store_extra_s(scenario, 3, BYTES_PER_S) - store_extra_s(at_once, 3, BYTES_PER_S)
    assert extra_s == pytest.approx(3 * 0.030, rel=1e-12)


def paced_store(root, request_ms: float):
    """Member 0 of 4 through a paced directory store: its island 10 ms away, 100 Mbit/s up and 400
    down, the store 5 ms more; a fake clock that only sleeps move."""
    shaper, now, slept = fake_clock_shaper(
        [LinkSpec(island=0, upload_bits_per_s=100e6, download_bits_per_s=400e6, latency_s=0.010)]
    )
    spec = StoreSpec(latency_ms=5.0, request_ms=request_ms)
    return PacedStore(DirectoryStore(root), shaper, 0, 4, spec), now, slept


def approx(*seconds: float) -> list:
    return [pytest.approx(s) for s in seconds]


def test_the_paced_directory_store_waits_each_answer_after_its_bytes_or_before_them(tmp_path):
    """r = 30 ms, l = 15 ms. The PUT's 125,000 B one way and at 100 Mbit/s (25 ms), its answer's r,
    then one way back; the LIST one way, r, one way; the three GETs at once: one r before their
    first byte, then a round trip and 375,000 B at 400 Mbit/s (37.5 ms). A steady round 6 l + 3 r +
    17.5 ms = 197.5 ms; the first opens the PUT's and the GETs' connections, 2 x 30 ms more (no r)."""
    store, now, slept = paced_store(tmp_path, 30.0)
    for name in ("b", "c"):
        store.inner.put(name, bytes(125_000))
    handshake = approx(0.030)
    for first, round_s in ((True, 0.2575), (False, 0.1975)):
        start_s = now[0]
        store.put("a", bytes(125_000))
        assert slept == handshake * first + approx(0.025, 0.030, 0.015)
        slept.clear()
        assert store.listing("") == ["a", "b", "c"]
        assert slept == approx(0.015, 0.030, 0.015)
        slept.clear()
        assert store.get(["a", "b", "c"]) == [bytes(125_000)] * 3
        assert slept == handshake * first + approx(0.030, 0.030 + 0.0075)
        slept.clear()
        assert now[0] - start_s == pytest.approx(round_s)


def test_a_paced_store_that_answers_at_once_waits_nothing_more(tmp_path):
    """r = 0: the waits of before the key, no zero-length one among them."""
    store, _, slept = paced_store(tmp_path, 0.0)
    store.put("a", bytes(125_000))
    store.listing("")
    store.get(["a"])
    assert slept == approx(0.030, 0.025, 0.015, 0.015, 0.015, 0.030, 0.030 + 0.0025)


class Answering:
    """The store host's wait for each answer, heard: every request's seconds, and the K GETs'
    threads held until all K wait at once (a host that served them one after another would break
    the barrier, and its GETs would fail)."""

    def __init__(self, gets: int):
        self.waits: list[float] = []
        self.lock = threading.Lock()
        self.together = threading.Barrier(gets, timeout=30)
        self.gets_now = False

    def sleep(self, seconds: float) -> None:
        with self.lock:
            self.waits.append(seconds)
        if self.gets_now:
            self.together.wait()


@pytest.fixture
def answering_host(tmp_path):
    """The store host on loopback, taking 30 ms to answer each request, its waits heard."""
    answering = Answering(K)
    with serving(StoreServer(("127.0.0.1", 0), tmp_path, 0.030, answering.sleep)) as url:
        yield url, answering


def test_the_store_host_waits_each_answer_the_k_gets_at_once(answering_host):
    """A member's round through the host: its PUT, its LIST and its K = 2 GETs each wait r once
    (the GETs at once, on their own threads), then its DELETE, off the path, its own."""
    address, answering = answering_host
    client = HttpStore(address)
    client.put("0-0-0.topk", b"p0")
    client.put("0-0-1.topk", b"p1")
    assert client.listing("0-0-") == ["0-0-0.topk", "0-0-1.topk"]
    assert answering.waits == [0.030] * 3
    answering.gets_now = True
    assert client.get(["0-0-0.topk", "0-0-1.topk"]) == [b"p0", b"p1"]
    assert answering.waits == [0.030] * (3 + K)
    answering.gets_now = False
    client.delete("0-0-0.topk")
    client.close()
    assert answering.waits == [0.030] * (4 + K)


def test_a_store_host_that_answers_at_once_waits_nothing(tmp_path):
    heard: list[float] = []
    with serving(StoreServer(("127.0.0.1", 0), tmp_path, sleep=heard.append)) as url:
        client = HttpStore(url)
        client.put("a", b"x")
        assert client.listing("") == ["a"] and client.get(["a"]) == [b"x"]
        client.close()
    assert heard == []


def test_the_live_page_gives_the_stores_answer_time_a_linear_slider_from_0():
    """Its default is 0 (a log slider around 0 would span nothing): 0 to 300 ms, as a latency's."""
    sections = {
        s["id"]: {c["key"]: c for c in s["controls"]}
        for s in panel(ScenarioSource.read("worked-example")).to_dict()["sections"]
    }
    control = sections["store"]["store.request_ms"]
    assert control["in_force"] == 0.0
    assert control["slider"] == {"low": 0.0, "high": 300.0, "log": False}


@pytest.mark.parametrize("text", ["-1", "nan", "inf"])
def test_the_store_host_refuses_a_time_to_answer_that_is_no_duration(text):
    with pytest.raises(argparse.ArgumentTypeError, match="must be a finite number >= 0"):
        request_ms(text)
    assert request_ms("30") == 30.0
