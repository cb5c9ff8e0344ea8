"""Top-k payloads gathered peer to peer or through an object store in the trainer (``network.gather``):
the round's chosen peers' mean over threads, the bytes each member sends, the store's files, a
payload that is bad or missing at the deadline refused and logged, the store's pacing worked by hand,
and real runs (threads, and gloo processes) whose bytes are the simulator's."""

from __future__ import annotations

import json
from concurrent import futures
from dataclasses import replace

import pytest
import torch
from helpers.fake_clock import fake_clock_shaper
from helpers.inprocess import TINY, corpus_for, finish_all, global_weights, in_threads
from helpers.multiprocess import train

from islands.emulation.link_specs import LinkSpec
from islands.scenarios import from_dict
from islands.scenarios.model import StoreSpec
from islands.schedules.compression import TopK
from islands.schedules.gather import DIRECT, STORE, chosen
from islands.simulator import simulate
from islands.trainer.core.inprocess import run_threads, thread_groups
from islands.trainer.core.loop import Trainer
from islands.trainer.exchange.comm import ThreadHub
from islands.trainer.exchange.gathering import Gathering, StoreRounds, object_name
from islands.trainer.exchange.object_store import DirectoryStore
from islands.trainer.exchange.sparse import MISSING, Entry, TopKCodec, announce
from islands.trainer.kinds import make_run_plan
from islands.trainer.runtime.paced import PacedGroup, PacedStore

LAYOUT = TopK(16, 4, 8)
VALUES = 40  # two chunks of 16 and a tail of 8
M = 4
VECTORS = [torch.linspace(-1, 1, VALUES) * (member + 1) + 0.01 * member for member in range(M)]


def rounds(gathering_of, keys, vectors=VECTORS, codec_of=lambda rank, codec: codec):
    """Each member's gathered results of rounds ``keys``, over threads (``gathering_of(rank)``)."""
    members = ThreadHub(len(vectors)).members()
    codec = TopKCodec(LAYOUT, VALUES)

    def member(rank: int):
        gathering, results = gathering_of(rank), []
        for key in keys:
            own = codec_of(rank, codec)
            payload, sent, verdict = announce(members[rank], vectors[rank], own, True, 0.0)
            results.append(gathering.mean(members[rank], key, Entry(payload, codec, verdict, sent)))
        return results

    return run_threads(len(vectors), member)


def decoded(members):
    codec = TopKCodec(LAYOUT, VALUES)
    return sum(codec.encode(VECTORS[m])[1] for m in members) / len(members)


# --- peer to peer ---------------------------------------------------------------------------------------


def test_a_direct_gather_averages_the_rounds_k_payloads_sent_by_them_alone():
    picked = chosen(5, 3, range(M), 2)
    results = [r[0] for r in rounds(lambda rank: Gathering(DIRECT, 2, 5), [(3, 0)])]
    size = TopKCodec(LAYOUT, VALUES).size_bytes
    for rank, result in enumerate(results):
        assert torch.equal(result.mean, decoded(picked))
        assert result.verdict.accepted == tuple(m in picked for m in range(M))
        assert result.verdict.reasons == {}  # not drawn is not excluded: nothing to log
        assert result.sent_bytes == ((M - 1) * size if rank in picked else 0)
        # a member outside the round keeps its whole buffer (nothing of it was merged)
        assert torch.count_nonzero(result.sent) == (12 if rank in picked else 0)


# --- the store ------------------------------------------------------------------------------------------


def test_every_member_puts_once_and_averages_the_k_payloads_it_gets(tmp_path):
    store = DirectoryStore(tmp_path)
    stores = [StoreRounds(store, 10.0) for _ in range(M)]
    keys = [(0, 0), (1, 0)]
    results = rounds(lambda rank: Gathering(STORE, 3, 9, stores[rank]), keys)
    futures.wait([deletion for member in stores for deletion in member.deleting])
    size = TopKCodec(LAYOUT, VALUES).size_bytes
    for key, index in zip(keys, range(2)):
        picked = chosen(9, key[0], range(M), 3)
        for member in range(M):
            result = results[member][index]
            assert torch.equal(result.mean, decoded(picked))
            assert result.sent_bytes == size  # one PUT, drawn or not
    # each member deleted its first round's payload once the second's were all in: those are left
    assert sorted(p.name for p in tmp_path.iterdir()) == [object_name((1, 0), m) for m in range(M)]
    assert all(p.stat().st_size == size for p in tmp_path.iterdir())
    for rounds_of_member in stores:
        rounds_of_member.close()
    assert list(tmp_path.iterdir()) == []


PLACES_AT = 12  # 12 kept values x 8 bits of code, then the first chunk's four 4-bit places


class Dropping(DirectoryStore):
    """A store that loses member 2's payloads and corrupts member 1's: its first chunk's first two
    places both 15."""

    def put(self, name: str, data: bytes) -> None:
        if name.endswith("-2.topk"):
            return
        if name.endswith("-1.topk"):
            data = data[:PLACES_AT] + b"\xff" + data[PLACES_AT + 1 :]
        super().put(name, data)


def test_a_payload_bad_or_missing_at_the_deadline_is_refused_and_never_merged(tmp_path):
    store = Dropping(tmp_path)
    results = [
        r[0]
        for r in rounds(lambda rank: Gathering(STORE, None, 0, StoreRounds(store, 0.2)), [(0, 0)])
    ]
    for result in results:
        assert result.verdict.accepted == (True, False, False, True)
        assert result.verdict.reasons[2] == MISSING
        assert result.verdict.reasons[1] == "a chunk's places repeat or are out of order"
        assert torch.equal(result.mean, decoded([0, 3]))


def test_the_store_is_paced_as_the_simulator_prices_it():
    """An island of 100 Mbit/s up, 400 down, 10 ms; a store 5 ms away whose ingress (1 Gbit/s) and
    egress (0.8 Gbit/s) 4 members share: a PUT of 125,000 B one way and at min(100, 250) Mbit/s, then
    its answer one way back; a LIST a round trip; a GET of 3 such payloads a round trip and at
    min(400, 200) Mbit/s. The round: 6 x 15 ms + 10 ms + 15 ms = 115 ms, the simulator's
    (``test_gather.py``); the first also opens the PUT's connection and the GETs' (a TCP handshake,
    a 30 ms round trip, before each): 175 ms."""
    shaper, now, slept = fake_clock_shaper(
        [LinkSpec(island=0, upload_bits_per_s=100e6, download_bits_per_s=400e6, latency_s=0.010)]
    )
    spec = StoreSpec(ingress_gbps=1.0, egress_gbps=0.8, latency_ms=5)
    inner = MemoryStore()
    store = PacedStore(inner, shaper, 0, M, spec)
    inner.put("b", bytes(125_000))
    inner.put("c", bytes(125_000))
    handshake = [pytest.approx(0.030)]
    for first, round_s in ((True, 0.175), (False, 0.115)):
        start_s = now[0]
        store.put("a", bytes(125_000))
        put = [pytest.approx(0.015 + 125_000 * 8 / 100e6), pytest.approx(0.015)]  # 25, 15 ms
        assert slept == handshake * first + put
        slept.clear()
        assert store.listing("") == ["a", "b", "c"]
        assert slept == [pytest.approx(0.015)] * 2
        slept.clear()
        assert store.get(["a", "b", "c"]) == [bytes(125_000)] * 3
        get = [pytest.approx(0.030 + 3 * 125_000 * 8 / 200e6)]  # 45 ms
        assert slept == handshake * first + get
        assert now[0] - start_s == pytest.approx(round_s)
        slept.clear()
    store.delete("a")  # off the critical path: not paced
    assert slept == [] and inner.listing("") == ["b", "c"]


class Member:
    """One member of a group whose collectives return at once (the pacer alone takes time)."""

    def __init__(self, rank: int, size: int):
        self.rank, self.size = rank, size

    def gather_from(self, tensor, senders):
        return [tensor if member in senders else None for member in range(self.size)]


def test_a_direct_gathers_copies_all_move_at_the_rounds_one_rate():
    """Three islands (up/down Mbit/s: 100/400, 50/400, 100/100), islands 0 and 1 send. Each copy moves
    at the busiest link's share: island 1's uplink carries 2 copies (25 Mbit/s each); island 2's
    downlink takes 2 (50 each). So 125,000 B take 40 ms for every member, sender or not, after the
    20 ms path latency, as the simulator's one transfer does."""
    rates = [(100e6, 400e6), (50e6, 400e6), (100e6, 100e6)]
    waits = []
    for rank in range(3):
        shaper, now, slept = fake_clock_shaper(
            [LinkSpec(i, up, down, 0.010) for i, (up, down) in enumerate(rates)]
        )
        group = PacedGroup(Member(rank, 3), shaper)
        group.gather_from(torch.zeros(125_000, dtype=torch.uint8), (0, 1))
        waits.append(slept)
    assert waits == [[pytest.approx(0.020 + 125_000 * 8 / 25e6)]] * 3


class MemoryStore:
    def __init__(self):
        self.objects = {}

    def put(self, name, data):
        self.objects[name] = data

    def get(self, names):
        return [self.objects.get(name) for name in names]

    def listing(self, prefix):
        return sorted(name for name in self.objects if name.startswith(prefix))

    def delete(self, name):
        self.objects.pop(name, None)


# --- real runs ------------------------------------------------------------------------------------------

LAYOUT_KEYS = {"chunk_values": 256, "topk": 16, "bits": 2, "error_feedback": 0.95}


def gathered_plan(gather: str, peers: int):
    """Three islands of the tiny model, two rounds, K of them gathered each round."""
    document = {
        "name": "tiny",
        "model": {"parameters": 1e5},
        "schedule": {
            "algorithm": "diloco",
            "outer_steps": 2,
            "inner_steps": 2,
            "compression": "topk",
            "gather_peers": peers,
            **LAYOUT_KEYS,
        },
        "network": {"gather": gather},
        "island": [{"name": "a", "replicas": 3, "step_time_s": 0.01, "bandwidth_gbps": 1.0}],
        "trainer": TINY,
    }
    return make_run_plan(from_dict(document))


@pytest.mark.parametrize("gather", [DIRECT, STORE])
def test_a_gathered_runs_bytes_are_the_simulated_ones_and_its_replicas_one_model(gather, tmp_path):
    plan = gathered_plan(gather, 2)
    groups = thread_groups(plan.islands, 1)
    for group in groups:
        group.store = DirectoryStore(tmp_path / "store")
    corpus = corpus_for(plan)
    trainers = run_threads(3, lambda rank: Trainer(plan, rank, groups[rank], corpus=corpus))
    in_threads(trainers, lambda t: t.run())
    measured = finish_all(trainers)
    values = sum(p.numel() for p in trainers[0].params)
    scenario = replace(plan.scenario, model=replace(plan.scenario.model, parameters=values))
    predicted = simulate(scenario)
    size = TopK(256, 16, 2).payload_bytes(values)  # 876 B: test_compression.py works it out
    sent = [[row[5] for row in t.recorder.rows if row[4] == "comm"] for t in trainers]
    expected = [
        [
            (size if gather == STORE else 2 * size if island in chosen(0, step, range(3), 2) else 0)
            for step in range(2)
        ]
        for island in range(3)
    ]
    assert sent == expected
    assert measured["bytes_per_worker"] == pytest.approx(predicted.summary["bytes_per_worker"])
    weights = [global_weights(t) for t in trainers]
    assert all(torch.equal(weights[0], w) for w in weights[1:])


@pytest.mark.parametrize("gather", [DIRECT, STORE])
def test_a_gathered_run_over_gloo_sends_the_declared_bytes(gather, tmp_path):
    """Two processes on gloo, K = 1 of 2: the direct gather's one peer sends its payload once a round,
    the other nothing; through the store each sends one PUT a round, and the run's store is left
    with its last round's payloads only until the end (empty)."""
    out = tmp_path / "run"
    sets = [
        "schedule.compression=topk",
        "schedule.chunk_values=64",
        "schedule.topk=4",
        "schedule.bits=2",
        "schedule.inner_steps=4",
        "schedule.outer_steps=2",
        f"network.gather={gather}",
        "schedule.gather_peers=1",
    ]
    train(out, sets=sets)
    summary = json.loads((out / "summary.json").read_text())
    values = summary_values(out)
    size = TopK(64, 4, 2).payload_bytes(values)
    per_round = size if gather == STORE else size / 2  # direct: one of the two sends one copy
    assert summary["bytes_per_worker"] == pytest.approx(2 * per_round)
    if gather == STORE:
        assert [list(run.iterdir()) for run in (out / "store").iterdir()] == [[]]


def summary_values(out) -> int:
    run = json.loads((out / "run.json").read_text())
    return run["parameters"]
