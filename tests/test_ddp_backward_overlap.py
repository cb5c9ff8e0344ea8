"""DDP's buckets all-reduced during the backward pass, as the trainer runs them (issue 44): each call
held until the paced backward pass would have produced its bucket, or, unpaced, until the real one
has (its tensors' post-accumulate-grad hooks), the same mean and bytes as the flat exchange, the
last bucket's wait exposed; and a run with the overlap training exactly the weights of one without.
Members run as threads of one process."""

import pytest
import torch
from helpers.inprocess import TINY, finish_all, in_threads, trainers_for

from islands.errors import UserError
from islands.scenarios import from_dict
from islands.schedules.buckets import BucketLayout
from islands.trainer.core.inprocess import run_threads, thread_groups
from islands.trainer.core.produced import BackwardCalls, ProducedGradients, measured_buckets
from islands.trainer.core.tracing import Clock
from islands.trainer.exchange.comm import ThreadHub
from islands.trainer.exchange.robust import NOT_FINITE
from islands.trainer.exchange.sync import (
    Backward,
    BucketCall,
    CallLayout,
    Exchanger,
    call_layouts,
    call_pieces,
    exchange_calls,
    piece_edges,
)
from islands.trainer.kinds import make_run_plan

MEMBERS = 3
VALUES = 10_000  # in 4 calls: aligned pieces of 2,560 values, only the last padded (as one call)


class FakeClock(Clock):
    """A member's own trace clock that only its sleeps and its calls move."""

    def __init__(self):
        super().__init__()
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def sleep_until(self, at_s: float) -> None:
        self.t = max(self.t, at_s)


class TimedCalls:
    """A member's cross group whose every collective call (one all-to-all each) takes ``call_s`` on its
    fake clock, and which records when each started."""

    def __init__(self, group, clock: FakeClock, call_s: float):
        self.group, self.clock, self.call_s = group, clock, call_s
        self.starts: list[float] = []
        self.values: list[int] = []  # each call's values on the wire (padded)

    def __getattr__(self, name):
        return getattr(self.group, name)

    def all_to_all(self, tensors):
        self.starts.append(self.clock.t)
        self.values.append(sum(tensor.numel() for tensor in tensors))
        self.clock.t += self.call_s
        return self.group.all_to_all(tensors)


def tensors():
    return [
        torch.randn(VALUES, generator=torch.Generator().manual_seed(rank))
        for rank in range(MEMBERS)
    ]


EQUAL_BUCKETS = CallLayout((2_500.0,) * 4, (0.0, 1 / 3, 2 / 3, 1.0), reverse=True)


def members(calls, call_s, layout=None):
    """Every member's fake clock, timed cross group and exchanger of ``calls`` calls of ``call_s``."""
    clocks = [FakeClock() for _ in range(MEMBERS)]
    groups = [
        TimedCalls(member, clocks[rank], call_s)
        for rank, member in enumerate(ThreadHub(MEMBERS).members())
    ]
    exchangers = [
        Exchanger(
            group,
            None,
            32,
            clock,
            calls=lambda values: calls,
            **({"layouts": lambda values: layout} if layout else {}),
        )
        for group, clock in zip(groups, clocks)
    ]
    return clocks, groups, exchangers


def exchanged(calls, call_s, backward=None, layout=None, data=None):
    """Every member's exchange of its tensor in ``calls`` calls of ``call_s`` each, and its group."""
    _, groups, exchangers = members(calls, call_s, layout)
    data = data or tensors()
    results = run_threads(
        MEMBERS, lambda rank: exchangers[rank].exchange(data[rank], backward=backward)
    )
    return results, groups


def test_buckets_are_ready_as_the_backward_pass_produces_their_values():
    # equal buckets: at an even pace from the launch (the first) to the end of the compute (the last)
    equal = BucketLayout(((4, 100.0),)).ready_fractions()
    assert equal == pytest.approx([0, 1 / 3, 2 / 3, 1])
    assert Backward(0.1, 0.2).release_s(equal) == pytest.approx(
        [0.1, 0.1 + 0.1 / 3, 0.1 + 0.2 / 3, 0.2]
    )
    # buckets of 10, 30, 30 and 20 values: after the first, 80 values to produce; the second is ready
    # once 30 of them are, the third at 60
    unequal = BucketLayout(((1, 10.0), (2, 30.0), (1, 20.0))).ready_fractions()
    assert unequal == pytest.approx([0, 30 / 80, 60 / 80, 1])
    assert BucketLayout(((1, 50.0),)).ready_fractions() == [1.0]  # one bucket: at the end


@pytest.mark.parametrize(
    "call_s, starts, exposed_s",
    [
        # C = 4, f = 0.5 of a 0.2 s step: buckets ready at 0.1, 0.133, 0.167, 0.2. Calls of 10 ms each
        # start when ready; the last ends 0.21: exposed max(0.1 + 4 x 0.01, 0.2 + 0.01) - 0.2 = 0.01.
        (0.01, [0.1, 0.1 + 0.1 / 3, 0.1 + 0.2 / 3, 0.2], 0.01),
        # Calls of 50 ms each: back to back from the first, 0.1, 0.15, 0.2, 0.25; the last ends 0.3:
        # exposed max(0.1 + 4 x 0.05, 0.2 + 0.05) - 0.2 = 0.1.
        (0.05, [0.1, 0.15, 0.2, 0.25], 0.1),
    ],
)
def test_each_call_waits_for_its_bucket_and_the_last_is_exposed(call_s, starts, exposed_s):
    backward = Backward(0.2 - 0.5 * 0.2, 0.2)
    results, groups = exchanged(4, call_s, backward, EQUAL_BUCKETS)
    for result, group in zip(results, groups):
        assert group.starts == pytest.approx(starts)
        assert result.started_s == pytest.approx(0.1)
        assert result.done_s - backward.end_s == pytest.approx(exposed_s)


def test_calls_of_another_exchange_go_back_to_back_from_the_launch():
    # not buckets: launched whole at 0.1, where the simulator launches it; 4 calls of 10 ms end at 0.14
    results, groups = exchanged(4, 0.01, Backward(0.1, 0.2))
    for result, group in zip(results, groups):
        assert group.starts == pytest.approx([0.1, 0.11, 0.12, 0.13])
        assert result.done_s == pytest.approx(0.14)


@pytest.mark.parametrize("layout", [None, EQUAL_BUCKETS])
def test_the_overlapped_buckets_average_to_the_flat_exchanges_mean_and_bytes_bit_for_bit(layout):
    flat, _ = exchanged(1, 0.0)
    overlapped, _ = exchanged(4, 0.01, Backward(0.1, 0.2), layout)
    for one, four in zip(flat, overlapped):
        assert torch.equal(one.mean, four.mean)
        assert one.sent_bytes == four.sent_bytes


def test_buckets_are_cut_at_their_tensors_and_all_reduced_from_the_last_layers():
    # 10,000 values in buckets of 1,000, 4,000, 5,000 (call order: the last layers first), so in the
    # flat tensor's order 5,000 | 4,000 | 1,000; 3 members' aligned unit is 3 x 128 = 384 values:
    # the boundaries at 5,000 and 9,000 round to 13 x 384 = 4,992 and 23 x 384 = 8,832
    layout = CallLayout((5_000.0, 4_000.0, 1_000.0), (0.0, 0.5, 1.0), reverse=True)
    pieces = call_pieces(torch.zeros(VALUES), 3, MEMBERS * 128, layout.sizes)
    assert [piece.numel() for piece in pieces] == [4_992, 3_840, 1_168]
    results, groups = exchanged(3, 0.01, Backward(0.1, 0.2), layout)
    for group in groups:
        # the flat tensor's end goes first, at the launch, then its middle half-way through the
        # backward window, then its start at the end; only the first call pads (1,168 to 1,536)
        assert group.starts == pytest.approx([0.1, 0.15, 0.2])
        assert group.values == [1_536 * 4, 3_840 * 4, 4_992 * 4]  # fp32 bytes
    flat, _ = exchanged(1, 0.0)
    assert all(torch.equal(a.mean, b.mean) for a, b in zip(flat, results))


def test_the_trainer_takes_the_layout_the_simulator_prices():
    # 1,000,000 fp32 values in 1 MiB buckets, tensors of 600,000 (registered first), 300,000 and
    # 100,000: taken in reverse, 100,000 + 300,000 = 400,000 >= 262,144 closes the first bucket, the
    # embedding-like 600,000 is the last, alone
    scenario = from_dict(
        {
            "name": "b",
            "model": {"parameters": 1e6, "bytes_per_param": 4},
            "schedule": {"algorithm": "ddp", "outer_steps": 2},
            "exchange": {
                "calls": "buckets",
                "bucket_cap_mb": 1,
                "tensor_values": [600_000, 300_000, 100_000],
            },
            "island": [{"name": "a", "replicas": 2, "step_time_s": 0.1, "bandwidth_gbps": 1}],
        }
    )
    assert exchange_calls(scenario, 1_000_000)(1_000_000) == 2
    layout = call_layouts(scenario, 1_000_000)(1_000_000)
    assert layout == CallLayout((600_000.0, 400_000.0), (0.0, 1.0), reverse=True)
    pieces = call_pieces(torch.zeros(1_000_000), 2, 2 * 128, layout.sizes)
    assert [piece.numel() for piece in pieces] == [600_064, 399_936]  # 600,000 rounded to 256s


PER_TENSOR = {"calls": "per_tensor", "tensors": 4}
TINY_VALUES = [4096, 256] + [16, 16, 768, 48, 256, 16, 16, 16, 1024, 64, 1024, 16] * 2 + [16, 16]
TINY_TENSORS = [values * 1e5 / 10_944 for values in TINY_VALUES]


def ddp_plan(overlap, pace_s=0.03, exchange=PER_TENSOR, ranks=1, **schedule):
    document = {
        "name": "tiny",
        "model": {"parameters": 1e5},
        "schedule": {
            "algorithm": "ddp",
            "outer_steps": 4,
            "inner_steps": 4,
            "bits": 32,
            "backward_overlap": overlap,
            **schedule,
        },
        "exchange": exchange,
        "island": [{"name": "a", "replicas": 2, "step_time_s": 0.01, "bandwidth_gbps": 1.0}],
        "trainer": {**TINY, "pace_step_time_s": pace_s, "ranks_per_island": ranks},
    }
    return make_run_plan(from_dict(document, "t.toml"))


def same_weights_with_and_without_overlap(exchange, ranks, pace_s):
    """Runs of the tiny plan without and with ``backward_overlap`` 0.5, by overlap, after checking
    that every trainer of both ends with the same weights, bit for bit."""
    runs = {}
    for overlap in (0.0, 0.5):
        trainers = trainers_for(ddp_plan(overlap, pace_s=pace_s, exchange=exchange, ranks=ranks))
        in_threads(trainers, lambda t: t.run())
        finish_all(trainers)
        runs[overlap] = trainers
    for plain, overlapped in zip(runs[0.0], runs[0.5]):
        for a, b in zip(plain.params, overlapped.params):
            assert torch.equal(a, b)
    return runs


@pytest.mark.parametrize(
    "exchange, ranks",
    # 10 KiB buckets of the scenario's 2-byte values: 5,243 each, 3 calls for the tiny GPT's 10,944
    # values; an island's two ranks each make them on its half
    [
        (PER_TENSOR, 1),
        ({"calls": "buckets", "bucket_cap_mb": 0.01}, 2),
        # the tiny GPT's own 28 tensors (10,944 values, scaled to the scenario's 1e5): 50 KiB buckets
        ({"calls": "buckets", "bucket_cap_mb": 0.05, "tensor_values": TINY_TENSORS}, 2),
    ],
)
def test_a_run_overlapped_trains_the_same_weights_and_stalls_only_after_its_compute(
    exchange, ranks
):
    # steps paced to 0.3 s: a backward window of 150 ms, far wider than a thread's turn on two
    # loaded cores (a 15 ms window let a comm start after its compute ended in a CI run, and a 50 ms
    # one did once in four runs beside two CPU hogs)
    runs = same_weights_with_and_without_overlap(exchange, ranks, pace_s=0.3)
    rows = runs[0.5][0].recorder.rows
    computes = [row for row in rows if row[4] == "compute"]
    comms = [row for row in rows if row[4] == "comm"]
    assert len(comms) == 4
    for comm in comms:
        # the exchange starts inside the compute of its step (its backward pass), ends after it
        step = next(row for row in computes if row[0] < comm[0] < row[1])
        stalls = [row for row in rows if row[4] == "stall" and row[7] == comm[7]]
        assert all(row[0] >= step[1] for row in stalls)


@pytest.mark.parametrize(
    "schedule, pace_s, words",
    [
        ({"algorithm": "diloco"}, 0.03, "sends a pseudo-gradient"),
        ({"algorithm": "diloco"}, 0.0, "sends a pseudo-gradient"),
    ],
)
def test_an_overlap_the_trainer_does_not_run_is_refused_in_one_line(schedule, pace_s, words):
    with pytest.raises(UserError) as refused:
        ddp_plan(0.5, pace_s, **schedule)
    message = str(refused.value)
    assert message.startswith("t.toml: schedule.backward_overlap:") and "got 0.5" in message
    assert words in message and "\n" not in message


# ---------------------------------------------------------------- unpaced: as the real pass produces


class Produced:
    """A gradient whose buckets are ready 50 ms apart on a member's fake clock: the n-th wait moves
    the clock to n x 50 ms (if it is behind) and returns that; it notes the spans waited for."""

    def __init__(self, flat, clock, apart_s=0.05):
        self.flat, self.clock, self.apart_s = flat.clone(), clock, apart_s
        self.spans = []

    def wait(self, spans):
        self.spans.append(list(spans))
        ready_s = self.apart_s * len(self.spans)
        self.clock.sleep_until(ready_s)
        return ready_s


def unchanged(piece):
    return piece


def exchanged_while_produced(calls, call_s, layout=None, data=None, prepares=None):
    """Every member's exchange of its tensor as a backward pass produces it (``Produced``)."""
    clocks, groups, exchangers = members(calls, call_s, layout)
    data = data or tensors()
    produced = [Produced(data[rank], clocks[rank]) for rank in range(MEMBERS)]
    prepares = prepares or [unchanged] * MEMBERS
    results = run_threads(
        MEMBERS,
        lambda rank: exchangers[rank].exchange_produced(produced[rank], prepares[rank]),
    )
    return results, groups, produced


@pytest.mark.parametrize(
    "call_s, starts",
    [
        # buckets ready at 50, 100, 150, 200 ms; calls of 10 ms start as each is ready
        (0.01, [0.05, 0.1, 0.15, 0.2]),
        # calls of 80 ms go back to back from the first: 50, 130, 210, 290 ms
        (0.08, [0.05, 0.13, 0.21, 0.29]),
    ],
)
@pytest.mark.parametrize("layout", [None, EQUAL_BUCKETS])
def test_calls_made_as_the_real_backward_pass_produces_their_buckets_average_bit_for_bit(
    call_s, starts, layout
):
    flat, _ = exchanged(1, 0.0)
    results, groups, produced = exchanged_while_produced(4, call_s, layout)
    # 10,000 values, 3 members' aligned unit 3 x 128 = 384: equal pieces of 7 x 384 = 2,688 (the
    # last 1,936); the buckets of 2,500 end at 2,500, 5,000, 7,500, rounded to 384s: 2,688 (6.51
    # units), 4,992 (13.02), 7,680 (19.53)
    edges = [0, 2_688, 5_376, 8_064, 10_000] if layout is None else [0, 2_688, 4_992, 7_680, 10_000]
    order = [3, 2, 1, 0] if layout else [0, 1, 2, 3]
    for one, result, group, gradient in zip(flat, results, groups, produced):
        assert torch.equal(one.mean, result.mean)
        assert one.sent_bytes == result.sent_bytes
        assert gradient.spans == [[(edges[k], edges[k + 1])] for k in order]
        assert [call.bucket for call in result.calls] == order
        assert [call.ready_s for call in result.calls] == pytest.approx([0.05, 0.1, 0.15, 0.2])
        assert [call.started_s for call in result.calls] == pytest.approx(starts)
        assert group.starts == pytest.approx(starts)  # the screen after them is an all-gather
        assert (result.started_s, result.done_s) == pytest.approx((starts[0], starts[-1] + call_s))


def test_an_islands_ranks_average_each_bucket_among_themselves_first_bit_for_bit():
    # 2 islands of 2 ranks: each rank's own gradient; the flat path averages it inside the island
    # first (the training thread's intra_grad), then each rank exchanges its half
    data = [torch.randn(VALUES, generator=torch.Generator().manual_seed(rank)) for rank in range(4)]

    def exchanger(group, clock):
        return Exchanger(
            group.cross,
            group.intra_sync,
            32,
            clock,
            calls=lambda v: 4,
            layouts=lambda v: EQUAL_BUCKETS,
        )

    flat_groups, produced_groups = thread_groups(2, 2), thread_groups(2, 2)

    def flat(rank):
        island_sum = data[rank].clone()
        flat_groups[rank].intra_grad.all_reduce_sum_(island_sum)
        return exchanger(flat_groups[rank], Clock()).exchange(island_sum / 2)

    def produced(rank):
        clock = FakeClock()
        gradient = Produced(data[rank], clock)
        result = exchanger(produced_groups[rank], clock).exchange_produced(gradient, unchanged)
        return result, gradient

    for one, (other, gradient) in zip(run_threads(4, flat), run_threads(4, produced)):
        assert torch.equal(one.mean, other.mean)
        assert one.sent_bytes == other.sent_bytes
        # halves of 5,000 values, pieces ending at 1,280, 2,560 (aligned to 2 x 128) and 3,840: the
        # first call is the last piece of both halves
        assert gradient.spans[0] == [(3_840, 5_000), (8_840, 10_000)]


def test_a_member_screened_out_after_the_calls_gets_the_flat_exchanges_mean_and_wastes_the_calls():
    data = tensors()
    nan = [unchanged, lambda piece: torch.full_like(piece, float("nan")), unchanged]
    results, _, _ = exchanged_while_produced(4, 0.01, EQUAL_BUCKETS, data, nan)
    poisoned_data = [data[0], torch.full_like(data[1], float("nan")), data[2]]
    flat, _ = exchanged(1, 0.0, data=poisoned_data)
    everyone, _ = exchanged(1, 0.0)
    for one, result, whole in zip(flat, results, everyone):
        assert torch.equal(one.mean, result.mean) and torch.isfinite(result.mean).all()
        assert result.verdict.reasons == {1: NOT_FINITE}
        assert result.sent_bytes == one.sent_bytes
        (given_up,) = result.abandoned
        assert given_up.sent_bytes == whole.sent_bytes  # the 4 calls made, then given up
        assert given_up.started_s == pytest.approx(0.05)


def test_produced_gradients_wait_for_every_tensor_of_a_span():
    a, b, c = (torch.nn.Parameter(torch.ones(n)) for n in (3, 4, 5))  # at 0, 3 and 7 of 12
    clock = FakeClock()
    produced = ProducedGradients([a, b, c], clock)
    assert produced.tensors_in([(2, 4)]) == [0, 1]
    assert produced.tensors_in([(0, 1), (8, 9)]) == [0, 2]
    assert produced.tensors_in([(12, 16)]) == []  # padding alone
    produced.arm()
    clock.t = 1.0
    (a * 2).sum().backward(retain_graph=False)
    clock.t = 2.0
    (3 * b).sum().backward()
    assert produced.wait([(0, 3)]) == 1.0
    assert produced.wait([(2, 4)]) == 2.0  # the later of a's and b's
    assert produced.flat[:7].tolist() == [2.0] * 3 + [3.0] * 4
    with pytest.raises(AssertionError, match=r"parameters \[2\] got no gradient"):
        produced.finished()
    with pytest.raises(RuntimeError, match="without a gradient"):
        produced.wait([(6, 8)])  # c never got one: the exchange fails instead of waiting forever
    (5 * c).sum().backward()  # disarmed: the hooks copy nothing
    assert produced.flat[7:].tolist() != [5.0] * 5


@pytest.mark.parametrize(
    "exchange, ranks, calls",
    [
        (PER_TENSOR, 1, 4),
        # 1e5 scenario values in 10 KiB buckets of 2-byte values, 5,242.88 each: 19.07, so 20
        ({"calls": "buckets", "bucket_cap_mb": 0.01}, 2, 20),
        # 50 KiB buckets (26,214 values) of the tiny GPT's tensors scaled to 1e5 (x 9.14): a block
        # is 25,000, so each bucket closes inside the block before it, the last holds the embeddings
        ({"calls": "buckets", "bucket_cap_mb": 0.05, "tensor_values": TINY_TENSORS}, 2, 3),
    ],
)
def test_an_unpaced_run_overlapped_trains_the_same_weights_with_each_call_after_its_bucket(
    exchange, ranks, calls
):
    runs = same_weights_with_and_without_overlap(exchange, ranks, pace_s=0.0)
    for trainer in runs[0.5]:
        assert not runs[0.0][0].backward_calls
        assert len(trainer.backward_calls) == trainer.plan.total_steps
        rows = trainer.recorder.rows
        for record in trainer.backward_calls:
            made = record.calls
            expected = list(range(calls))  # buckets from the flat tensor's end, its last layers
            assert [call.bucket for call in made] == (
                expected[::-1] if "bucket_cap_mb" in exchange else expected
            )
            for call, after in zip(made, made[1:]):
                assert after.started_s >= call.started_s  # in order, never overtaking
            for call in made:
                # not before its bucket's last gradient; every gradient during the backward pass
                assert record.start_s <= call.ready_s <= record.end_s
                assert call.started_s >= call.ready_s
            comm = next(row for row in rows if row[4] == "comm" and row[0] == made[0].started_s)
            assert comm[1] >= made[-1].started_s
            # the step's compute closes with its backward pass; its stall only after that
            compute = max(
                (row for row in rows if row[4] == "compute" and row[1] <= record.end_s),
                key=lambda row: row[1],
            )
            assert compute[1] >= record.start_s
            stalls = [row for row in rows if row[4] == "stall" and row[7] == comm[7]]
            assert all(row[0] >= compute[1] for row in stalls)
        fractions = trainer.run_info()["backward_buckets"]["ready_fractions"]
        assert fractions == [] or (
            len(fractions) == calls and fractions[0] == 0 == fractions[-1] - 1
        )
        # the last step: each call's ready second is its bucket's last hook, over every share
        produced, last = trainer.produced, trainer.backward_calls[-1]
        values = produced.offsets[-1]
        length = -(-values // ranks)
        layout = trainer.exchanger.layouts(values)
        edges = piece_edges(length, len(last.calls), 2 * 128, layout.sizes)
        for call in last.calls:
            spans = [
                (part * length + edges[call.bucket], part * length + edges[call.bucket + 1])
                for part in range(ranks)
            ]
            assert call.ready_s == max(produced.ready_s[i] for i in produced.tensors_in(spans))


def test_the_measured_ready_fractions_average_each_calls_place_in_its_window():
    steps = [
        # ready at 1.0, 1.5, 3.0 of a window of 2 s: 0, 0.25, 1; two calls start before the end, 2.5
        BackwardCalls(
            1, 0.0, 2.5, (BucketCall(2, 1.0, 1.0), BucketCall(1, 1.5, 2.0), BucketCall(0, 3.0, 3.0))
        ),
        # every bucket at once: no window, left out of the fractions; no call before the end, 1.0
        BackwardCalls(
            2, 0.0, 1.0, (BucketCall(2, 2.0, 2.0), BucketCall(1, 2.0, 2.1), BucketCall(0, 2.0, 2.2))
        ),
        # 0, 0.75, 1; one call before the end, 0.5
        BackwardCalls(
            3,
            0.0,
            0.5,
            (BucketCall(2, 0.0, 0.0), BucketCall(1, 0.75, 0.75), BucketCall(0, 1.0, 1.0)),
        ),
    ]
    measured = measured_buckets(steps)
    assert measured["ready_fractions"] == pytest.approx([0.0, 0.5, 1.0])
    assert measured["started_in_backward"] == pytest.approx(3 / 9)
    assert measured["first_ready_to_end_s"] == pytest.approx((1.5 - 1.0 + 0.5) / 3)
