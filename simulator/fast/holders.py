"""What the counts follow of the network (``counts.py``): the holders that joiners download the weights
from, which holder each new download goes to, the groups of downloads begun together, and the max-min
fair rates of the ring and of the downloads over the links that carry more than one flow (see
``returning.py`` for the rules)."""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

from islands.schedules import serving

RING = (
    -1
)  # the ring's key among the flows (a holder's downloads are keyed by its place in the loads)


def fill(
    capacity: float, ring_on: bool, loads: list[tuple[int, int, int]]
) -> dict[int, float | None]:
    """Each flow's max-min fair rate by progressive filling (``network.max_min_rates``), every link of
    ``capacity``: the ring (if on) and each holder's downloads ``(holder, downloads, downloads to
    joiners in the ring)``. Every holder is a member, in the ring while it runs (``returning.py``). The
    links that may bind: a holder's uplink (its downloads and the ring), a joiner's downlink in the
    ring (the ring and its download), and each flow's own links (None: a flow no link binds). The
    reference that ``fill_closed`` (the one the counts use) is checked against."""
    ring = len(loads)  # the flows by place: each holder's downloads, then the ring
    links: list[tuple[tuple[int, int], ...]] = []  # each link's (flow, crossings)
    for place, (_, downloads, in_ring_joiners) in enumerate(loads):
        links.append(((place, downloads), (ring, 1)) if ring_on else ((place, downloads),))
        if ring_on and in_ring_joiners:
            links.append(((place, 1), (ring, 1)))
        links.append(((place, 1),))
    if ring_on:
        links.append(((ring, 1),))
    rates: list[float | None] = [None] * (ring + 1)
    while True:
        level, binding = math.inf, None
        for link in links:
            unfrozen, used = 0, 0.0
            for flow, count in link:
                rate = rates[flow]
                if rate is None:
                    unfrozen += count
                else:
                    used += count * rate
            if unfrozen and (capacity - used) / unfrozen < level:
                level, binding = (capacity - used) / unfrozen, link
        if binding is None:  # no link binds a flow still unfrozen: what is frozen has its rate
            filled = {load[0]: rate for load, rate in zip(loads, rates)}
            if ring_on:
                filled[RING] = rates[ring]
            return filled
        for flow, _ in binding:
            if rates[flow] is None:
                rates[flow] = level


def fill_closed(capacity: float, ring_on: bool, downloads: list[int]) -> dict[int, float]:
    """``fill`` in closed form, holders numbered by their place in ``downloads`` (each with one at
    least): see ``closed_rates``."""
    ring, left = closed_rates(capacity, ring_on, max(downloads, default=0))
    filled = {place: left / count for place, count in enumerate(downloads)}
    if ring_on:
        filled[RING] = ring
    return filled


def closed_rates(capacity: float, ring_on: bool, most: int) -> tuple[float, float]:
    """The ring's rate and what each holder's downloads share of its uplink, ``most`` the downloads
    of the holder sending the most: the ring takes C / (most + 1) on that holder's uplink, and each
    holder's downloads share what the ring leaves of its uplink (all of it out of a ring), so a
    holder's n downloads each get that / n. A joiner's downlink never binds: the ring and its
    download take at most C / (n + 1) + (C - C / (n + 1)) / n <= C."""
    ring = capacity / (most + 1)
    return ring, capacity - ring if ring_on else capacity


def assign(loads: list[int], idle: int, count: int) -> list[int]:
    """Where ``count`` downloads that begin together go, one after the other: ``serving.fastest`` over
    links alike, so to the holder sending the fewest (rate C / (n + 1)), ties to the lower number (no
    latency here). ``loads``: the holders' downloads, by number; ``idle``: the members sending none
    besides them, numbered after them. Returns the downloads each takes: the holders', then those of
    the idle members that take any (new holders), in the order of their numbers."""
    taken = [0] * (len(loads) + idle)
    heap = [(load, place) for place, load in enumerate(loads)]
    heapq.heapify(heap)
    new = 0
    for _ in range(count):
        if new < idle and (not heap or heap[0][0] > 0):  # an idle member gives C / 1
            load, place = 0, len(loads) + new
            new += 1
        else:
            load, place = heapq.heappop(heap)
        taken[place] += 1
        heapq.heappush(heap, (load + 1, place))
    return taken[: len(loads) + new]


def fastest_one_by_one(loads: list[int], idle: int, count: int, capacity: float) -> list[int]:
    """``assign`` by ``serving.fastest`` itself, one download at a time (the reference a test checks
    ``assign`` against)."""
    sending = list(loads) + [0] * idle
    for _ in range(count):
        chosen = serving.fastest(
            (serving.Holder(number, capacity, load, 0.0) for number, load in enumerate(sending)),
            capacity,
        )
        assert chosen is not None, "a member is there to send"
        sending[chosen.rank] += 1
    taken = [now - before for now, before in zip(sending, list(loads) + [0] * idle)]
    return taken[: len(loads)] + [extra for extra in taken[len(loads) :] if extra]


@dataclass(eq=False)
class Group:
    """Joiners whose downloads began together from one holder (``source``), all in the collective
    (``enlisted``) or all waiting for the next; the downloads are in once the source's progress
    reaches ``done_at``."""

    source: Holder
    done_at: float
    count: int
    enlisted: bool = False


@dataclass(eq=False)
class Holder:
    """A member that joiners download the weights from, followed on its own while it sends: the order it
    became one in (``number``, the counts' rank), and its downloads. It is in every ring that runs
    while it sends: a download begins only while the members compute, and a holder that leaves takes
    its downloads with it (they begin again from another, ``Counts.holder_left``)."""

    number: int
    progress: float = (
        0.0  # bytes each of its downloads has moved since it began sending, by settled_s
    )
    settled_s: float = 0.0
    rate: float = 0.0  # of each of its downloads, since settled_s
    groups: list[tuple[float, int, Group]] = field(default_factory=list)  # a heap by done_at
    downloads: int = 0
    enlisted: int = 0  # downloads to joiners in the collective
    following: bool = True  # the counts follow it (it sends, or has not been pruned yet)
    timing: int = (
        0  # the count of times its first download's end was timed (older timings are stale)
    )

    def settle(self, now_s: float) -> None:
        """Count its progress up to ``now_s``: the rate holds until its downloads or the ring change, so
        the progress is counted only where it is read or the rate changes, not at every step."""
        self.progress += self.rate * (now_s - self.settled_s)
        self.settled_s = now_s
