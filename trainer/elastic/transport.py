"""How an elastic run's exchanges travel (``diloco.Transport``): through the membership, on the
exchange thread, with the votes and admissions of ``membership.py`` and the leader's word to its
followers (``world.ElasticWorld.shared``)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Protocol, TypeVar

import torch

from islands.schedules import SyncPoint

from ..core.faults import kill_point
from ..core.tracing import Clock
from ..exchange.comm import StoreGroup
from ..exchange.group import Group
from ..exchange.sync import Attempt, Exchange, Exchanger
from .membership import Membership

T = TypeVar("T")


class Shared(Protocol):
    """``ElasticWorld.shared``: the leader's ``decide()``, its outcome on every rank of the island."""

    def __call__(self, decide: Callable[[], T], /) -> T: ...


class Attempts:
    """An exchange's attempts through ``Membership.run``: when the one under way began and what the
    epoch's group had sent by then, and those abandoned (``sync.Attempt``: what the group sent in
    them, measured piece by piece, ``comm.StoreGroup.sent_bytes``)."""

    def __init__(self, clock: Clock):
        self.clock = clock
        self.abandoned: list[Attempt] = []
        self.started: tuple[float, StoreGroup, int] | None = None

    def begin(self, group: StoreGroup) -> None:
        self.started = self.clock.now(), group, group.sent_bytes

    def abandon(self) -> None:
        assert self.started is not None, "an attempt is abandoned once it began (Membership.run)"
        started_s, group, sent_before = self.started
        self.abandoned.append(Attempt(started_s, self.clock.now(), group.sent_bytes - sent_before))


class ElasticTransport:
    """The exchanges of an elastic run (``diloco.Transport``): each one runs on the exchange thread
    through ``Membership.run``, so a death re-forms the group and redoes it among the survivors while
    the training thread goes on. In an island of several ranks only its leader exchanges; the launch
    and the committed average are the leader's decisions (``ElasticWorld.shared``)."""

    def __init__(self, membership: Membership, exchanger: Exchanger, shared: Shared, island: int):
        self.membership = membership
        self.exchanger = exchanger
        self.shared = shared
        self.island = island
        self.admitted_at: int | None = None  # a joiner: the inner step it was last admitted at

    def cross_group(self, cross: Group) -> None:
        """The cross-island group of a new epoch."""
        self.exchanger.cross = cross

    def reach(self, step: int, contributes: bool) -> None:
        """A passive joiner (``contributes`` False) waits for the members to reach the launch after
        inner step ``step``, outside any collective: they may be a whole interval away, longer than
        the collective timeout (at its admission they are there already)."""
        if contributes or step == self.admitted_at:
            return
        key = self.membership.key("launch")
        while not self.membership.stopping.is_set():
            if (
                self.membership.store.check([key])
                and int(self.membership.store.get(key).decode()) >= step
            ):
                return
            time.sleep(0.02)

    def launch(
        self, step: int, point: SyncPoint, delta: torch.Tensor, contributes: bool
    ) -> Future | None:
        """Start the exchange on the exchange thread (the leader's; its followers get None)."""
        started: list[Future] = []

        def start() -> None:
            self.admit(step, point, contributes)
            started.append(self.exchanger.pool.submit(self.exchange, delta, contributes))

        self.shared(start)
        return started[0] if started else None

    def exchange(self, delta: torch.Tensor, contributes: bool) -> Exchange:
        """The exchange through the membership, with the attempts it gave up on the way."""
        attempts = Attempts(self.exchanger.clock)

        def attempt(group: StoreGroup) -> Exchange:
            attempts.begin(group)
            return self.exchange_once(delta, contributes)

        exchange = self.membership.run(attempt, attempts.abandon)
        return dataclasses.replace(exchange, abandoned=tuple(attempts.abandoned))

    def admit(self, step: int, point: SyncPoint, contributes: bool) -> None:
        """The first fragment of an outer step first admits the joiners seen so far (no exchange is in
        flight then: tau < H / P), who take part without contributing. A member publishes the launch
        step, which passive joiners wait for (``reach``) before they enter the op."""
        if contributes:
            self.membership.store.set(self.membership.key("launch"), str(step))
        if point.fragment == 0 and (contributes or step != self.admitted_at):
            self.membership.admit_joiners(contributes, step)

    def exchange_once(self, delta: torch.Tensor, contributes: bool) -> Exchange:
        kill_point("exchange-screen", self.island)
        exchange = self.exchanger.exchange(delta, contributes)
        kill_point("exchange-vote", self.island)
        return exchange

    def collect(self, point: SyncPoint, handle: Future | None) -> Exchange:
        """The committed exchange (a follower hears it, and the members it came from: its membership
        is only the view its leader gives it)."""

        def decide() -> tuple[Exchange, list[int]]:  # the leader's: it launched the exchange
            assert handle is not None, (
                "only the island's leader decides, and it launched the exchange"
            )
            return handle.result(), self.membership.members

        exchange, members = self.shared(decide)
        self.membership.members = members
        return exchange

    def applied(self, point: SyncPoint) -> None:
        """What the heartbeat publishes: a departure loses the compute since the last applied sync."""
        progress = self.membership.progress
        progress.synced_s = self.membership.now_s()
        progress.outer_step = point.outer_step + 1
