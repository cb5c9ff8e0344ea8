"""One round through the object store, declared once (``schedules/store_round.py``): the trainer makes
exactly the declared requests, counted by a store wrapper and by the HTTP host itself, its deletions
off the critical path and still done; the simulator prices them (``test_gather.py`` works its rounds
by hand, ``test_gather_trainer.py`` the trainer's pacing)."""

from __future__ import annotations

import collections
import socket
import threading
from pathlib import Path

import pytest
import torch
from helpers.fake_clock import serving

from islands.emulation import LinkSpec
from islands.emulation.shaper import InProcessLatency
from islands.scenarios.model import StoreSpec
from islands.schedules.compression import TopK
from islands.schedules.gather import STORE
from islands.schedules.store_round import (
    CRITICAL_PATH,
    FETCH,
    FIRST_ROUND_HANDSHAKES,
    GET,
    GET_STAGE,
    NOTHING_HELD,
    OFF_PATH,
    OWN,
    POLL_S,
    PUT,
    PUT_STAGE,
    ROUND_ONE_WAYS,
    SWEEP,
    handshake_one_ways,
    handshakes,
    held_after,
    one_ways,
    opening,
)
from islands.trainer.core.inprocess import run_threads
from islands.trainer.exchange.comm import ThreadHub
from islands.trainer.exchange.gathering import Gathering, StoreRounds, object_name
from islands.trainer.exchange.object_store import DirectoryStore, HttpStore, wait_for
from islands.trainer.exchange.sparse import Entry, TopKCodec, announce
from islands.trainer.runtime.object_store_host import StoreHandler, StoreServer
from islands.trainer.runtime.paced import StoreLatency

DOCS = Path(__file__).resolve().parent.parent / "docs"
M, K, SEED = 3, 2, 4
KEYS = [(0, 0), (1, 0)]
CODEC = TopKCodec(TopK(16, 4, 8), 40)


def run_rounds(rounds: list[StoreRounds], keys=KEYS) -> None:
    """Each member's rounds ``keys`` through its ``rounds``, over threads, K of M averaged."""
    members = ThreadHub(len(rounds)).members()

    def member(rank: int) -> None:
        gathering = Gathering(STORE, K, SEED, rounds[rank])
        for key in keys:
            vector = torch.linspace(-1, 1, 40) * (rank + 1)
            payload, sent, verdict = announce(members[rank], vector, CODEC, True, 0.0)
            gathering.mean(members[rank], key, Entry(payload, CODEC, verdict, sent))

    run_threads(len(rounds), member)


class Counting:
    """A store that logs each request (verb, the thread that made it; a GET of n objects is n
    requests) and whose PUTs end together: each waits for every member's, as the simulator's stage
    ends for all at once. ``lost``: members whose PUTs never arrive."""

    def __init__(self, inner, barrier: threading.Barrier, lost: tuple[int, ...] = ()):
        self.inner, self.barrier, self.lost = inner, barrier, lost
        self.log: list[tuple[str, str]] = []

    def note(self, method: str, times: int = 1) -> None:
        self.log += [(method, threading.current_thread().name)] * times

    def put(self, name, data):
        self.note("PUT")
        if not name.endswith(tuple(f"-{member}.topk" for member in self.lost)):
            self.inner.put(name, data)
        self.barrier.wait(timeout=30)

    def listing(self, prefix):
        self.note("LIST")
        return self.inner.listing(prefix)

    def get(self, names):
        self.note("GET", len(names))
        return self.inner.get(names)

    def delete(self, name):
        self.note("DELETE")
        self.inner.delete(name)

    def methods(self, background: bool) -> list[str]:
        return [m for m, thread in self.log if thread.startswith("islands-delete") == background]


def test_a_round_is_a_put_a_list_and_the_k_gets_in_series_each_a_round_trip():
    assert [request.method for request in CRITICAL_PATH] == ["PUT", "LIST", "GET"]
    assert [request.method for request in OFF_PATH] == ["DELETE"]
    assert [request.stage for request in CRITICAL_PATH] == [PUT_STAGE, GET_STAGE, GET_STAGE]
    assert (one_ways(PUT_STAGE), one_ways(GET_STAGE), ROUND_ONE_WAYS) == (2, 4, 6)
    for page in ("limits.md", "how-to/compression.md"):  # the poll the pages quote
        assert f"again every {POLL_S * 1000:.0f} ms" in " ".join((DOCS / page).read_text().split())


def test_a_members_first_round_opens_its_puts_connection_then_its_k_gets_at_once():
    """The connections, declared once: the PUT and the LIST on the member's own, the K GETs one each,
    the DELETEs on one of their own. A first round opens the PUT's (PUT stage), then the K GETs' at
    once (GET stage): one handshake time each stage, 2 h one ways; later rounds open none, but one
    whose K grows opens the fetch connections it lacks."""
    assert [request.connection for request in CRITICAL_PATH + OFF_PATH] == [OWN, OWN, FETCH, SWEEP]
    assert opening(NOTHING_HELD, K) == [(PUT, 1), (GET, K)]
    assert held_after(NOTHING_HELD, K) == {OWN: 1, FETCH: K}
    assert [handshakes(stage, NOTHING_HELD, K) for stage in (PUT_STAGE, GET_STAGE)] == [1, 1]
    assert FIRST_ROUND_HANDSHAKES == 2
    steady = held_after(NOTHING_HELD, K)
    assert opening(steady, K) == [] and held_after(steady, K) == steady
    assert opening(steady, K + 1) == [(GET, 1)]  # K grew: one more, in the GET stage
    assert opening(steady, K - 1) == []  # K shrank: its idle connections stay open
    # TCP (h = 1): 4 one ways more in the first round; TLS 1.2 over TCP (h = 3): 12
    for round_trips, extra in ((1, 4), (3, 12)):
        first = [
            handshake_one_ways(s, NOTHING_HELD, K, round_trips) for s in (PUT_STAGE, GET_STAGE)
        ]
        assert sum(first) == extra and first[0] == first[1]
        assert handshake_one_ways(GET_STAGE, steady, K, round_trips) == 0


def test_the_trainer_makes_the_declared_requests_and_deletes_off_the_critical_path(tmp_path):
    barrier = threading.Barrier(M)
    stores = [Counting(DirectoryStore(tmp_path), barrier) for _ in range(M)]
    rounds = [StoreRounds(store, 30.0) for store in stores]
    run_rounds(rounds)
    for member in rounds:
        member.close()
    for store in stores:
        on_path = ["PUT", "LIST", "GET", "GET"]  # K = 2; the first LIST sees every PUT
        assert store.methods(background=False) == on_path * len(KEYS)
        # each round's payload deleted in the background: the first once the second's are all in,
        # the second by close()
        assert store.methods(background=True) == ["DELETE", "DELETE"]
    assert list(tmp_path.iterdir()) == []


def test_a_round_whose_list_stops_at_the_deadline_deletes_nothing_until_the_end(tmp_path):
    """Member 2's payloads never arrive: every LIST of every round misses one (a deadline of 0 s: one
    LIST a round), so no member deletes what a late member might still read, until ``close``."""
    barrier = threading.Barrier(M)
    stores = [Counting(DirectoryStore(tmp_path), barrier, lost=(2,)) for _ in range(M)]
    rounds = [StoreRounds(store, 0.0) for store in stores]
    run_rounds(rounds)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        object_name(key, member) for key in KEYS for member in (0, 1)
    ]
    assert all(store.methods(background=True) == [] for store in stores)
    assert [len(member.kept) for member in rounds] == [2] * M
    for member in rounds:
        member.close()
    assert list(tmp_path.iterdir()) == []
    assert [store.methods(background=True) for store in stores] == [["DELETE"] * 2] * M


class Blocking(DirectoryStore):
    """A directory store whose deletions wait until ``go`` is set."""

    def __init__(self, root):
        super().__init__(root)
        self.go = threading.Event()

    def delete(self, name):
        assert self.go.wait(timeout=30)
        super().delete(name)


def test_no_round_waits_for_a_deletion(tmp_path):
    """A deletion that cannot finish holds back no round; ``close`` waits for it."""
    store = Blocking(tmp_path)
    rounds = [StoreRounds(store, 30.0)]
    run_rounds(rounds, keys=[(0, 0), (1, 0), (2, 0)])
    assert len(rounds[0].deleting) == 2  # the first two rounds' payloads, still being deleted
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        object_name((step, 0), 0) for step in range(3)
    ]
    store.go.set()
    rounds[0].close()
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def counted_host(tmp_path):
    """The store host on loopback in this process, counting its connections and requests by verb."""
    counts: collections.Counter[str] = collections.Counter()

    class Handler(StoreHandler):
        def setup(self) -> None:
            counts["connections"] += 1
            super().setup()
            # small answers leave at once: Nagle's algorithm would hold a body for the headers' ACK
            assert self.connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            counts["without delay"] += 1

        def do_PUT(self) -> None:
            counts["PUT"] += 1
            super().do_PUT()

        def do_GET(self) -> None:
            counts["LIST" if "?list=" in self.path else "GET"] += 1
            super().do_GET()

        def do_DELETE(self) -> None:
            counts["DELETE"] += 1
            super().do_DELETE()

    server = StoreServer(("127.0.0.1", 0), tmp_path)
    server.RequestHandlerClass = Handler
    with serving(server) as url:
        yield url, counts


def test_the_host_receives_the_declared_requests_on_the_declared_connections(
    counted_host, tmp_path
):
    """M = 3 members, K = 2, two rounds and the end: each member's PUT, LIST and two GETs a round,
    and one DELETE per round (the first round's in the second, the second's at the end). Its first
    round opens the declared connections, 1 + K, and nothing opens on the path after it: the first
    DELETE opens one more, off the path. The host counts them: M (K + 2), not one a request."""
    address, counts = counted_host
    barrier = threading.Barrier(M)
    clients = [HttpStore(address) for _ in range(M)]
    rounds = [StoreRounds(Counting(client, barrier), 30.0) for client in clients]
    run_rounds(rounds, keys=KEYS[:1])
    first = held_after(NOTHING_HELD, K)
    assert [client.opened for client in clients] == [first] * M
    assert counts["connections"] == M * (1 + K)
    run_rounds(rounds, keys=KEYS[1:])
    for member, client in zip(rounds, clients):
        member.close()
        client.close()
    assert [client.opened for client in clients] == [{**first, SWEEP: 1}] * M
    verbs = {"PUT": 6, "LIST": 6, "GET": 12, "DELETE": 6}  # M x 2 rounds, K GETs each
    assert {verb: counts[verb] for verb in verbs} == verbs
    assert counts["connections"] == M * (K + 2) < sum(verbs.values())
    assert counts["without delay"] == counts["connections"]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "netem, round_trips, slept_s",
    [
        (False, 1, 0.030),  # latency slept in-process: TCP's round trip, 2 x (10 + 5) ms
        (True, 1, None),  # netem delays the handshake's packets: nothing more
        (True, 3, 0.060),  # TLS 1.2's two round trips past TCP's, which netem made
        (False, 3, 0.090),
    ],
)
def test_the_emulated_store_waits_each_new_connections_handshake(
    counted_host, netem, round_trips, slept_s
):
    """A first round through the store host under kernel shaping (an island 10 ms away, the store 5
    ms more): the connections it opens, the PUT's and the K GETs' (at once, each on its thread), each
    wait the handshake's round trips that the kernel does not make; a second round opens none."""
    address, _ = counted_host
    slept: list[float] = []
    link = LinkSpec(0, 1e9, 1e9, 0.010)
    pacer = InProcessLatency([link], sleep_latency=not netem, sleep=lambda _s: None)
    spec = StoreSpec(latency_ms=5.0, handshake_round_trips=round_trips)
    store = StoreLatency(address, pacer, 0, spec, sleep=slept.append)
    names = [object_name((0, 0), member) for member in range(K)]
    for _ in range(2):
        for name in names:
            store.put(name, b"x")
        assert wait_for(store, "0-0-", names, 0.0)
        assert store.get(names) == [b"x"] * K
    store.inner.close()
    assert store.inner.opened == {OWN: 1, FETCH: K}
    assert slept == ([] if slept_s is None else [pytest.approx(slept_s)] * (1 + K))
