"""The departures and returns that ``Counts`` plays one at a time (``counts.py``): which worker a change
picks, in the counts' order (members, the holders first, then joiners not begun, in, in the collective
in or not begun, in flight), and what its leaving does to the ring, the downloads and the totals, and
what happens once no member is left (``emptied``, ``alone``: see ``returning.py`` for the rules)."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from islands.scenarios.model import IslandSpec

from .holders import Group, Holder


class Changes(ABC):
    """A ``Counts``'s departures and returns (the counts are its own attributes, declared here: the
    state that ``Counts`` plays and ``chain.py`` reads and moves)."""

    # the run
    rng: np.random.Generator
    leave_rate: float
    return_rate: float
    period_s: float
    capacity: float
    detect_s: float
    pooled: bool
    partial: bool
    pool_since: list[float]
    payload_bytes: float
    volume: Callable[
        ..., Any
    ]  # the collective's bytes per worker: of a count, or of an array of them
    horizon_s: float
    # who is where
    member_count: int
    absent: int
    unstarted: int
    loaded: int
    loaded_enlisted: int
    unstarted_enlisted: int
    extension_s: float
    holders: list[Holder]
    in_flight: int
    in_flight_enlisted: int
    detections: deque[float]
    timer_due: bool
    chain_chunk: int
    # the period
    now: float
    computing: bool
    formed: bool
    boundary_s: float
    formed_s: float
    enlisted_orphan_s: float
    first_start_s: float | None
    blocked_until_s: float
    ring_on: bool
    ring_left: float
    ring_bytes: float
    ring_participants: int
    hold_until_s: float
    # partial: what each participant dropped from the ring in flight had sent by its first departure,
    # those away and those back
    dropped_away: list[float]
    dropped_back: list[float]
    weights_bytes: float
    # the totals
    stall: float
    bytes_sent: float
    wasted: float
    present: float
    lost_s: float
    leaves: int
    joins: int
    dropped_members: int

    @abstractmethod
    def begin_downloads(self, count: int) -> None:
        """``count`` joiners begin their downloads now (``Counts.begin_downloads``)."""

    @abstractmethod
    def rates(self) -> None:
        """Fill the flows' rates after a change (``Counts.rates``)."""

    @abstractmethod
    def settle_pool(self, end_s: float) -> None:
        """Draw the pooled workers' returns and departures up to ``end_s`` (``Counts.settle_pool``)."""

    @abstractmethod
    def touch(self, holder: Holder) -> None:
        """``holder``'s downloads changed (``Counts.touch``)."""

    @abstractmethod
    def retime(self) -> None:
        """Every holder's progress was set anew (``Counts.retime``)."""

    @abstractmethod
    def holder_left(self, holder: Holder) -> None:
        """A holder left: its downloads begin again from others (``Counts.holder_left``)."""

    def departed(self) -> None:
        """A worker left now: the others notice it ``detect_s`` later (``orphan``'s moments)."""
        detections = self.detections
        while detections and detections[0] < self.now:
            detections.popleft()
        detections.append(self.now + self.detect_s)

    def change(self, pick: float, present: int, waiting_dl: int, enlisted_dl: int) -> None:
        """The ``pick``-th of the departures and returns (weighted by their rates) happens now."""
        pick /= self.leave_rate
        if pick >= present:
            self.returned((pick - present) * self.leave_rate / self.return_rate)
        elif pick < self.member_count:
            self.member_left(pick)
        else:
            self.joiner_left(int(pick - self.member_count), waiting_dl)

    def returned(self, index: float) -> None:
        """The ``index``-th absent worker returns."""
        away = self.absent - int(index)  # the dropped participants away come last among the absent
        self.joins += 1
        self.absent -= 1
        if self.member_count == 0:  # nobody to download from: it starts at once
            self.alone()
        elif self.computing and not self.formed:  # quiet: its download begins now
            self.begin_downloads(1)
        else:
            self.unstarted += 1
            if away <= len(self.dropped_away):
                self.dropped_back.append(self.dropped_away.pop(away - 1))

    def alone(self) -> None:
        """A worker back while no member is present starts at once from the last completed outer step
        (``Churn.joiner`` with no peer): the only member, computing from now."""
        self.member_count = 1
        self.boundary_s = self.now

    def member_left(self, index: float) -> None:
        """The ``index``-th member leaves (the holders come first among them)."""
        self.leaves += 1
        self.gone()
        self.member_count -= 1
        if index < len(self.holders):
            self.holder_left(self.holders[int(index)])
        self.departed()
        if self.computing:
            self.lost_s += self.now - self.boundary_s
        else:
            self.lost_s += self.period_s
            self.participant_left()
        self.blocked_until_s = max(self.blocked_until_s, self.now + self.detect_s)
        if self.member_count == 0:
            self.emptied()

    def emptied(self) -> None:
        """No member is left. A pending collective stays formed (its ring broken: ``participant_left``)
        with its joiners in it, and whoever comes back now starts at once (``alone``): the workers
        pooled since it formed are drawn up to now, and the phase is the members' compute again. The
        joiners in it start alone once the others notice this departure, those waiting at the first
        moment the others notice any (``Counts.orphan``)."""
        if not self.computing:
            self.settle_pool(self.now)
            self.computing = True
            self.formed = True
        if self.formed and not self.enlisted_orphan_s > self.now:
            self.enlisted_orphan_s = self.now + self.detect_s

    def gone(self) -> None:
        """A worker left: absent; while a collective is pending, among those that ``settle_pool`` plays
        at the next outer boundary."""
        if not self.pooled or self.computing:
            self.absent += 1
        else:
            self.pool_since.append(self.now)

    def joiner_left(self, index: int, waiting_dl: int) -> None:
        """The ``index``-th present joiner leaves (in the order: not begun, in, in the collective in,
        in the collective not begun, in flight waiting, in flight in the collective)."""
        self.leaves += 1
        self.departed()
        self.gone()
        if index < self.unstarted:
            back = self.unstarted - index  # the dropped participants back come last among them
            self.unstarted -= 1
            if back <= len(self.dropped_back):
                self.dropped_again(back - 1)
            return
        index -= self.unstarted
        if index < self.loaded:
            self.loaded -= 1
            return
        index -= self.loaded
        if index < self.loaded_enlisted:
            share = (
                self.extension_s / self.loaded_enlisted
            )  # its download's row past the forming (on average)
            self.present += share
            self.extension_s -= share
            self.loaded_enlisted -= 1
            self.enlisted_left()
            return
        index -= self.loaded_enlisted
        if index < self.unstarted_enlisted:
            self.unstarted_enlisted -= 1
            self.enlisted_left()
            return
        index -= self.unstarted_enlisted
        enlisted = index >= waiting_dl
        self.cancel(index - waiting_dl if enlisted else index, enlisted)
        if enlisted:
            self.enlisted_left()

    def enlisted_left(self) -> None:
        """A joiner in the collective leaves: its wait since the collective formed has no row (its
        rows end where it joined the collective, or where its download did; a wasted row counts no
        presence); the ring in flight breaks, or goes on without it."""
        self.blocked_until_s = max(self.blocked_until_s, self.now + self.detect_s)
        self.participant_left()

    def dropped_again(self, which: int) -> None:
        """``partial``: a participant dropped from the ring in flight came back and leaves again: it is
        dropped again, the others waiting for its part until they notice; what it sent is what it had
        by its first departure."""
        self.dropped_members += 1
        self.hold_until_s = max(self.hold_until_s, self.now + self.detect_s)
        self.dropped_away.append(self.dropped_back.pop(which))

    def participant_left(self) -> None:
        """A participant of the collective leaves: the ring in flight breaks, or goes on without it."""
        if not self.ring_on:
            return
        if self.partial and self.member_count:
            self.dropped_members += 1
            self.hold_until_s = max(self.hold_until_s, self.now + self.detect_s)
            self.dropped_away.append(self.ring_bytes - self.ring_left)
        else:  # restart, or no member holding the state is left in it (``Churn.leave_collective``)
            self.waste_ring()
            self.ring_on = False
            self.dropped_away, self.dropped_back, self.hold_until_s = [], [], -math.inf
            self.rates()

    def dropped_bytes(self) -> list[float]:
        """``partial``: what each participant dropped from the ring in flight had sent."""
        return self.dropped_away + self.dropped_back

    def waste_ring(self) -> None:
        """The ring in flight is thrown away now (``Collectives.waste``): what every participant of the
        try sent in it, the dropped ones' by their departure, counts, and is wasted."""
        dropped = self.dropped_bytes()
        moved = self.ring_bytes - self.ring_left
        self.waste(sum(dropped) + (self.ring_participants - len(dropped)) * moved)

    def waste(self, sent: float) -> None:
        """Bytes moved and thrown away: sent all the same."""
        self.bytes_sent += sent
        self.wasted += sent

    def waste_download(self, progress: float, done_at: float, count: int) -> None:
        """``count`` downloads of a group that a holder's ``progress`` completes at ``done_at`` stop
        now: what each moved (``Churn.waste``)."""
        moved = min(self.weights_bytes, max(0.0, progress - (done_at - self.weights_bytes)))
        self.waste(count * moved)

    def cancel(self, index: int, enlisted: bool) -> None:
        """The ``index``-th download in flight (of those to joiners in the collective, or not) stops:
        what it moved is wasted."""
        for holder in self.holders:
            count = holder.enlisted if enlisted else holder.downloads - holder.enlisted
            if index >= count:
                index -= count
                continue
            for _, _, group in holder.groups:
                if group.enlisted != enlisted or index >= group.count:
                    index -= group.count if group.enlisted == enlisted else 0
                    continue
                holder.settle(self.now)
                self.waste_download(holder.progress, group.done_at, 1)
                self.drop_downloads(group, 1, enlisted)
                return
        raise AssertionError("no such download")

    def drop_downloads(self, group: Group, count: int, enlisted: bool) -> None:
        """``count`` downloads of ``group`` stop (their joiners left)."""
        group.count -= count
        group.source.downloads -= count
        self.in_flight -= count
        if enlisted:
            group.source.enlisted -= count
            self.in_flight_enlisted -= count
        self.touch(group.source)


def churn_times(island: IslandSpec) -> tuple[float, float]:
    """The island's mtbf_s and mttr_s: both set wherever the counts play (``why_not``)."""
    assert island.mtbf_s is not None and island.mttr_s is not None, (
        "the counts play churn that returns"
    )
    return island.mtbf_s, island.mttr_s
