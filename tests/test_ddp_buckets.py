"""DDP's buckets during the backward pass, priced call by call (``schedules/buckets.py``,
``collectives.bucket_wait``): each call waits for its bucket from every member, so the collective (its
comm row, its sync) ends with the last call, and every member waits for it from its own compute's end.
Both players give the same numbers."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from islands.scenarios import from_dict
from islands.scenarios.model import ExchangeSpec
from islands.schedules.buckets import BucketLayout, assigned, filled, layout_of
from islands.simulator import simulate
from islands.simulator.network.collectives import upper_envelope
from islands.trainer.config import gpt_tensors

# 2.5 MiB of fp32 gradient (655,360 values) in 1 MiB buckets: 1 MiB, 1 MiB, 0.5 MiB. Two islands of one
# worker at 1 Gbit/s, no latency, 1 ms a call: a ring of M = 2 sends 2 (M - 1) / M x S = S per worker,
# so a call takes 1 ms + its bucket's bytes / 1.25e8 B/s: 9.389 ms, 9.389 ms, 5.194 ms.
HETEROGENEOUS = {
    "name": "b",
    "model": {"parameters": 655_360, "bytes_per_param": 4},
    "schedule": {"algorithm": "ddp", "outer_steps": 3, "bits": 32, "backward_overlap": 0.6},
    "exchange": {"calls": "buckets", "bucket_cap_mb": 1, "call_overhead_s": 0.001},
    "island": [
        {"name": "a", "step_time_s": 0.3, "bandwidth_gbps": 1, "latency_ms": 0},
        {"name": "b", "step_time_s": 0.5, "bandwidth_gbps": 1, "latency_ms": 0},
    ],
}
LAST_CALL_S = 0.001 + 2**19 / 1.25e8  # 0.5 MiB: 5.194304 ms


@pytest.mark.parametrize("player", [None, "events"])
def test_the_last_bucket_of_the_slowest_member_ends_every_members_exchange(player):
    # a reaches the launch at 0.4 x 0.3 = 0.12 s and ends its compute at 0.3 s; b at 0.2 s and 0.5 s.
    # The ring starts with b at 0.2 s; its buckets are ready at 0.2, 0.35 and 0.5 s (b's window, the
    # later at every bucket), the calls back to back from 0.2 s would end at 0.224 s: the last call
    # ends at 0.5 s + 5.194 ms. Both wait for it from their own compute's end; every step alike.
    result = simulate(from_dict(HETEROGENEOUS, "t.toml"), player=player)
    summary = result.summary
    end_s = 0.5 + LAST_CALL_S
    assert summary["mean_sync_s"] == pytest.approx(end_s - 0.2, rel=1e-12)
    assert summary["wall_time_s"] == pytest.approx(3 * end_s, rel=1e-12)
    a, b = summary["islands"]
    assert a["stall_s"] == pytest.approx(3 * (end_s - 0.3), rel=1e-12)
    assert b["stall_s"] == pytest.approx(3 * LAST_CALL_S, rel=1e-12)
    comms = result.trace[result.trace["kind"] == "comm"]
    assert np.allclose(comms["time_end_s"] - comms["time_start_s"], end_s - 0.2, rtol=1e-12)


def test_the_players_give_the_same_bits_for_buckets_of_unequal_members():
    scenario = from_dict(
        HETEROGENEOUS, "t.toml", ["island.0.jitter_cv=0.2", "island.1.jitter_cv=0.1"]
    )
    assert_players_give_the_same_summary(scenario)


def test_the_envelope_is_the_highest_line_everywhere():
    # lines x s + T: (0.25, 3), (0.5, 2), (0.75, 1.5), (1, 0.5). The first is highest up to s = 3,
    # where the third meets it (3.75) above the second (3.5); the third up to 4, then the fourth
    lines = [(0.25, 3.0), (0.5, 2.0), (0.75, 1.5), (1.0, 0.5)]
    wait = upper_envelope(lines)
    spans = np.linspace(0, 10, 101)
    expected = np.max([slope * spans + intercept for slope, intercept in lines], axis=0)
    for span, value in zip(spans, expected):
        assert wait.end_s(0.0, np.array([0.0]), np.array([span])) == pytest.approx(value)
    assert wait.slopes.tolist() == [0.25, 0.75, 1.0]
    assert wait.crossings.tolist() == pytest.approx([3.0, 4.0])


# --- the layout as PyTorch DDP builds it (schedules/buckets.py) -------------------------------------

# The worked example of docs/how-to/ddp-buckets.md: a 30.8M-parameter GPT in fp32 whose token embedding,
# registered first, holds 19.3M values, the rest ten tensors of 1.15M; 4 nodes 1 ms from the core
# (12 ms of hops a call), 0.3 s steps, backward_overlap 0.6 (the backward window 0.12-0.3 s).
GPT_TENSORS = [19_300_000] + [1_150_000] * 10


def gpt(gbps: float, exchange: dict | None, overlap: float = 0.6):
    document = {
        "name": "gpt",
        "model": {"parameters": 30_800_000, "bytes_per_param": 4},
        "schedule": {
            "algorithm": "ddp",
            "outer_steps": 10,
            "bits": 32,
            "backward_overlap": overlap,
        },
        "island": [
            {
                "name": "n",
                "replicas": 4,
                "step_time_s": 0.3,
                "bandwidth_gbps": gbps,
                "latency_ms": 1,
            }
        ],
    }
    if exchange is not None:
        document["exchange"] = exchange
    return from_dict(document, "gpt.toml")


def test_a_gpts_embedding_fills_the_last_bucket_alone_and_large():
    # In reverse: the 1.15M-value tensor closes the 1 MiB first bucket (262,144 fp32 values); six
    # more close a 25 MiB one (6.9M >= 6,553,600, five would not); the last three and the embedding
    # are what is left: 3.45M + 19.3M = 22.75M values, 73.9% of the gradient.
    scenario = gpt(5, {"calls": "buckets", "tensor_values": GPT_TENSORS})
    layout = layout_of(scenario.exchange, 30.8e6, 4)
    assert layout.sizes() == [1_150_000, 6_900_000, 22_750_000]
    assert layout.ready_fractions() == pytest.approx([0, 6.9 / 29.65, 1])


@pytest.mark.parametrize(
    "gbps, step_s",
    [
        # 5 Gbit/s, 625 MB/s: a call takes 12 ms + 1.5 x its bytes / 625 MB/s: 23.04 ms, 78.24 ms and
        # 230.4 ms. The second bucket is ready at 0.12 + 0.18 x 6.9 / 29.65 = 0.1619 s, its call ends
        # at 0.2401 s; the last waits for the end of the compute: 0.3 + 0.2304 = 0.5304 s a step
        (5, 0.5304),
        # 50 Mbit/s: 1.116 s, 6.636 s and 21.852 s; the ring is never idle: 0.12 + their sum
        (0.05, 0.12 + 1.116 + 6.636 + 21.852),
    ],
)
def test_the_worked_examples_steps_by_hand(gbps, step_s):
    summary = simulate(gpt(gbps, {"calls": "buckets", "tensor_values": GPT_TENSORS})).summary
    assert summary["wall_time_s"] == pytest.approx(10 * step_s, rel=1e-9)
    # the flat exchange after the step: 0.3 s + 12 ms + 1.5 x 123.2 MB at the rate
    flat = simulate(gpt(gbps, None, overlap=0)).summary
    assert flat["wall_time_s"] == pytest.approx(10 * (0.312 + 1.5 * 123.2e6 / (gbps * 1.25e8)))


TENSORS = st.lists(st.integers(1, 10**7), min_size=1, max_size=60)


@settings(max_examples=200, deadline=None)
@given(TENSORS, st.integers(1, 10**7), st.integers(1, 10**7))
def test_buckets_hold_whole_tensors_and_close_at_their_caps(tensors, first_cap, cap):
    layout = assigned(list(reversed(tensors)), first_cap, cap)
    sizes = layout.sizes()
    assert math.fsum(sizes) == sum(tensors)  # every value, once
    # no tensor split: every bucket boundary is a tensor boundary (the reversed list's sums)
    ends = set(np.cumsum(list(reversed(tensors))).tolist())
    assert set(np.cumsum(sizes).tolist()) <= ends
    # each bucket but the last reached its cap with its last tensor, not before
    walked = iter(reversed(tensors))
    for index, size in enumerate(sizes):
        limit = first_cap if index == 0 else cap
        held = []
        while sum(held) < size:
            held.append(next(walked))
        assert sum(held) == size
        if index < len(sizes) - 1:
            assert size >= limit and size - held[-1] < limit


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 1000), st.integers(1, 10), st.integers(1, 300))
def test_equal_tensors_without_a_first_bucket_cap_give_the_even_layout(size, per_bucket, tensors):
    # buckets of per_bucket tensors of one size, the first no smaller: full buckets and the rest,
    # ready at an even pace where the rest is a full bucket too
    cap = per_bucket * size
    layout = assigned([size] * tensors, cap, cap)
    assert layout.sizes() == filled(size * tensors, cap, cap).sizes()
    if tensors % per_bucket == 0:
        calls = layout.calls
        expected = [1.0] if calls == 1 else [k / (calls - 1) for k in range(calls)]
        assert layout.ready_fractions() == pytest.approx(expected)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 5), st.floats(1, 1e6)), min_size=1, max_size=8),
    st.floats(0, 0.1),
    st.floats(1e-9, 1e-3),
    st.floats(0, 10),
    st.floats(0, 10),
)
def test_the_last_call_ends_between_its_own_time_and_every_call_after_the_compute(
    runs, per_call_s, per_value_s, window_s, bytes_end_after_s
):
    layout = BucketLayout(tuple(runs))
    calls = layout.calls
    wait = upper_envelope(
        [
            (layout.ready_fraction(after, size), left * per_call_s + after * per_value_s)
            for size, after, left in layout.corners()
        ]
    )
    start_s, end_s = 1.0, 1.0 + window_s
    every_call_s = calls * per_call_s + layout.values * per_value_s
    bytes_end_s = start_s + min(bytes_end_after_s, every_call_s)  # at most every call back to back
    last_s = wait.end_s(bytes_end_s, np.array([start_s]), np.array([end_s]))
    last_call_s = per_call_s + layout.sizes()[-1] * per_value_s
    tolerance = 1e-9 * (1 + every_call_s + window_s)
    assert last_s - end_s >= last_call_s - tolerance  # the last bucket's call after the compute
    assert last_s - end_s <= every_call_s + tolerance  # no worse than every call after it
    # and the recursion call by call, e_k = max(r_k, e_(k-1)) + c_k, gives the same end
    e_s = start_s + (bytes_end_s - start_s - every_call_s)  # where the calls' own time starts
    after = layout.values
    for size in layout.sizes():
        ready_s = start_s + layout.ready_fraction(after, size) * window_s
        e_s = max(ready_s, e_s) + per_call_s + size * per_value_s
        after -= size
    assert last_s == pytest.approx(max(e_s, bytes_end_s), abs=tolerance)


@settings(max_examples=8, deadline=None)
@given(
    st.lists(st.integers(1, 200_000), min_size=1, max_size=12),
    st.floats(0.01, 2.0),
    st.sampled_from([0.3, 2000.0]),
    st.floats(0.0, 0.3),
)
def test_the_players_agree_on_drawn_layouts(tensors, cap_mb, gbps, jitter_cv):
    document = {
        "name": "d",
        "model": {"parameters": sum(tensors), "bytes_per_param": 4},
        "schedule": {"algorithm": "ddp", "outer_steps": 4, "bits": 32, "backward_overlap": 0.5},
        "exchange": {"calls": "buckets", "bucket_cap_mb": cap_mb, "tensor_values": tensors},
        "island": [
            {"name": "a", "replicas": 2, "step_time_s": 0.01, "bandwidth_gbps": gbps},
            {"name": "b", "step_time_s": 0.02, "bandwidth_gbps": gbps, "jitter_cv": jitter_cv},
        ],
    }
    scenario = from_dict(document, "d.toml")
    assert_players_give_the_same_summary(scenario)


def test_the_trainers_gpt_has_the_tensors_the_check_counts():
    from islands.trainer.core.model import GPT, GPTConfig

    for n_layer in (1, 2, 5):
        model = GPT(GPTConfig(n_layer=n_layer))
        assert len(list(model.parameters())) == gpt_tensors(n_layer)


def test_a_fragment_takes_its_share_of_every_tensor():
    exchange = ExchangeSpec(calls="buckets", bucket_cap_mb=1, tensor_values=(600_000.0, 400_000.0))
    # half the model: tensors of 300,000 and 200,000 fp32 values; 200,000 < 262,144 stays open
    assert layout_of(exchange, 500_000, 4).sizes() == [500_000]
    assert layout_of(exchange, 1_000_000, 4).sizes() == [400_000, 600_000]


@pytest.mark.parametrize("gbps, step_s", [(5, 0.5118), (0.05, 29.760)])
def test_the_worked_examples_buckets_cut_anywhere(gbps, step_s):
    # no tensor_values: 1 MiB, four of 25 MiB, and the 17,293,824 B left, each ready as the values
    # after the first are produced; the calls wait for their buckets one by one (e_k by hand)
    sizes_b = [2**20] + [25 * 2**20] * 4 + [123.2e6 - 2**20 - 100 * 2**20]
    rest_b, done_b, end_s = 123.2e6 - 2**20, 0.0, 0.12
    for index, size_b in enumerate(sizes_b):
        done_b += size_b if index else 0.0
        ready_s = 0.12 + 0.18 * done_b / rest_b
        end_s = max(ready_s, end_s) + 0.012 + 1.5 * size_b / (gbps * 1.25e8)
    assert end_s == pytest.approx(step_s, abs=1e-4)  # the table's figure, to its digits
    summary = simulate(gpt(gbps, {"calls": "buckets"})).summary
    assert summary["wall_time_s"] == pytest.approx(10 * end_s, rel=1e-9)


ANY_ITEM = st.one_of(
    st.integers(-(10**400), 10**400),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=5),
    st.booleans(),
    st.none(),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=1),
)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(ANY_ITEM, st.lists(ANY_ITEM, max_size=6), st.lists(st.floats(0, 2e14), max_size=6)),
    st.sampled_from(["buckets", "per_tensor", "flat"]),
)
def test_a_bad_tensor_list_is_one_line_naming_the_key(values, calls):
    from islands.scenarios import ScenarioError

    document = {
        "name": "b",
        "model": {"parameters": 1e6, "bytes_per_param": 4},
        "schedule": {"algorithm": "ddp", "outer_steps": 2},
        "exchange": {"calls": calls, "tensor_values": values},
        "island": [{"name": "a", "replicas": 2, "step_time_s": 0.1, "bandwidth_gbps": 1}],
    }
    try:
        scenario = from_dict(document, "b.toml")
    except ScenarioError as error:
        line = str(error)
        assert line.startswith("b.toml: exchange.") and "\n" not in line and len(line) < 400
        return
    # read: a list of numbers in range adding up to the model, under calls that take it
    listed = scenario.exchange.tensor_values
    assert calls != "flat" and listed is not None and len(listed) >= 1
    assert abs(math.fsum(listed) - 1e6) <= 1e4 and all(1 <= value <= 1e14 for value in listed)


def assert_players_give_the_same_summary(scenario) -> None:
    """The lockstep player's summary is the event model's, bit for bit, but for the player's name."""
    lockstep, events = simulate(scenario), simulate(scenario, player="events")
    assert lockstep.summary["player"] == "lockstep"
    drop = ("events", "player")
    assert {k: v for k, v in lockstep.summary.items() if k not in drop} == {
        k: v for k, v in events.summary.items() if k not in drop
    }
