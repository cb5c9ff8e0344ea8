"""DiLoCo around the inner optimizer: one object per fragment, each with a prepare and a perform step.

The shape of torchft's ``local_sgd.py``. The loop steps the inner optimizer as usual and calls
``DiLoCo.after_step(step)`` after every inner step; that executes the schedule's declaration
(``config.sync_plan``) at that step, launches before applies:

* ``FragmentSync.prepare``: the fragment's pseudo-gradient delta = theta_global - theta_local (fp32,
  ``outer.Fragment``), the fault hook (``faults.poisoned``), then its exchange is launched;
* ``FragmentSync.perform``: wait for the exchange, outer step on the global copy with the averaged
  delta, merge into the local weights with alpha.

Exchanges in flight are keyed by (outer step, fragment), so an exchange still in flight when the next
one is launched is kept (and performed in its own turn). Where the bytes go is the ``Transport``:
over the exchange thread for a plain run (``ExchangerTransport``), through the membership for an
elastic one (``elastic_transport.ElasticTransport``), in memory in the unit tests. DDP does not use this
object: its gradient average sits inside the inner step.

A passive member (an elastic joiner whose state is still downloading) contributes zeros and keeps
each average instead of applying it (``kept``), to replay them onto its snapshot later.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any, Callable, NamedTuple, Protocol

import torch

from islands.schedules import SyncPoint

from .faults import poisoned
from .outer import Fragment
from .sync import Exchange, Exchanger


class Transport(Protocol):
    """How one member's exchanges travel (every member calls each method at the same point)."""

    def reach(self, step: int) -> None:
        """Block until this member may take part in the launches after inner step ``step``."""

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

    def reach(self, step: int) -> None:
        pass

    def launch(self, step: int, point: SyncPoint, delta: torch.Tensor, contributes: bool) -> Future:
        return self.exchanger.launch(delta)

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
            delta, contributes = poisoned(self.fragment.pseudo_gradient(), diloco.island, point.outer_step), True
        diloco.pending[point.outer_step, point.fragment] = diloco.transport.launch(step, point, delta, contributes)

    def perform(self, diloco: DiLoCo, point: SyncPoint, arrived_s: float) -> Synced:
        """Wait for the exchange, then the outer step and the merge (a passive member keeps the mean)."""
        key = (point.outer_step, point.fragment)
        exchange = diloco.transport.collect(point, diloco.pending.pop(key))
        synced = Synced(point, exchange, arrived_s, diloco.now())
        if diloco.passive:
            diloco.kept[key] = exchange.mean
        else:
            self.fragment.apply(exchange.mean, diloco.alpha)
            diloco.transport.applied(point)
        return synced


class DiLoCo:
    """The outer loop of DiLoCo / Streaming DiLoCo for one member: the fragments, the schedule's
    launches and applies by inner step, the exchanges in flight and the transport. The inner
    optimizer is the loop's; this object resets it where the local weights restart from the global."""

    def __init__(self, optimizer: torch.optim.Optimizer, fragments: list[Fragment], transport: Transport, *,
                 schedule: tuple[dict[int, list[SyncPoint]], dict[int, list[SyncPoint]]], alpha: float,
                 island: int, now: Callable[[], float]):
        """``schedule``: (launches, applies) by inner step (``config.sync_plan``); ``alpha``: the merge's
        mixing; ``island``: this member's (for the fault hook); ``now``: trace seconds."""
        self.optimizer = optimizer
        self.fragments = fragments
        self.syncs = [FragmentSync(fragment) for fragment in fragments]
        self.transport = transport
        self.launches, self.applies = schedule
        self.alpha = alpha
        self.island = island
        self.now = now
        self.pending: dict[tuple[int, int], Any] = {}  # exchanges in flight by (outer step, fragment)
        self.kept: dict[tuple[int, int], torch.Tensor] | None = None  # a passive member's averages

    @property
    def passive(self) -> bool:
        return self.kept is not None

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
            self.transport.reach(step)
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
        for (outer_step, index), mean in sorted(self.kept.items()):
            if outer_step >= self.fragments[index].applied:
                self.fragments[index].apply(mean, self.alpha)
        self.kept = None
        self.restart_from_global()
