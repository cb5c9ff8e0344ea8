"""Averaging across islands on a background thread, so training continues while bytes move.

An island with R ranks splits each tensor into R shares; local rank l averages share l with the
rank l of every other island (the ``cross`` group, quantised, see ``quantize.average``) and the
island's ranks then all-gather their averaged shares over the fast intra-island group. Inside an
island the ranks hold identical replicas, so no intra-island reduction is needed first.

Every exchange first meets the other islands by all-gathering two numbers about each island's tensor
(finite? norm?, ``robust.screen``): the time spent there is the wait for the slowest island (``idle``
in the trace); the clock reading after it is when the collective really started (the ``comm`` row's
start). Excluded islands send zeros and the mean is rescaled to the accepted ones; with a robust
aggregation the deltas are all-gathered whole instead (``robust.robust_average``), and with top-k
compression (``schedule.compression``) their top-k payloads are gathered (``gathering.Gathering``:
around the ring, straight from the round's chosen peers, or through an object store; a payload that
cannot be merged is refused, with its reason in the verdict).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from itertools import zip_longest
from typing import NamedTuple, Protocol

import torch

from islands.scenarios import Scenario
from islands.schedules import ALL_GATHER, collective_of
from islands.schedules.buckets import layout_of
from islands.schedules.compression import TopK

from ..core.memory import fresh_pages_of
from ..core.tracing import Clock
from .comm import Echo
from .gathering import AROUND_THE_RING, Gathering
from .group import Group
from .quantize import average, padded_length
from .robust import AggregationRule, Verdict, contribution_stats, robust_average, screen
from .sparse import Entry, TopKCodec, announce

WARM_UP_ROUNDS = 5
STEADY_FRESH_PAGES = 64  # 256 KiB: a round that grew the heap by less reuses its buffers


@dataclass(frozen=True)
class Backward:
    """A backward pass that releases a gradient's buckets while it runs (DDP, ``schedule.backward_overlap``
    = f): from ``start_s``, when its first bucket is ready, to ``end_s``, its last (trace seconds),
    each bucket in between as the simulator prices it (``schedules.buckets``: a ready fraction of the
    window, ``collectives.bucket_wait``): the collective launched where ``backward_overlap`` says, the
    last bucket at the end of the step's compute."""

    start_s: float
    end_s: float

    def release_s(self, fractions: Sequence[float]) -> list[float]:
        """When each bucket is ready: r_k = start + x_k (end - start), x_k its ready fraction."""
        return [self.start_s + x * (self.end_s - self.start_s) for x in fractions]


@dataclass(frozen=True)
class CallLayout:
    """How an exchange is cut into its calls, as the simulator prices them: ``sizes``, each call's
    values in the flat tensor's order (None: equal pieces); under buckets ``ready`` holds each call's
    ready fraction (``Backward.release_s``) in call order, and the calls go from the flat tensor's
    end, its last layers (``reverse``), as the backward pass fills PyTorch DDP's buckets."""

    sizes: tuple[float, ...] | None = None
    ready: tuple[float, ...] = ()
    reverse: bool = False

    def order(self, pieces: int) -> range:
        """The pieces' indices in call order: from the last under ``reverse``."""
        return range(pieces - 1, -1, -1) if self.reverse else range(pieces)


EQUAL_PIECES = CallLayout()


class Producing(Protocol):
    """A gradient the real backward pass is still producing (``core.produced.ProducedGradients``):
    ``flat`` holds its values in the flat order, each tensor's once its gradient exists."""

    flat: torch.Tensor

    def wait(self, spans: Sequence[tuple[int, int]]) -> float:
        """Block until every value in ``spans`` (flat offsets, end excluded) exists; the trace second
        the last of their tensors got its gradient."""
        ...


class BucketCall(NamedTuple):
    """One call of an exchange made during the real backward pass: its piece (``bucket``, in the
    flat order), when its last gradient existed and when the call started (trace seconds)."""

    bucket: int
    ready_s: float
    started_s: float


class Attempt(NamedTuple):
    """An attempt at an exchange that was abandoned (an elastic run's member died in it: the survivors
    re-form and redo it, ``elastic/membership.py``): from its start to when it was given up, with the
    bytes this member had sent in it (``comm.StoreGroup.sent_bytes``)."""

    started_s: float
    ended_s: float
    sent_bytes: int


@dataclass(frozen=True)
class Exchange:
    """An exchange's result (the mean; Decoupled DiLoCo: the global fragment) and its times: the
    transfer from ``started_s`` to ``done_s``, of which ``queued`` (when set) is the part it sat at
    Decoupled DiLoCo's syncer waiting for other learners' reports; before it, the attempts given up
    (``abandoned``, their bytes wasted). ``sent``: under top-k compression, what this member's
    payload decodes to where it was merged (zeros where not), which error feedback takes out of its
    buffer. ``calls``: made during the real backward pass, each call's times, in call order."""

    mean: torch.Tensor
    started_s: float
    done_s: float
    sent_bytes: int
    verdict: Verdict
    queued: tuple[float, float] | None = None
    abandoned: tuple[Attempt, ...] = ()
    sent: torch.Tensor | None = None
    calls: tuple[BucketCall, ...] = ()


def share(x: torch.Tensor, index: int, parts: int) -> torch.Tensor:
    """Share ``index`` of ``parts`` equal shares of ``x`` (zero-padded at the end)."""
    length = math.ceil(x.numel() / parts)
    return padded_slice(x, index * length, (index + 1) * length)


def padded_slice(x: torch.Tensor, start: int, end: int) -> torch.Tensor:
    """``x[start:end]``, zero-padded to ``end - start`` values where ``x`` ends before ``end``."""
    piece = x[min(start, x.numel()) : end]
    if piece.numel() == end - start:
        return piece
    padded = torch.zeros(end - start, dtype=x.dtype, device=x.device)
    padded[: piece.numel()] = piece
    return padded


def exchange_calls(scenario: Scenario, total_values: int) -> Callable[[int], int]:
    """The collective calls of an exchange of so many values of a model of ``total_values``, as the
    simulator counts them (``ExchangeSpec.calls_of``, of the exchange's share of ``model.parameters``,
    as ``call_layouts`` lays them out)."""
    exchange, model = scenario.exchange, scenario.model
    scale = model.parameters / total_values
    return lambda values: exchange.calls_of(values * scale, model.parameters, model.bytes_per_param)


def call_layouts(scenario: Scenario, total_values: int) -> Callable[[int], CallLayout]:
    """How the calls of an exchange of so many values of a model of ``total_values`` cut it, as the
    simulator lays them out: the buckets of ``schedules.buckets.layout_of`` (of the exchange's share
    of ``model.parameters``, so both executors take the same layout); one call per tensor of
    ``exchange.tensor_values`` for the whole model; else equal pieces."""
    exchange, model = scenario.exchange, scenario.model

    def layout(values: int) -> CallLayout:
        if exchange.calls == "buckets":
            buckets = layout_of(
                exchange, values * model.parameters / total_values, model.bytes_per_param
            )
            sizes = buckets.sizes()
            return CallLayout(tuple(reversed(sizes)), tuple(buckets.ready_fractions()), True)
        tensors = exchange.tensor_values
        if exchange.calls == "per_tensor" and tensors is not None and values == total_values:
            return CallLayout(tensors)
        return EQUAL_PIECES

    return layout


def one_call(values: int) -> int:
    """One collective call however many values: the flat buffer."""
    return 1


def call_pieces(
    x: torch.Tensor, calls: int, unit: int, sizes: Sequence[float] | None = None
) -> tuple[torch.Tensor, ...]:
    """``x`` in its calls' pieces, cut at ``piece_edges``."""
    edges = piece_edges(x.numel(), calls, unit, sizes)
    return tuple(x[start:end] for start, end in zip(edges, edges[1:]))


def piece_edges(
    length: int, calls: int, unit: int, sizes: Sequence[float] | None = None
) -> list[int]:
    """Where a tensor of ``length`` values is cut into ``calls`` contiguous pieces (0 and ``length``
    included), each but the last a whole number of ``unit`` values (the quantised average pads every
    call to whole units: aligned, only the last call pads), or equal pieces where the tensor is too
    small for ``calls`` aligned ones (``torch.tensor_split``'s: the first ``length % calls`` one
    longer). With ``sizes`` (in the tensor's order, e.g. the buckets of ``CallLayout``) each piece
    ends where its size, scaled to ``length``, ends, rounded to whole units: a tensor boundary moves
    by less than ``unit`` values."""
    if sizes is not None:
        bounds = aligned_bounds(length, sizes, unit)
        if bounds is not None:
            return [0, *bounds, length]
    step = math.ceil(length / calls / unit) * unit
    edges = [*range(0, length, step), length]
    if len(edges) == calls + 1:
        return edges
    base, longer = divmod(length, calls)
    return [k * base + min(k, longer) for k in range(calls + 1)]


def aligned_bounds(length: int, sizes: Sequence[float], unit: int) -> list[int] | None:
    """Where pieces of ``sizes`` (scaled to ``length`` values) end inside ``length``, each rounded to a
    whole number of ``unit``; None where rounding would leave a piece empty."""
    total, bounds, done = math.fsum(sizes), [], 0.0
    for size in sizes[:-1]:
        done += size
        bounds.append(round(done / total * length / unit) * unit)
    edges = [0, *bounds, length]
    return bounds if all(a < b for a, b in zip(edges, edges[1:])) else None


class Exchanger:
    """Averages flat fp32 tensors over the islands, one at a time, on one background thread."""

    def __init__(
        self,
        cross: Group,
        intra: Group | None,
        bits: int,
        clock: Clock,
        rule: AggregationRule = AggregationRule(),
        device: torch.device | str = "cpu",
        calls: Callable[[int], int] = one_call,
        topk: TopK | None = None,
        gathering: Gathering = AROUND_THE_RING,
        layouts: Callable[[int], CallLayout] = lambda values: EQUAL_PIECES,
    ):
        """``device``: the training thread's; the exchange thread makes it its own current CUDA device
        (a new thread starts on GPU 0, where NCCL calls and new tensors would otherwise go). ``calls``:
        how many collective calls the mean of so many values takes (``exchange.calls``). ``topk``: the
        top-k payload's layout under compression (one flat call, one rank per island); ``gathering``:
        how its payloads travel (``network.gather``). ``layouts``: how the calls cut an exchange of
        so many values (``call_layouts``), each of an island's ranks its share."""
        self.cross = cross
        self.layouts = layouts
        self.calls = calls
        self.topk = topk
        self.gathering = gathering
        self.intra = intra
        self.bits = bits
        self.clock = clock
        self.rule = rule
        self.device = torch.device(device)
        self.pool = ThreadPoolExecutor(
            max_workers=1,
            thread_name_prefix="islands-sync",
            initializer=use_device,
            initargs=(self.device,),
        )

    def warm_up(self, values: int, members: int) -> None:
        """Run the exchange path before the clock starts, on this exchanger's own thread, on zeros of
        ``values`` values (the whole model: no exchange is larger) among ``members`` members that echo
        this one (``comm.Echo``; an elastic run has no cross group yet): no byte moves, but the run's
        first exchange no longer pays the one-off CPU costs of its first large buffers and first
        kernel calls. It must be this thread: the allocator keeps freed buffers per thread (glibc's
        arenas). It repeats (at most ``WARM_UP_ROUNDS``) until a round faults in fewer than
        ``STEADY_FRESH_PAGES`` fresh pages: with freed pages kept (``memory.keep_freed_pages``) the
        heap stops growing after two or three rounds; before, the first exchange of a run at 8:4:2:1
        (2.6M int8 values, four processes on two cores) faulted 15,000-20,000 pages after its last
        byte arrived and measured 7-10% long."""
        echo_intra = Echo(self.intra.size) if self.intra is not None else None
        echo = Exchanger(
            Echo(members),
            echo_intra,
            self.bits,
            Clock(),
            self.rule,
            self.device,
            topk=self.topk,
            gathering=self.gathering.without_store(),
        )
        zeros = torch.zeros(values, device=self.device)
        for _ in range(WARM_UP_ROUNDS):
            if self.pool.submit(fresh_pages_of, echo.exchange, zeros).result() < STEADY_FRESH_PAGES:
                break
        echo.close()

    def launch(
        self, flat: torch.Tensor, key: tuple[int, int] = (0, 0), backward: Backward | None = None
    ) -> Future:
        """Start averaging ``flat``, the exchange of ``key`` (outer step, fragment), its calls each
        no earlier than its bucket is ready in ``backward`` (if given); the future's result is an
        ``Exchange``."""
        return self.pool.submit(self.exchange, flat, True, key, backward)

    def launch_during(
        self, gradients: Producing, prepare: Callable[[torch.Tensor], torch.Tensor]
    ) -> Future:
        """Start averaging the gradient the real backward pass is producing, each call once its
        bucket exists (``exchange_produced``); the future's result is an ``Exchange``."""
        return self.pool.submit(self.exchange_produced, gradients, prepare)

    def exchange_produced(
        self, gradients: Producing, prepare: Callable[[torch.Tensor], torch.Tensor]
    ) -> Exchange:
        """Average a gradient during the real backward pass, as PyTorch DDP's ``Reducer`` does: each
        call, in the layout's order (``call_layouts``), starts once every tensor of its bucket has
        its gradient (``Producing.wait``) and after the call before it, as NCCL's stream runs them.
        An island's ranks cut each of their shares at the same edges (``piece_edges``), so a call's
        bucket is that piece of every share: they first average it over the island (``intra``, the
        flat path's average inside the island, value by value), ``prepare`` it (``faults.poisoned``),
        then each makes the call on its own share's piece.

        Only the whole gradient can be screened (``robust.screen``), so that comes after the last
        call; where it leaves a member out, the calls made are given up (an ``Attempt``: their bytes
        wasted) and the exchange is made again whole (``exchange``). Either way the mean is the flat
        exchange's, bit for bit (with at most two ranks per island: a ring's sum over more may add a
        value's terms in another order)."""
        flat = gradients.flat
        parts, mine = (1, 0) if self.intra is None else (self.intra.size, self.intra.rank)
        length = math.ceil(flat.numel() / parts)
        layout = self.layouts(flat.numel())
        unit = padded_length(1, self.cross.size)
        edges = piece_edges(length, self.calls(flat.numel()), unit, layout.sizes)
        count = len(edges) - 1
        everyone = Verdict((True,) * self.cross.size, {})
        results: list[torch.Tensor] = [flat[:0]] * count
        calls, sent = [], 0
        for index in layout.order(count):
            spans = [
                (part * length + edges[index], part * length + edges[index + 1])
                for part in range(parts)
            ]
            ready_s = gradients.wait(spans)
            calls.append(BucketCall(index, ready_s, self.clock.now()))
            self.average_in_island(flat, spans, prepare)
            results[index], piece_sent = self.combine(padded_slice(flat, *spans[mine]), everyone)
            sent += piece_sent
        mean = torch.cat(results)
        if self.intra is not None:
            mean = torch.cat(self.intra.all_gather(mean))
        verdict = screen(self.cross.all_gather(contribution_stats(flat)), self.rule.norm_factor)
        started_s = calls[0].started_s
        if verdict.count < self.cross.size:
            given_up = Attempt(started_s, self.clock.now(), sent)
            return replace(self.exchange(flat), abandoned=(given_up,), calls=tuple(calls))
        return Exchange(
            mean[: flat.numel()], started_s, self.clock.now(), sent, verdict, calls=tuple(calls)
        )

    def average_in_island(
        self,
        flat: torch.Tensor,
        spans: Sequence[tuple[int, int]],
        prepare: Callable[[torch.Tensor], torch.Tensor],
    ) -> None:
        """``flat`` at ``spans`` (one piece of each share, zero-padded past the end) averaged over the
        island's ranks (``intra``; as is with one rank), then ``prepare``d, in place."""
        pieces = [padded_slice(flat, start, end) for start, end in spans]
        if self.intra is not None:
            summed = torch.cat(pieces)
            self.intra.all_reduce_sum_(summed)
            pieces = list((summed / self.intra.size).split([end - start for start, end in spans]))
        for (start, end), piece in zip(spans, pieces):
            stop = min(end, flat.numel())
            if stop > start:  # a view of flat's own values copies onto itself as a no-op
                flat[start:stop].copy_(prepare(piece[: stop - start]))

    def exchange(
        self,
        flat: torch.Tensor,
        contributes: bool = True,
        key: tuple[int, int] = (0, 0),
        backward: Backward | None = None,
    ) -> Exchange:
        """Screen, then average (or robustly combine) ``flat`` over the islands; a member that does
        not contribute (a joiner without state) sends zeros and still receives the average. ``key``
        (outer step, fragment) names a top-k round (``Gathering``). With ``backward`` each call waits
        for its bucket (``Backward.release_s``): the exchange, its screening first, starts with the
        first."""
        if self.topk is not None:
            return self.exchange_topk(flat, contributes, key)
        calls = self.calls(flat.numel())  # an island's ranks each make them on their shares
        layout = self.layouts(flat.numel())
        release_s = self.released_s(backward, layout)
        if release_s:  # launched with the first bucket, where the simulator starts its work
            self.clock.sleep_until(release_s[0])
        verdict = screen(
            self.cross.all_gather(contribution_stats(flat, contributes)), self.rule.norm_factor
        )
        started_s = self.clock.now()
        if not verdict.count:
            return Exchange(torch.zeros_like(flat), started_s, self.clock.now(), 0, verdict)
        mine = flat if verdict.accepted[self.cross.rank] else torch.zeros_like(flat)
        if self.intra is None:
            mean, sent = self.combine_in_calls(mine, verdict, calls, release_s, layout)
        else:
            part, sent = self.combine_in_calls(
                share(mine, self.intra.rank, self.intra.size), verdict, calls, release_s, layout
            )
            mean = torch.cat(self.intra.all_gather(part))[: flat.numel()]
        return Exchange(mean, started_s, self.clock.now(), sent, verdict)

    def released_s(self, backward: Backward | None, layout: CallLayout) -> list[float]:
        """When the calls of an exchange during ``backward`` may start at the earliest: each bucket
        once it is ready (``Backward.release_s``); another exchange whole at the start, where the
        simulator launches it (``schedules.ddp``), its calls back to back."""
        if backward is None:
            return []
        if not layout.ready:
            return [backward.start_s]
        return backward.release_s(layout.ready)

    def exchange_topk(
        self, flat: torch.Tensor, contributes: bool, key: tuple[int, int]
    ) -> Exchange:
        """Screen, then gather the top-k payloads (``Gathering``) and average the accepted ones of
        the round's chosen members."""
        assert self.topk is not None and self.intra is None, "one rank per island sends top-k"
        codec = TopKCodec(self.topk, flat.numel(), self.rule.topk_mean)
        payload, sent, verdict = announce(
            self.cross, flat, codec, contributes, self.rule.norm_factor
        )
        started_s = self.clock.now()
        entry = Entry(payload, codec, verdict, sent.flatten())
        gathered = self.gathering.mean(self.cross, key, entry)
        return Exchange(
            gathered.mean,
            started_s,
            self.clock.now(),
            gathered.sent_bytes,
            gathered.verdict,
            sent=gathered.sent,
        )

    def combine_in_calls(
        self,
        x: torch.Tensor,
        verdict: Verdict,
        calls: int,
        release_s: Sequence[float] = (),
        layout: CallLayout = EQUAL_PIECES,
    ) -> tuple[torch.Tensor, int]:
        """``combine`` as ``calls`` collective calls issued back to back, each on its own piece
        (``call_pieces``, cut as ``layout`` says), as a stack that all-reduces bucket by bucket or
        tensor by tensor does: the mean and the robust rules are taken value by value, so the pieces'
        results are the whole's. Call k starts no earlier than ``release_s[k]`` (trace seconds) where
        given, and after call k - 1 (PyTorch DDP's buckets, each all-reduced once the backward pass
        has produced it, from the last layers: ``layout.reverse``)."""
        if calls == 1 and not release_s:
            return self.combine(x, verdict)
        pieces = call_pieces(x, calls, padded_length(1, self.cross.size), layout.sizes)
        results: list[torch.Tensor | None] = [None] * len(pieces)
        sent = 0
        for index, ready_s in zip_longest(layout.order(len(pieces)), release_s[: len(pieces)]):
            if ready_s is not None:
                self.clock.sleep_until(ready_s)
            results[index], piece_sent = self.combine(pieces[index], verdict)
            sent += piece_sent
        return torch.cat([result for result in results if result is not None]), sent

    def combine(self, x: torch.Tensor, verdict: Verdict) -> tuple[torch.Tensor, int]:
        """The accepted members' mean (zeros sent by the others, rescaled) or robust combination."""
        if collective_of(self.rule.aggregation) == ALL_GATHER:
            return robust_average(
                x, self.cross, self.bits, verdict, self.rule.aggregation, self.rule.trim_fraction
            )
        mean, sent = average(x, self.cross, self.bits)
        if verdict.count < self.cross.size:
            mean = mean * (self.cross.size / verdict.count)
        return mean, sent

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        if self.gathering.store is not None:
            self.gathering.store.close()


def use_device(device: torch.device) -> None:
    """Make ``device`` this thread's current CUDA device (nothing on the CPU)."""
    if device.type == "cuda":
        torch.cuda.set_device(device)
