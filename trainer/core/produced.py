"""The gradient as the real backward pass produces it, tensor by tensor, for DDP's buckets to go as
soon as they exist (``schedule.backward_overlap`` on an unpaced step,
``sync.Exchanger.exchange_produced``).

PyTorch DDP's ``Reducer`` hooks every parameter's gradient accumulator: once a parameter's gradient
is accumulated it is marked ready, and once every parameter of a bucket is, the bucket's all-reduce
is launched, the buckets strictly in their order (``torch/nn/parallel/distributed.py`` builds the
``dist.Reducer`` with the buckets reversed, "to approximate the order in which their gradients are
produced"; its compiled path registers ``param.register_post_accumulate_grad_hook`` on each
parameter). Here each parameter's hook (``Tensor.register_post_accumulate_grad_hook``, which fires
once per backward pass, after a tied weight's uses are summed) copies its gradient into a flat
buffer at its offset (DDP's copy into its bucket view) and notes the trace second; the exchange
thread waits for the tensors of each call's piece (``wait``).

On CUDA the hook runs on autograd's device thread when the gradient's kernels are queued, not done,
so a ready time is when its last kernel was queued: the copy is queued behind them on the same
(default) stream, and the calls read it only after it, as DDP's do (NCCL's stream waits for the
current one; a gloo call stages to the CPU, which waits).
"""

from __future__ import annotations

import bisect
import itertools
import math
import threading
from collections.abc import Sequence
from typing import NamedTuple

import torch

from ..exchange.sync import BucketCall
from .tracing import Clock


class BackwardCalls(NamedTuple):
    """An unpaced step's backward pass (``step``, from ``start_s`` to ``end_s``, trace seconds) and
    the calls its gradient went in, in call order (when each bucket was ready, when its call began)."""

    step: int
    start_s: float
    end_s: float
    calls: tuple[BucketCall, ...]


class ProducedGradients:
    """The flat gradient of ``params`` (in their order, ``world.flatten``'s layout) filled while a
    backward pass runs; ``arm`` it before each backward pass whose gradient goes during it."""

    def __init__(self, params: Sequence[torch.nn.Parameter], clock: Clock):
        self.params, self.clock = list(params), clock
        self.offsets = [0, *itertools.accumulate(p.numel() for p in self.params)]
        self.flat = torch.empty(0)
        self.ready_s: list[float | None] = [None] * len(self.params)  # None: not yet produced
        self.ended = False  # the backward pass is over: a tensor still not produced never will be
        self.armed = False
        self.condition = threading.Condition()
        for index, param in enumerate(self.params):
            param.register_post_accumulate_grad_hook(self.hook_for(index))

    def hook_for(self, index: int):
        def accumulated(param: torch.Tensor) -> None:
            if self.armed:
                self.accumulated(index, param)

        return accumulated

    def arm(self) -> None:
        """Before a backward pass: a fresh flat buffer, no tensor ready."""
        first = self.params[0]
        self.flat = torch.empty(self.offsets[-1], dtype=torch.float32, device=first.device)
        with self.condition:
            self.ready_s = [None] * len(self.params)
            self.ended, self.armed = False, True

    def accumulated(self, index: int, param: torch.Tensor) -> None:
        """A parameter's gradient is complete: copy it in, note when, wake the exchange thread."""
        assert param.grad is not None, "a post-accumulate-grad hook fires with the gradient there"
        start, end = self.offsets[index], self.offsets[index + 1]
        self.flat[start:end].copy_(param.grad.detach().flatten())
        with self.condition:
            self.ready_s[index] = self.clock.now()
            self.condition.notify_all()

    def finished(self) -> None:
        """After the backward pass: every tensor must have had its gradient (the model's loss depends
        on every parameter); one that did not would hold the exchange forever, so it fails here."""
        with self.condition:
            self.armed = False
            missing = [i for i, ready in enumerate(self.ready_s) if ready is None]
            self.ended = True
            self.condition.notify_all()
        assert not missing, f"parameters {missing} got no gradient in the backward pass"

    def tensors_in(self, spans: Sequence[tuple[int, int]]) -> list[int]:
        """The parameters whose values overlap any of ``spans`` (flat offsets, end excluded; past
        the last value: none)."""
        found: set[int] = set()
        for start, end in spans:
            end = min(end, self.offsets[-1])
            if end > start:
                first = bisect.bisect_right(self.offsets, start) - 1
                last = bisect.bisect_left(self.offsets, end) - 1
                found.update(range(first, last + 1))
        return sorted(found)

    def wait(self, spans: Sequence[tuple[int, int]]) -> float:
        """Block until every tensor overlapping ``spans`` has its gradient; the trace second the last
        of them got it (now for spans of padding alone)."""
        tensors = self.tensors_in(spans)
        with self.condition:
            self.condition.wait_for(
                lambda: self.ended or all(self.ready_s[i] is not None for i in tensors)
            )
            ready = [self.ready_s[i] for i in tensors]
        produced = [r for r in ready if r is not None]
        if len(produced) < len(ready):
            raise RuntimeError("the backward pass ended without a gradient this call needs")
        return max(produced, default=self.clock.now())


def measured_buckets(records: Sequence[BackwardCalls]) -> dict[str, list[float] | float]:
    """What the unpaced steps' calls measured, for ``run.json`` (``backward_buckets``): each call's
    ready fraction, the mean over steps of (ready_k - ready_1) / (ready_C - ready_1) (the model's
    ``schedules.buckets.BucketLayout.ready_fractions`` puts bucket 1 at the launch and bucket C at
    the end of the compute); the mean seconds from the first bucket's ready time to the end of the
    backward pass (over the step's compute: the overlap the real pass gives); and the share of
    calls that started before their backward pass ended."""
    spread = [r for r in records if r.calls and r.calls[-1].ready_s > r.calls[0].ready_s]
    fractions = [
        [
            (c.ready_s - r.calls[0].ready_s) / (r.calls[-1].ready_s - r.calls[0].ready_s)
            for c in r.calls
        ]
        for r in spread
    ]
    timed = [r for r in records if r.calls]
    calls = [(c, r.end_s) for r in timed for c in r.calls]
    return {
        "ready_fractions": [math.fsum(column) / len(spread) for column in zip(*fractions)],
        "first_ready_to_end_s": math.fsum(r.end_s - r.calls[0].ready_s for r in timed)
        / max(1, len(timed)),
        "started_in_backward": sum(c.started_s < end_s for c, end_s in calls) / max(1, len(calls)),
    }
