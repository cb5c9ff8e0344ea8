"""The exchange as real stacks make it (``[exchange]``, ``network.ring_efficiency``): collective calls
per exchange and their fixed costs, the first call's set-up, the outer step and a ring that gets less
than its slowest link. Closed forms computed by hand, in both the array and the event players, and
the trainer's calls on the same pieces."""

from __future__ import annotations

import math

import pytest
import torch
from helpers.held_out import BASE, HOP_S, PARAMETERS, RATE, M, S
from helpers.scenarios import make_scenario
from hypothesis import given
from hypothesis import strategies as st

from islands.scenarios import ScenarioError
from islands.scenarios.model import ExchangeSpec
from islands.simulator import simulate
from islands.trainer.core.inprocess import run_threads
from islands.trainer.core.tracing import Clock
from islands.trainer.exchange.comm import ThreadHub
from islands.trainer.exchange.robust import AggregationRule
from islands.trainer.exchange.sync import Exchanger, call_pieces, exchange_calls

BYTES_S = 2 * (M - 1) / M * S / RATE  # 29.568 s
RING_LATENCY_S = 2 * (M - 1) * HOP_S  # 12 ms per call


def both(overrides: list[str]) -> list[dict]:
    scenario = make_scenario(BASE + overrides)
    return [simulate(scenario).summary, simulate(scenario, player="events").summary]


def test_a_flat_exchange_is_one_ring():
    for summary in both([]):
        assert summary["mean_sync_s"] == pytest.approx(RING_LATENCY_S + BYTES_S)


def test_per_tensor_calls_each_pay_the_rings_latency_and_their_fixed_cost():
    # 100 tensors: 100 x (12 ms + 0.2 ms) = 1.22 s before the same bytes.
    for summary in both(
        ['exchange.calls="per_tensor"', "exchange.tensors=100", "exchange.call_overhead_s=0.0002"]
    ):
        assert summary["mean_sync_s"] == pytest.approx(100 * (RING_LATENCY_S + 0.0002) + BYTES_S)
        assert summary["bytes_per_worker"] == pytest.approx(5 * 2 * (M - 1) / M * S)


def test_buckets_are_counted_in_mib_of_unencoded_values():
    # 123.2 MB of fp32 gradient in 25 MiB buckets: ceil(123.2e6 / 26,214,400) = 5 calls.
    assert math.ceil(S / (25 * 2**20)) == 5
    buckets = [
        'exchange.calls="buckets"',
        "exchange.bucket_cap_mb=25",
        "exchange.call_overhead_s=0.01",
    ]
    for summary in both(buckets):
        assert summary["mean_sync_s"] == pytest.approx(5 * (RING_LATENCY_S + 0.01) + BYTES_S)
    # bf16 on the wire: the buckets still hold fp32 values (bytes_per_param), so still 5 calls
    for summary in both([*buckets, "schedule.bits=16"]):
        assert summary["mean_sync_s"] == pytest.approx(5 * (RING_LATENCY_S + 0.01) + BYTES_S / 2)
    # bucket_cap_mb left at PyTorch's default: a first bucket of 1 MiB, then 25 MiB ones, so
    # 1 + ceil((123.2e6 - 1,048,576) / 26,214,400) = 1 + 5 = 6 calls
    for summary in both([buckets[0], buckets[2]]):
        assert summary["mean_sync_s"] == pytest.approx(6 * (RING_LATENCY_S + 0.01) + BYTES_S)


def test_only_the_runs_first_call_pays_the_set_up():
    for summary in both(["exchange.first_call_s=0.6"]):
        assert summary["mean_sync_s"] == pytest.approx(RING_LATENCY_S + BYTES_S + 0.6 / 5)
        assert summary["wall_time_s"] == pytest.approx(
            5 * (8 * 0.3 + RING_LATENCY_S + BYTES_S) + 0.6
        )


def test_the_outer_step_stalls_every_worker_after_each_sync_in_shares_by_fragment():
    for summary in both(["exchange.outer_step_s=0.05"]):
        assert summary["stall_s"] == pytest.approx(5 * (RING_LATENCY_S + BYTES_S + 0.05))
        assert summary["mean_sync_s"] == pytest.approx(
            RING_LATENCY_S + BYTES_S
        )  # the collective alone
    # Streaming, 4 fragments in an H = 8 period, no overlap: each blocking sync moves a quarter and takes a
    # quarter of the outer step
    streaming = [
        'schedule.algorithm="streaming"',
        "schedule.fragments=4",
        "model.layers=4",
        "exchange.outer_step_s=0.05",
    ]
    for summary in both(streaming):
        fragment_s = RING_LATENCY_S + BYTES_S / 4
        assert summary["mean_sync_s"] == pytest.approx(fragment_s)
        assert summary["wall_time_s"] == pytest.approx(5 * (8 * 0.3 + 4 * (fragment_s + 0.05 / 4)))


def test_ring_efficiency_slows_the_bytes_only():
    for summary in both(["network.ring_efficiency=0.79"]):
        assert summary["mean_sync_s"] == pytest.approx(RING_LATENCY_S + BYTES_S / 0.79)
        assert summary["peak_bandwidth_gbps"] == pytest.approx(0.79 * 0.05)


def test_a_jittered_run_agrees_between_the_players_rank_for_rank():
    scenario = make_scenario(
        BASE
        + [
            "island.0.jitter_cv=0.2",
            'exchange.calls="per_tensor"',
            "exchange.tensors=40",
            "exchange.first_call_s=0.5",
            "exchange.outer_step_s=0.02",
            "network.ring_efficiency=0.9",
        ]
    )
    arrays, events = simulate(scenario), simulate(scenario, player="events", group_replicas=False)
    for key in ("wall_time_s", "stall_s", "idle_s", "mean_sync_s", "bytes_per_worker"):
        assert arrays.summary[key] == pytest.approx(events.summary[key], rel=1e-12)


@pytest.mark.parametrize(
    "overrides, key, words",
    [
        (
            ["exchange.bucket_cap_mb=25"],
            "exchange.bucket_cap_mb",
            'has no effect with calls = "flat"',
        ),
        (['exchange.calls="buckets"', "exchange.tensors=10"], "exchange.tensors", "has no effect"),
        (['exchange.calls="per_tensor"'], "exchange.tensors", "is required"),
        (['exchange.calls="per_rank"'], "exchange.calls", "must be one of"),
        (["exchange.call_overhead_s=-1"], "exchange.call_overhead_s", "must be >= 0"),
        (["exchange.first_call_s=nan"], "exchange.first_call_s", ""),
        (
            ["exchange.bucket_cap_mb=0", 'exchange.calls="buckets"'],
            "exchange.bucket_cap_mb",
            "must be >=",
        ),
        (["network.ring_efficiency=0"], "network.ring_efficiency", "must be >= 0.001"),
        (["network.ring_efficiency=1.2"], "network.ring_efficiency", "must be <= 1"),
        (
            ['schedule.algorithm="ddp"', "exchange.outer_step_s=0.1"],
            "exchange.outer_step_s",
            "takes no outer step",
        ),
        (
            ['schedule.algorithm="decoupled"', "exchange.call_overhead_s=0.1"],
            "[exchange]",
            "has none",
        ),
        (['network.collective="tree"', "exchange.first_call_s=0.1"], "[exchange]", "not priced"),
        (["exchange.calls_per_step=2"], "exchange.calls_per_step", "unknown"),
    ],
)
def test_exchange_keys_that_do_nothing_or_break_a_rule_are_refused(overrides, key, words):
    with pytest.raises(ScenarioError) as error:
        make_scenario(BASE + overrides)
    assert key in str(error.value) and words in str(error.value)


@given(
    values=st.integers(1, 10**12),
    total=st.integers(1, 10**12),
    tensors=st.integers(1, 10**6),
    cap_mb=st.floats(1 / 1024, 1e3),
    bytes_per_value=st.sampled_from([0.5, 1, 2, 4]),
)
def test_calls_are_whole_and_at_least_one_and_buckets_hold_their_values(
    values, total, tensors, cap_mb, bytes_per_value
):
    values = min(values, total)
    buckets = ExchangeSpec(calls="buckets", bucket_cap_mb=cap_mb).calls_of(
        values, total, bytes_per_value
    )
    assert buckets >= 1 and (
        buckets - 1
    ) * cap_mb * 2**20 < values * bytes_per_value <= buckets * cap_mb * 2**20 * (1 + 1e-12)
    per_tensor = ExchangeSpec(calls="per_tensor", tensors=tensors).calls_of(
        values, total, bytes_per_value
    )
    assert per_tensor >= 1 and (values < total or per_tensor == tensors)
    assert ExchangeSpec().calls_of(values, total, bytes_per_value) == 1


@given(values=st.integers(1, 50_000), calls=st.integers(1, 64), members=st.integers(2, 8))
def test_call_pieces_cover_the_tensor_in_exactly_so_many_calls(values, calls, members):
    x = torch.arange(values, dtype=torch.float32)
    pieces = call_pieces(x, calls, members * 128)
    assert len(pieces) == calls
    assert torch.equal(torch.cat(pieces), x)


@pytest.mark.parametrize("bits", [32, 8])
def test_the_trainer_averages_in_calls_to_the_same_mean_and_bytes(bits):
    # 3 members, 10,000 values in 7 calls: aligned pieces of 1,152 (3 x 3 blocks of 128) pad only the last,
    # so the bytes are the single call's; blocks sit where they sat, so int8 too gives the same bits
    tensors = [
        torch.randn(10_000, generator=torch.Generator().manual_seed(rank)) for rank in range(3)
    ]

    def mean_in(calls, aggregation="mean"):
        members = ThreadHub(3).members()
        exchangers = [
            Exchanger(
                member,
                None,
                bits,
                Clock(),
                AggregationRule(aggregation=aggregation),
                calls=lambda values: calls,
            )
            for member in members
        ]
        return run_threads(3, lambda rank: exchangers[rank].exchange(tensors[rank]))

    for aggregation in ("mean", "median"):  # the median is taken value by value too
        one, seven = mean_in(1, aggregation), mean_in(7, aggregation)
        assert all(torch.equal(a.mean, b.mean) for a, b in zip(one, seven))
        assert [a.sent_bytes for a in one] == [b.sent_bytes for b in seven]


def test_the_trainer_counts_the_calls_the_simulator_prices():
    scenario = make_scenario(BASE + ['exchange.calls="buckets"', "exchange.bucket_cap_mb=1"])
    calls = exchange_calls(scenario, int(PARAMETERS))
    assert calls(int(PARAMETERS)) == math.ceil(S / 2**20) == 118
    assert calls(int(PARAMETERS) // 4) == math.ceil(S / 4 / 2**20)


def test_ddp_buckets_during_the_backward_pass_leave_the_last_one_exposed():
    # 123.2 MB of fp32 gradient in 25 MiB buckets: 4 full, the last 123.2e6 - 4 x 26,214,400 B = 14.9%.
    # The exchange is launched with 0.4 x 0.3 s of the step done (backward_overlap = 0.6) and takes
    # 5 x (12 + 0.2) ms + its bytes; the last bucket, ready only at the step's end, one call and its share.
    last = (S - 4 * 25 * 2**20) / S
    ddp = [
        'schedule.algorithm="ddp"',
        "schedule.outer_steps=20",
        'exchange.calls="buckets"',
        "exchange.bucket_cap_mb=25",
        "exchange.call_overhead_s=0.0002",
        "schedule.backward_overlap=0.6",
    ]
    # at 50 Gbit/s the step is compute-bound: every step waits for the last bucket alone, and the
    # collective (its comm row, its sync) lasts from the launch at 0.12 s to the last call's end,
    # 0.3 s + that call: the calls back to back from the launch would have ended sooner
    bytes_s = 2 * (M - 1) / M * S / (50e9 / 8)
    last_call_s = RING_LATENCY_S + 0.0002 + last * bytes_s
    for summary in both(ddp + ["island.0.bandwidth_gbps=50"]):
        assert 0.12 + 5 * (RING_LATENCY_S + 0.0002) + bytes_s < 0.3
        assert summary["mean_sync_s"] == pytest.approx(0.3 - 0.12 + last_call_s)
        assert summary["stall_s"] == pytest.approx(20 * last_call_s)
    # at 5 Gbit/s it is bound by the calls back to back from the launch
    bytes_s = 2 * (M - 1) / M * S / (5e9 / 8)
    for summary in both(ddp + ["island.0.bandwidth_gbps=5"]):
        assert summary["stall_s"] == pytest.approx(
            20 * (0.12 + 5 * (RING_LATENCY_S + 0.0002) + bytes_s - 0.3)
        )
    # without the overlap nothing is exposed beyond the calls themselves
    for summary in both(ddp[:-1] + ["island.0.bandwidth_gbps=50"]):
        assert summary["stall_s"] == pytest.approx(
            20 * (5 * (RING_LATENCY_S + 0.0002) + 2 * 3 / 4 * S / 6.25e9)
        )


@given(
    workers=st.integers(2, 6),
    mbit=st.floats(1, 10_000),
    latency_ms=st.floats(0, 100),
    tensors=st.integers(1, 500),
    overhead_s=st.floats(0, 0.05),
    set_up_s=st.floats(0, 2),
    efficiency=st.floats(0.05, 1),
)
def test_fixed_costs_add_exactly_and_efficiency_divides_the_bytes(
    workers, mbit, latency_ms, tensors, overhead_s, set_up_s, efficiency
):
    """Against the flat exchange at full rate: C calls of fixed cost c add C x (c + 2(M-1) hop latencies)
    less the one flat call's, the first call's set-up adds to the wall once, and e divides the bytes' time."""
    common = [
        f"island.0.replicas={workers}",
        f"island.0.bandwidth_gbps={mbit / 1000}",
        f"island.0.latency_ms={latency_ms}",
        "schedule.outer_steps=3",
    ]
    flat = simulate(make_scenario(common)).summary
    priced = simulate(
        make_scenario(
            common
            + [
                'exchange.calls="per_tensor"',
                f"exchange.tensors={tensors}",
                f"exchange.call_overhead_s={overhead_s}",
                f"exchange.first_call_s={set_up_s}",
                f"network.ring_efficiency={efficiency}",
            ]
        )
    ).summary
    hops_s = 2 * (workers - 1) * 2 * latency_ms / 1000
    bytes_s = flat["mean_sync_s"] - hops_s
    expected_sync_s = tensors * (hops_s + overhead_s) + bytes_s / efficiency
    assert priced["mean_sync_s"] == pytest.approx(
        expected_sync_s + set_up_s / 3, rel=1e-9, abs=1e-9
    )
    assert priced["wall_time_s"] - flat["wall_time_s"] == pytest.approx(
        3 * (expected_sync_s - flat["mean_sync_s"]) + set_up_s, rel=1e-9, abs=1e-6
    )
    assert priced["bytes_per_worker"] == flat["bytes_per_worker"]
