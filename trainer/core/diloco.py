"""DiLoCo around the inner optimizer: one object per fragment, each with a prepare and a perform step.

The shape of torchft's ``local_sgd.py``. The loop steps the inner optimizer as usual and calls
``DiLoCo.after_step(step)`` after every inner step; that executes the schedule's declaration
(``config.sync_plan``) at that step, launches before applies:

* ``FragmentSync.prepare``: the fragment's pseudo-gradient delta = theta_global - theta_local (fp32,
  ``outer.Fragment``), the fault hook (``faults.poisoned``), then its exchange is launched;
* ``FragmentSync.perform``: wait for the exchange, outer step on the global copy with the averaged
  delta, merge into the local weights with alpha (eager updates: ``EagerFragmentSync``; Decoupled
  DiLoCo, whose syncer steps: ``AdoptFragmentSync``; top-k compression with error feedback, a
  wrapper over either step: ``FeedbackFragmentSync``).

Exchanges in flight are keyed by (outer step, fragment), so an exchange still in flight when the next
one is launched is kept (and performed in its own turn). Where the bytes go is the ``Transport``:
over the exchange thread for a plain run (``ExchangerTransport``), through the membership for an
elastic one (``elastic/transport.py``'s ``ElasticTransport``), in memory in the unit tests. DDP does not use this
object: its gradient average sits inside the inner step.

A passive member (an elastic joiner whose state is still downloading) contributes zeros and keeps
each average instead of applying it (``kept``), to replay them onto its snapshot later.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import asdict
from typing import Any, NamedTuple, Protocol

import torch

from islands.schedules import ADOPT, AVERAGE, EAGER, SyncPoint

from ..exchange.sync import Exchange, Exchanger
from .faults import poisoned
from .outer import Fragment


class Transport(Protocol):
    """How one member's exchanges travel (every member calls each method at the same point)."""

    def reach(self, step: int, contributes: bool) -> None:
        """Block until this member may take part in the launches after inner step ``step``
        (``contributes`` False: a member without state)."""

    def launch(self, step: int, point: SyncPoint, delta: torch.Tensor, contributes: bool) -> Any:
        """Start averaging ``delta`` over the islands (``contributes`` False: a member without state
        sending zeros that the screening leaves out); returns the handle ``collect`` takes."""

    def collect(self, point: SyncPoint, handle: Any) -> Exchange:
        """Wait for the exchange that ``launch`` returned ``handle`` for."""

    def applied(self, point: SyncPoint) -> None:
        """The exchange's average was applied (its outer step done)."""


class ExchangerTransport:
    """A plain run's transport: the exchange thread of ``sync.Exchanger`` over the fixed group."""

    def __init__(self, exchanger: Exchanger):
        self.exchanger = exchanger

    def reach(self, step: int, contributes: bool) -> None:
        pass

    def launch(self, step: int, point: SyncPoint, delta: torch.Tensor, contributes: bool) -> Future:
        return self.exchanger.launch(delta, (point.outer_step, point.fragment))

    def collect(self, point: SyncPoint, handle: Future) -> Exchange:
        return handle.result()

    def applied(self, point: SyncPoint) -> None:
        pass


class Synced(NamedTuple):
    """One exchange as the loop records it: ready to wait at ``arrived_s``, result in at ``received_s``
    (trace seconds; the outer step and the merge come after)."""

    point: SyncPoint
    exchange: Exchange
    arrived_s: float
    received_s: float


class FragmentSync:
    """One fragment's side of DiLoCo: its prepare step and its perform step (``diloco``: the DiLoCo
    it belongs to, passed in, not kept: no reference cycle keeps the transport's groups alive)."""

    def __init__(self, fragment: Fragment):
        self.fragment = fragment

    def prepare(self, diloco: DiLoCo, step: int, point: SyncPoint) -> None:
        """Pseudo-gradient (zeros for a passive member), fault hook, launch its exchange."""
        if diloco.passive:
            delta, contributes = torch.zeros(self.fragment.numel), False
        else:
            delta, contributes = (
                poisoned(self.fragment.pseudo_gradient(), diloco.island, point.outer_step),
                True,
            )
        diloco.launch(step, point, delta, contributes)

    def perform(self, diloco: DiLoCo, point: SyncPoint, arrived_s: float) -> Synced:
        """Wait for the exchange, then the outer step and the merge (a passive member keeps the mean)."""
        key = (point.outer_step, point.fragment)
        exchange = diloco.collect(point)
        synced = Synced(point, exchange, arrived_s, diloco.now())
        if diloco.kept is not None:  # passive
            diloco.kept[key] = exchange.mean
        else:
            self.fragment.apply(exchange.mean, diloco.alpha)
            diloco.transport.applied(point)
        return synced


class EagerFragmentSync(FragmentSync):
    """One fragment under eager updates (``schedules/eager.py``, Kale et al. 2025, arXiv:2502.12996):
    the outer step of round t is taken at round t's launch with the proxy
    mean(t-1) + (Delta_m(t) - Delta_m(t-1)) / M, this worker's fresh delta standing in for the round
    in flight; the exchange that arrives there is round t-1's. Round 0 steps with Delta_m(0) / M; the
    last round, not exchanged, steps when round T-2's average arrives. The worker's own previous
    delta is the fragment's ``own_delta`` (kept in checkpoints)."""

    def __init__(self, fragment: Fragment):
        super().__init__(fragment)
        self.fresh: torch.Tensor | None = (
            None  # the delta launched at this step, for this step's perform
        )

    def prepare(self, diloco: DiLoCo, step: int, point: SyncPoint) -> None:
        super().prepare(diloco, step, point)
        fresh = self.fragment.pseudo_gradient()
        if self.fragment.own_delta is None:  # round 0: no average will arrive at this step
            self.step_with(fresh / diloco.members(), diloco.alpha, fresh)
        else:
            self.fresh = fresh

    def perform(self, diloco: DiLoCo, point: SyncPoint, arrived_s: float) -> Synced:
        """Wait for round t-1's average, then the outer step with the eager proxy."""
        exchange = diloco.collect(point)
        synced = Synced(point, exchange, arrived_s, diloco.now())
        fresh = self.fresh if self.fresh is not None else self.fragment.pseudo_gradient()
        self.fresh = None
        own_delta = self.fragment.own_delta
        assert own_delta is not None, "round 0's prepare took a step and kept its delta"
        self.step_with(
            exchange.mean + (fresh - own_delta) / max(1, exchange.verdict.count),
            diloco.alpha,
            fresh,
        )
        diloco.transport.applied(point)
        return synced

    def step_with(self, outer_gradient: torch.Tensor, alpha: float, own: torch.Tensor) -> None:
        self.fragment.own_delta = own
        self.fragment.apply(outer_gradient, alpha)


class AdoptFragmentSync(FragmentSync):
    """One fragment under Decoupled DiLoCo (``schedules/decoupled.py``): the syncer took the outer
    step; the exchange brings back its global fragment, which the learner holds and trains from."""

    def perform(self, diloco: DiLoCo, point: SyncPoint, arrived_s: float) -> Synced:
        exchange = diloco.collect(point)
        synced = Synced(point, exchange, arrived_s, diloco.now())
        self.fragment.adopt(exchange.mean)
        diloco.transport.applied(point)
        return synced


class FeedbackFragmentSync(FragmentSync):
    """One fragment under top-k compression (``schedules/compression.py``): the exchange carries the
    error-feedback buffer e <- beta e + delta in place of delta (``Fragment.accumulate``; delta itself
    without feedback), the exchanger sends its top-k, and what was sent leaves e after the outer
    step (``Fragment.keep_unsent``). The averaged payloads are the outer gradient."""

    def prepare(self, diloco: DiLoCo, step: int, point: SyncPoint) -> None:
        if diloco.passive:
            super().prepare(diloco, step, point)
            return
        delta = poisoned(self.fragment.pseudo_gradient(), diloco.island, point.outer_step)
        diloco.launch(step, point, self.fragment.accumulate(delta), True)

    def perform(self, diloco: DiLoCo, point: SyncPoint, arrived_s: float) -> Synced:
        synced = super().perform(diloco, point, arrived_s)
        assert synced.exchange.sent is not None, "a top-k exchange says what it sent"
        self.fragment.keep_unsent(synced.exchange.sent)
        return synced


FRAGMENT_SYNCS: dict[str, type[FragmentSync]] = {
    AVERAGE: FragmentSync,
    EAGER: EagerFragmentSync,
    ADOPT: AdoptFragmentSync,
}


class DiLoCo:
    """The outer loop of DiLoCo / Streaming DiLoCo for one member: the fragments, the schedule's
    launches and applies by inner step, the exchanges in flight and the transport. The inner
    optimizer is the loop's; this object resets it where the local weights restart from the global."""

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        fragments: list[Fragment],
        transport: Transport,
        *,
        schedule: tuple[dict[int, list[SyncPoint]], dict[int, list[SyncPoint]]],
        alpha: float,
        island: int,
        now: Callable[[], float],
        update: str = AVERAGE,
        members: Callable[[], int] = lambda: 1,
        compressed: bool = False,
    ):
        """``schedule``: (launches, applies) by inner step (``config.sync_plan``); ``alpha``: the merge's
        mixing; ``island``: this member's (for the fault hook); ``now``: trace seconds; ``update``:
        the schedule's outer update rule (``Schedule.update``); ``members``: how many islands
        exchange now (the eager rule's M before any average has arrived); ``compressed``: top-k
        payloads (``FeedbackFragmentSync``, under the average rule)."""
        self.optimizer = optimizer
        self.fragments = fragments
        sync = FeedbackFragmentSync if compressed else FRAGMENT_SYNCS[update]
        self.syncs = [sync(fragment) for fragment in fragments]
        self.members = members
        self.transport = transport
        self.launches, self.applies = schedule
        self.alpha = alpha
        self.island = island
        self.now = now
        self.pending: dict[
            tuple[int, int], Any
        ] = {}  # exchanges in flight by (outer step, fragment)
        self.sent: dict[
            tuple[int, int], tuple[int, SyncPoint, torch.Tensor, bool]
        ] = {}  # what they carry
        self.kept: dict[tuple[int, int], torch.Tensor] | None = None  # a passive member's averages

    def launch(self, step: int, point: SyncPoint, delta: torch.Tensor, contributes: bool) -> None:
        key = (point.outer_step, point.fragment)
        self.sent[key] = (step, point, delta, contributes)
        self.pending[key] = self.transport.launch(step, point, delta, contributes)

    def collect(self, point: SyncPoint) -> Exchange:
        key = (point.outer_step, point.fragment)
        del self.sent[key]
        return self.transport.collect(point, self.pending.pop(key))

    def state_dict(self) -> dict[str, Any]:
        """The exchanges in flight (a schedule whose exchanges span period ends, eager updates): what
        this member sent, so that a resumed run sends it again."""
        return {
            "in_flight": [
                {"step": step, "point": asdict(point), "delta": delta, "contributes": contributes}
                for step, point, delta, contributes in self.sent.values()
            ]
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Launch again, in their order, the exchanges that were in flight at the checkpoint (every
        member resumes from the same one)."""
        for sent in state.get("in_flight", []):
            self.launch(
                sent["step"], SyncPoint(**sent["point"]), sent["delta"], sent["contributes"]
            )

    @property
    def passive(self) -> bool:
        return self.kept is not None

    def become_passive(self) -> None:
        """A member without state from now on: it sends zeros and keeps each average (``replay_kept``)."""
        self.kept = {}

    def quiet_until_admission(self, step: int) -> bool:
        """Whether a snapshot taken after inner step ``step`` holds every average applied before the next
        admission (the next launch of fragment 0): no exchange in flight and none due before it. Always
        under DiLoCo; under Streaming DiLoCo from an outer boundary to the next period's first launch."""
        if self.pending:
            return False
        admission = min(
            (
                later
                for later, points in self.launches.items()
                if later > step and any(point.fragment == 0 for point in points)
            ),
            default=None,
        )
        return admission is None or not any(step < applied < admission for applied in self.applies)

    def points(self, step: int) -> list[SyncPoint]:
        """The sync points after inner step ``step``, launches first."""
        return [*self.launches.get(step, ()), *self.applies.get(step, ())]

    def sync_steps(self, start: int) -> list[int]:
        """The inner steps from ``start`` on after which something is launched or applied."""
        return sorted(step for step in {*self.launches, *self.applies} if step >= start)

    def after_step(self, step: int) -> list[Synced]:
        """Prepare the fragments launched after inner step ``step``, then perform those due; returns
        the exchanges performed, each ready to wait from the end of the launches (or of the previous
        perform) on."""
        launches = self.launches.get(step, ())
        if launches:
            self.transport.reach(step, not self.passive)
        arrived_s = self.now()
        for point in launches:
            self.syncs[point.fragment].prepare(self, step, point)
        performed = []
        for point in self.applies.get(step, ()):
            performed.append(self.syncs[point.fragment].perform(self, point, arrived_s))
            arrived_s = self.now()
        return performed

    def restart_from_global(self) -> None:
        """Local weights = global, a fresh inner optimizer (a member that adopted the global state)."""
        for fragment in self.fragments:
            fragment.merge(0.0)
        self.optimizer.state.clear()

    def replay_kept(self) -> None:
        """A passive member that adopted a snapshot: apply every kept average the snapshot does not
        hold yet, in order (the members' very outer steps), restart from the global weights and
        become active."""
        assert self.kept is not None, "only a passive member replays"
        for (outer_step, index), mean in sorted(self.kept.items()):
            if outer_step >= self.fragments[index].applied:
                self.fragments[index].apply(mean, self.alpha)
        self.kept = None
        self.restart_from_global()
