"""Top-k compression (``schedule.compression = "topk"``) in both executors: payload bytes computed by
hand, the simulator's bytes and syncs for a compressed DiLoCo run in closed form, SparseLoCo's outer
step (error feedback in place of outer momentum, or outer Nesterov on the mean), a bad payload refused
and logged, and a real run's bytes equal to the simulator's. Islands run as threads of one process."""

from __future__ import annotations

import copy
import json
from dataclasses import replace

import pytest
import torch
from helpers.diloco_fakes import plan_of, point
from helpers.inprocess import (
    corpus_for,
    finish_all,
    global_weights,
    in_threads,
    plan_for,
    trainers_for,
)
from helpers.multiprocess import rank_state, train
from helpers.scenarios import BASE_DOCUMENT, make_scenario

from islands.analysis.quality.loss_prior import estimate
from islands.scenarios import from_dict
from islands.scenarios.memory import outer_bytes_per_param
from islands.scenarios.trainer_keys import trainer_spec
from islands.schedules import ALL_GATHER, ALL_REDUCE, SCHEDULES, collective_of, schedule_of
from islands.schedules.compression import TopK, payload_bytes
from islands.simulator import simulate
from islands.trainer.core.diloco import DiLoCo, ExchangerTransport
from islands.trainer.core.inprocess import run_threads, thread_groups
from islands.trainer.core.loop import Trainer
from islands.trainer.core.outer import Fragment
from islands.trainer.core.tracing import Clock
from islands.trainer.exchange import sync
from islands.trainer.exchange.comm import ThreadHub
from islands.trainer.exchange.robust import AggregationRule, Verdict
from islands.trainer.exchange.sparse import Entry, TopKCodec, announce, gather_mean, mean_of
from islands.trainer.exchange.sync import Exchanger

SPARSELOCO = TopK(4096, 64, 2)  # 64 of 4096 values (1.56%) at 2 bits, 12-bit places
TOPK = ["schedule.compression=topk", "schedule.bits=2"]


# --- bytes on the wire, by hand ---------------------------------------------------------------------


def test_sparseloco_defaults_are_14_bits_per_kept_value_and_a_16_byte_table():
    # 1000 chunks x 64 kept x (2 + 12) bits = 896,000 bits = 112,000 B, + 4 bins x 4 B
    assert SPARSELOCO.index_width == 12 and SPARSELOCO.table_bytes == 16
    assert SPARSELOCO.payload_bytes(4096 * 1000) == 112_000 + 16


def test_a_72b_model_at_sparselocos_defaults_is_1_97_gb_146_times_less_than_fp32():
    # 72e9 = 4096 x 17,578,125 chunks; x 64 x 14 bits = 1.575e10 bits = 1,968,750,000 B
    assert SPARSELOCO.payload_bytes(72_000_000_000) == 1_968_750_000 + 16
    assert 72e9 * 4 / SPARSELOCO.payload_bytes(72_000_000_000) == pytest.approx(146.29, abs=0.01)


def test_the_tail_chunk_keeps_k_of_its_values_with_a_bitmap_where_that_is_smaller():
    # 2 chunks of 4096: 2 x 64 x 14 = 1792 bits; a tail of 100 keeps 64: 64 x 2 bits of values and a
    # 100-bit bitmap (64 indices would be 768 bits): 228 bits; 2020 bits -> 253 B; + 16 B of table
    assert SPARSELOCO.payload_bytes(2 * 4096 + 100) == 253 + 16
    # a tail of 50 keeps all 50: 100 bits of values, no places; 996 bits -> 125 B
    assert SPARSELOCO.payload_bytes(4096 + 50) == 125 + 16


def test_a_chunk_keeping_more_than_one_value_in_its_index_width_sends_a_bitmap():
    # 64 values, 16 kept: 16 x 6 = 96 index bits > a 64-bit bitmap; 10 chunks x (16 x 1 + 64) = 800
    # bits = 100 B, + 2 bins x 4 B
    assert TopK(64, 16, 1).payload_bytes(640) == 100 + 8
    # 8 kept: 8 x 6 = 48 index bits < 64; 10 x 8 x (1 + 6) = 560 bits = 70 B
    assert TopK(64, 8, 1).payload_bytes(640) == 70 + 8


def test_fp32_and_bf16_values_travel_without_a_table():
    assert TopK(4096, 64, 32).payload_bytes(4096) == 64 * (32 + 12) // 8
    assert TopK(4096, 64, 16).payload_bytes(4096) == 64 * (16 + 12) // 8


def test_dense_payloads_keep_their_bytes_and_compressed_ones_are_gathered():
    dense = make_scenario(["schedule.bits=8"])
    assert payload_bytes(1e9, dense.schedule) == dense.payload_bytes == 1e9
    assert collective_of("mean") == ALL_REDUCE and collective_of("mean", "topk") == ALL_GATHER


# --- the simulator ------------------------------------------------------------------------------------

M, OUTER = 4, 3
N = 4096 * 1000  # parameters: one fragment of 1000 whole chunks
PAYLOAD = 112_016  # SparseLoCo's defaults, above
BYTES_PER_S = 1e9 / 8  # 1 Gbit/s


def compressed_document() -> dict:
    document = copy.deepcopy(BASE_DOCUMENT)
    document["model"]["parameters"] = N
    document["schedule"].update(compression="topk", bits=2, error_feedback=0.95)
    return document


@pytest.mark.parametrize("player", ["lockstep", "events"])
def test_each_worker_sends_m_minus_1_payloads_per_round_around_the_ring(player):
    scenario = from_dict(compressed_document())
    result = simulate(scenario, player=player)
    assert scenario.payload_bytes == PAYLOAD
    assert result.summary["bytes_per_worker"] == OUTER * (M - 1) * PAYLOAD  # 1,008,144 B
    comms = result.trace.loc[result.trace["kind"] == "comm", "bytes"].tolist()
    assert comms == [(M - 1) * PAYLOAD] * (OUTER * M)
    # a ring all-gather of 3 hops at no latency: 3 x 112,016 B at 1.25e8 B/s = 2.688384 ms
    assert result.summary["mean_sync_s"] == pytest.approx((M - 1) * PAYLOAD / BYTES_PER_S)


def test_a_streaming_run_prices_each_fragments_own_payload():
    document = compressed_document()
    document["model"].update(parameters=4096 * 1000 + 4096 * 3, layers=4)
    document["schedule"].update(algorithm="streaming", fragments=2)
    scenario = from_dict(document)
    # layers of 1,027,072 values (250.75 chunks): a fragment of two is 501 chunks and a tail of 2,048
    # keeping 64: 501 x 896 + 64 x (2 + 12) bits (768 index bits < a 2,048-bit bitmap) = 449,792
    # bits = 56,224 B, + 16
    priced = {p.payload_bytes for p in schedule_of(scenario).sync_points(scenario)}
    assert priced == {56_224 + 16}


def test_the_loss_prior_shows_the_dense_loss_and_says_compression_is_not_priced():
    dense, sparse = estimate(make_scenario()), estimate(make_scenario(TOPK))
    assert sparse.loss == dense.loss and set(dense.notes) < set(sparse.notes)
    assert set(sparse.notes) - set(dense.notes) == {
        'compression = "topk" (64 of 4096 values at 2 bits): not priced, the dense schedule\'s '
        "loss is shown"
    }


# --- the mean of the gathered payloads ------------------------------------------------------------------


def gathered_means(verdict: Verdict) -> dict[str, list[float]]:
    """The mean of two payloads, fp32 values, 2 of 4 kept, over the senders and over the workers:
    worker 0 keeps places 0 and 3 of [4, 0, 0, 1], worker 1 places 0 and 1 of [2, 3, 0, 0]."""
    means = {}
    for over in ("senders", "workers"):
        codec = TopKCodec(TopK(chunk_values=4, topk=2, bits=32), 4, over)
        payloads = {
            0: codec.encode(torch.tensor([4.0, 0.0, 0.0, 1.0]))[0],
            1: codec.encode(torch.tensor([2.0, 3.0, 0.0, 0.0]))[0],
        }
        means[over] = mean_of(payloads, codec, verdict, torch.zeros(4), 0, 0).mean.tolist()
    return means


def test_a_kept_place_is_averaged_over_the_workers_that_kept_it_or_over_every_worker():
    """SparseLoCo's code (the default) against Covenant-72B's eq. 2 as written: the sums are
    [6, 3, 0, 1], kept by [2, 1, 0, 1] workers: [3, 3, 0, 1]; over M = 2: [3, 1.5, 0, 0.5]."""
    means = gathered_means(Verdict((True, True), {}))
    assert means == {"senders": [3.0, 3.0, 0.0, 1.0], "workers": [3.0, 1.5, 0.0, 0.5]}


def test_a_refused_worker_keeps_no_place():
    """Worker 1 refused: its places are kept by nobody accepted, worker 0's alone."""
    means = gathered_means(Verdict((True, False), {1: "NaN"}))
    assert means == {"senders": [4.0, 0.0, 0.0, 1.0], "workers": [4.0, 0.0, 0.0, 1.0]}


# --- the outer step -----------------------------------------------------------------------------------

LAYOUT = TopK(16, 4, 8)
START = torch.linspace(-1, 1, 40)


def outer_round(locals_, spec, beta, topk_mean="senders"):
    """One DiLoCo round of two islands with top-k payloads over threads: (fragments, what each sent)."""
    hub = ThreadHub(2)
    members = hub.members()
    fragments, codec = [], TopKCodec(LAYOUT, START.numel())

    def island(index: int):
        param = torch.nn.Parameter(START.clone())
        fragment = Fragment(0, [param], spec, beta)
        with torch.no_grad():
            param.copy_(locals_[index])
        exchanger = Exchanger(
            members[index],
            None,
            8,
            Clock(),
            AggregationRule(norm_factor=0, topk_mean=topk_mean),
            topk=LAYOUT,
        )
        diloco = DiLoCo(
            torch.optim.SGD([param], lr=0.1),
            [fragment],
            ExchangerTransport(exchanger),
            schedule=plan_of([point(0, 1, 1)]),
            alpha=0.0,
            island=index,
            now=lambda: 0.0,
            compressed=True,
        )
        diloco.after_step(1)
        exchanger.close()
        return fragment

    fragments = run_threads(2, island)
    sent = [codec.encode(START - local)[1] for local in locals_]
    return fragments, sent


LOCALS = [START * 0.9 + 0.01 * torch.arange(40), START * 1.1 - 0.02 * torch.arange(40).flip(0)]


def senders_mean(sent: list[torch.Tensor]) -> torch.Tensor:
    """Each place's mean over the payloads that kept it (none of these decodes a kept value to 0)."""
    kept = sum((s != 0).float() for s in sent)
    return sum(sent) / kept.clamp(min=1)


def test_sparseloco_steps_by_the_mean_of_the_payloads_and_keeps_the_rest():
    spec = replace(trainer_spec(), outer_lr=0.7, outer_momentum=0.0)
    fragments, sent = outer_round(LOCALS, spec, 0.95)
    mean = senders_mean(sent)
    assert ((sent[0] != 0) != (sent[1] != 0)).any()  # places one kept and the other did not
    for fragment, local, own in zip(fragments, LOCALS, sent):
        assert torch.allclose(fragment.global_params[0], START - 0.7 * mean, atol=1e-7)
        assert torch.equal(fragment.params[0].detach(), fragment.global_params[0])
        assert torch.equal(fragment.error, (START - local) - own)  # e was 0: e <- delta - sent
    assert torch.count_nonzero(sent[0]) == 12  # 2 chunks of 16 keep 4, the tail of 8 keeps 4


def test_the_mean_over_every_worker_zeros_included_is_an_option():
    """``trainer.topk_mean = "workers"``: Covenant-72B's eq. 2 as written, each place over M."""
    spec = replace(trainer_spec(), outer_lr=0.7, outer_momentum=0.0)
    fragments, sent = outer_round(LOCALS, spec, 0.95, topk_mean="workers")
    for fragment in fragments:
        expected = START - 0.7 * (sent[0] + sent[1]) / 2
        assert torch.allclose(fragment.global_params[0], expected, atol=1e-7)


def test_outer_nesterov_on_the_mean_is_an_option():
    spec = replace(trainer_spec(), outer_lr=0.7, outer_momentum=0.9)
    fragments, sent = outer_round(LOCALS, spec, 0.95)
    mean = senders_mean(sent)
    # torch's Nesterov, first step: b = g; theta <- theta - lr (g + mu b) = theta - lr (1 + mu) g
    expected = START - 0.7 * 1.9 * mean
    assert torch.allclose(fragments[0].global_params[0], expected, atol=1e-6)


def test_error_feedback_stands_in_for_the_outer_momentum_unless_one_is_set():
    topk = {"algorithm": "diloco", "compression": "topk", "error_feedback": 0.95}
    assert plan_for(topk).scenario.trainer.outer_momentum == 0.0
    no_feedback = {**topk, "error_feedback": 0.0}
    assert plan_for(no_feedback).scenario.trainer.outer_momentum == 0.9
    assert plan_for(topk, outer_momentum=0.5).scenario.trainer.outer_momentum == 0.5


def test_the_error_feedback_buffer_takes_the_momentums_place_in_memory():
    topk = ["schedule.compression=topk", "schedule.error_feedback=0.95"]
    diloco, nesterov = SCHEDULES["diloco"], make_scenario(["trainer.outer_momentum=0.9", *topk])
    sparseloco = make_scenario(topk)  # its momentum 0 by default
    # the global copy and Nesterov's momentum, 4 B each; SparseLoCo: the copy and the buffer; both: 12
    assert outer_bytes_per_param(diloco, make_scenario().trainer) == 8
    assert outer_bytes_per_param(diloco, sparseloco.trainer, True) == 8
    assert outer_bytes_per_param(diloco, nesterov.trainer, True) == 12


# --- a bad payload ------------------------------------------------------------------------------------

WIDE = TopK(100, 10, 16)  # 7-bit places can say 100..127: outside a 100-value chunk


def corrupt(kind: str, payload: torch.Tensor) -> torch.Tensor:
    """A payload of WIDE's layout (bf16 values first, then the 7-bit places) made bad."""
    bad = payload.clone()
    if kind == "size":
        return torch.cat([bad, torch.zeros(1, dtype=torch.uint8)])
    if kind == "nan":
        bad[0:2] = torch.tensor([0xC0, 0x7F], dtype=torch.uint8)  # the first value: bf16 NaN
        return bad
    place = 10 * 16  # the first place's 7 bits start at bit 160: byte 20
    bad[place // 8] |= 0x7F  # place >= 127
    return bad


class Corrupting(TopKCodec):
    def __init__(self, codec: TopKCodec, kind: str):
        super().__init__(codec.layout, codec.values)
        self.kind = kind

    def encode(self, x):
        payload, sent = super().encode(x)
        return corrupt(self.kind, payload), sent


REASONS = {
    "size": "its payload is 30 bytes, not 29",
    "nan": "NaN or Inf among its payload's values",
    "index": "place 127 is outside its chunk of 100 values",
}


@pytest.mark.parametrize("kind", list(REASONS))
def test_a_bad_payload_is_refused_by_every_member_and_never_merged(kind):
    vectors = [torch.linspace(-1, 1, 100) * (member + 1) for member in range(3)]
    members = ThreadHub(3).members()
    codec = TopKCodec(WIDE, 100)
    assert codec.size_bytes == 29  # one chunk: 10 x (16 + 7) bits = 230 bits -> 29 B, no table

    def member(rank: int):
        own = Corrupting(codec, kind) if rank == 1 else codec
        payload, sent, verdict = announce(members[rank], vectors[rank], own, True, 0.0)
        return gather_mean(members[rank], Entry(payload, codec, verdict, sent))

    results = run_threads(3, member)
    good = [codec.encode(vectors[m])[1] for m in (0, 2)]
    for result in results:
        assert result.verdict == Verdict((True, False, True), {1: REASONS[kind]})
        assert torch.equal(result.mean, (good[0] + good[1]) / 2)
    assert torch.count_nonzero(results[1].sent) == 0  # not merged: its error feedback keeps it all


def test_a_payload_from_a_peer_that_cannot_be_merged_is_logged_by_the_trainer(monkeypatch):
    def bad_on_member_1(group, x, codec, contributes, norm_factor):
        own = Corrupting(codec, "nan") if group.rank == 1 else codec
        return announce(group, x, own, contributes, norm_factor)

    monkeypatch.setattr(sync, "announce", bad_on_member_1)
    plan = plan_for(
        {"algorithm": "diloco", "compression": "topk", "chunk_values": 100, "topk": 10, "bits": 16},
        islands=3,
    )
    trainers = trainers_for(plan)
    in_threads(trainers, lambda t: t.run())
    reason = "NaN or Inf among its payload's values"
    for trainer in trainers:
        assert trainer.excluded == [
            {"outer_step": step, "fragment": 0, "island": 1, "reason": reason} for step in (0, 1)
        ]
    weights = [global_weights(t) for t in trainers]
    assert torch.isfinite(weights[0]).all() and all(torch.equal(weights[0], w) for w in weights)


# --- a real run against the simulator ------------------------------------------------------------------


def test_a_compressed_runs_measured_bytes_are_the_simulated_ones():
    layout = {"chunk_values": 256, "topk": 16, "bits": 2, "error_feedback": 0.95}
    plan = plan_for({"algorithm": "diloco", "compression": "topk", **layout}, islands=3)
    trainers = trainers_for(plan)
    in_threads(trainers, lambda t: t.run())
    measured = finish_all(trainers)
    values = sum(p.numel() for p in trainers[0].params)  # 10,944: 42 chunks and a tail of 192
    scenario = replace(plan.scenario, model=replace(plan.scenario.model, parameters=values))
    predicted = simulate(scenario)
    # 43 chunks x 16 kept x (2 + 8) bits = 6880 bits = 860 B, + 4 bins x 4 B; 2 of them per round
    assert values == 10_944 and TopK(256, 16, 2).payload_bytes(values) == 876
    sent = [row[5] for t in trainers for row in t.recorder.rows if row[4] == "comm"]
    assert sent == [2 * 876] * (2 * 3)
    assert measured["bytes_per_worker"] == predicted.summary["bytes_per_worker"] == 2 * 2 * 876


STREAMING_TOPK = {
    "algorithm": "streaming",
    "fragments": 2,
    "overlap_steps": 1,
    "inner_steps": 4,
    "outer_steps": 2,
    "compression": "topk",
    "chunk_values": 64,
    "topk": 4,
    "bits": 2,
    "error_feedback": 0.95,
}


def test_a_compressed_run_over_gloo_sends_the_declared_bytes(tmp_path):
    """Two processes on gloo, Streaming DiLoCo with two fragments: every byte sent is the declared
    payloads' (M - 1 = 1 a fragment a round), and each island keeps its own error-feedback buffer."""
    out = tmp_path / "run"
    train(out, sets=[f"schedule.{key}={value}" for key, value in STREAMING_TOPK.items()])
    errors = [[f["error"] for f in rank_state(out, 2, rank)["fragments"]] for rank in range(2)]
    assert not torch.equal(errors[0][0], errors[1][0])
    payloads = [TopK(64, 4, 2).payload_bytes(error.numel()) for error in errors[0]]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["bytes_per_worker"] == 2 * sum(payloads)


def trainers_resuming(plan, out_dir, resume_dir=None):
    groups = thread_groups(plan.islands, plan.ranks_per_island)
    corpus = corpus_for(plan)
    return run_threads(
        plan.world_size,
        lambda rank: Trainer(
            plan, rank, groups[rank], out_dir=out_dir, resume_dir=resume_dir, corpus=corpus
        ),
    )


def test_a_resumed_compressed_run_ends_where_the_uninterrupted_one_does(tmp_path):
    """The error-feedback buffers are in each island's checkpoint: without them the resumed run's
    second round would compress a fresh buffer."""
    plan = plan_for(STREAMING_TOPK, checkpoint_every=1)
    whole = trainers_resuming(plan, tmp_path / "whole")
    in_threads(whole, lambda t: t.run())
    in_threads(trainers_resuming(plan, tmp_path / "parts"), lambda t: t.run(stop_after=1))
    resumed = trainers_resuming(plan, tmp_path / "parts", tmp_path / "parts")
    in_threads(resumed, lambda t: t.run())
    for a, b in zip(whole, resumed):
        assert torch.equal(global_weights(a), global_weights(b))
        assert all(torch.equal(x.error, y.error) for x, y in zip(a.fragments, b.fragments))
