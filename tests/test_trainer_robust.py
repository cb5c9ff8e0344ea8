"""Refusing bad contributions: the screening rule, robust aggregation, and a NaN island in a real
(threaded) DiLoCo run whose global model stays finite."""

import math
import threading

import pytest
import torch
from helpers.inprocess import finish_all, global_weights, in_threads, plan_for, trainers_for

from islands.trainer.core.inprocess import run_threads
from islands.trainer.core.tracing import Clock
from islands.trainer.exchange import sync
from islands.trainer.exchange.comm import Echo, ThreadHub
from islands.trainer.exchange.robust import (
    NORM_CHUNK_VALUES,
    AggregationRule,
    combine,
    contribution_stats,
    screen,
)
from islands.trainer.exchange.sync import Exchanger


def stats_of(*deltas):
    return [contribution_stats(torch.tensor(d, dtype=torch.float32)) for d in deltas]


def test_non_finite_and_outsized_deltas_are_excluded_with_a_reason():
    verdict = screen(
        stats_of([3.0, 4.0], [float("nan"), 0.0], [0.0, 5.0], [300.0, 400.0]), norm_factor=10
    )
    assert verdict.accepted == (True, False, True, False)
    assert "NaN" in verdict.reasons[1]
    assert verdict.reasons[3] == "norm 500 > 10 x the others' median 5"


def test_the_norm_is_summed_in_fp64_across_chunks_and_a_late_nan_is_seen():
    """Three chunks and a bit: 3.0 everywhere has norm 3 sqrt(n); fp32 accumulation would drift."""
    values = 3 * NORM_CHUNK_VALUES + 5
    finite, norm, contributes = contribution_stats(torch.full((values,), 3.0)).tolist()
    assert (finite, contributes) == (1.0, 1.0)
    assert norm == pytest.approx(3.0 * math.sqrt(values), rel=1e-12)
    late = torch.ones(values)
    late[-1] = float("nan")
    assert contribution_stats(late).tolist() == [0.0, 0.0, 1.0]
    assert contribution_stats(torch.full((4,), 3e38))[1].item() == pytest.approx(
        6e38
    )  # squares exceed fp32


def test_an_exchange_among_echoed_members_does_the_whole_work_of_member_0():
    """What ``Exchanger.warm_up`` runs: member 0 averages its own chunk (every member gave the same) and
    gets that chunk back in every member's place: the full-size buffers, the wire bytes counted."""
    x = torch.arange(1000, dtype=torch.float32)
    exchange = Exchanger(Echo(4), None, 32, Clock()).exchange(x)
    chunk = 1024 // 4  # padded to 4 chunks of whole 128-value blocks
    assert exchange.mean.shape == x.shape
    assert torch.equal(exchange.mean[:chunk], x[:chunk]) and torch.equal(
        exchange.mean[chunk : 2 * chunk], x[:chunk]
    )
    assert exchange.sent_bytes == 2 * 3 * chunk * 4
    assert exchange.verdict.accepted == (True,) * 4


def test_the_warm_up_runs_on_the_exchange_thread_that_the_run_then_uses(monkeypatch):
    """glibc keeps freed buffers per thread: a warm-up on another thread leaves the first exchange's
    one-off costs in place (issue 29: the first sync of a run measured 5-15% long)."""
    threads = []
    exchange = Exchanger.exchange

    def recording(self, flat, *rest):
        threads.append(threading.current_thread())
        return exchange(self, flat, *rest)

    monkeypatch.setattr(Exchanger, "exchange", recording)
    exchanger = Exchanger(
        None, None, 8, Clock()
    )  # an elastic run: no cross group before the first epoch
    exchanger.warm_up(3000, members=3)
    exchanger.cross = Echo(3)
    exchanger.launch(torch.ones(3000)).result()
    exchanger.close()
    # one warm-up round or more (until the heap stops growing, ``Exchanger.warm_up``), then the launch
    assert (
        2 <= len(threads) <= 1 + sync.WARM_UP_ROUNDS
        and all(thread is threads[0] for thread in threads)
        and threads[0].name.startswith("islands-sync")
    )


def test_norm_rule_off_keeps_every_finite_delta():
    verdict = screen(stats_of([1.0], [1e6], [float("inf")]), norm_factor=0)
    assert verdict.accepted == (True, True, False)


def test_median_and_trimmed_mean_ignore_one_wild_value_per_coordinate():
    rows = torch.tensor([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0], [1000.0, -1000.0]])
    assert combine(rows, "median", 0.25).tolist() == [2.0, 10.0]  # lower median of an even count
    assert combine(rows, "trimmed_mean", 0.25).tolist() == [2.5, 15.0]


def exchange_all(deltas, rule, bits=32):
    members = ThreadHub(len(deltas)).members()
    clock = Clock()

    def one(member):
        exchanger = Exchanger(members[member], None, bits, clock, rule)
        result = exchanger.exchange(torch.tensor(deltas[member]))
        exchanger.close()
        return result

    return run_threads(len(deltas), one)


def test_mean_over_accepted_islands_only_and_every_island_gets_it():
    results = exchange_all([[1.0, 2.0], [float("nan"), 1.0], [3.0, 4.0]], AggregationRule())
    assert all(r.mean.tolist() == [2.0, 3.0] for r in results)
    assert results[0].verdict.accepted == (True, False, True)


@pytest.mark.parametrize(
    "aggregation, expected", [("median", [2.0, 3.0]), ("trimmed_mean", [2.0, 3.0])]
)
def test_robust_aggregation_all_gathers_and_combines(aggregation, expected):
    rule = AggregationRule(norm_factor=0, aggregation=aggregation, trim_fraction=0.34)
    results = exchange_all([[1.0, 2.0], [2.0, 3.0], [3.0, 400.0]], rule)
    assert all(r.mean.tolist() == expected for r in results)
    assert results[0].sent_bytes == 2 * 128 * 4  # (M - 1) whole fp32 payloads padded to one block


def poison_after(trainer, step):
    """Run ``step`` steps, fill the island's weights with NaN, run to the end."""
    trainer.run_steps(step)
    with torch.no_grad():
        for p in trainer.params:
            p.fill_(float("nan"))
    trainer.run()


def test_a_nan_island_is_excluded_and_the_global_model_stays_finite():
    plan = plan_for(
        {"algorithm": "diloco", "inner_steps": 3, "outer_steps": 3, "bits": 16}, islands=3
    )
    trainers = trainers_for(plan)
    in_threads(trainers, lambda t: poison_after(t, 4) if t.island == 2 else t.run())
    assert all(torch.isfinite(global_weights(t)).all() for t in trainers)
    assert all(torch.equal(global_weights(trainers[0]), global_weights(t)) for t in trainers[1:])
    assert [(e["outer_step"], e["island"]) for e in trainers[0].excluded] == [(1, 2)]
    assert all(math.isfinite(loss) for _, loss in trainers[0].eval_losses)
    assert trainers[2].step == plan.total_steps and torch.isfinite(trainers[2].params[0]).all()
    finish_all(trainers)
