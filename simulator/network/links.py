"""Links and the transfers that cross them: what each transfer carries over time, and token buckets.

Every island worker owns a full-duplex access link (an uplink and a downlink) to a non-blocking WAN
core. A *transfer* crosses a set of links and must push the same number of bytes through each of them
(a point-to-point copy crosses the sender's uplink and the receiver's downlink; a ring all-reduce
crosses every participant's uplink and downlink, see ``collectives.py``).

A transfer records its own rate over time (``Transfer.segments``): a link crossed k times by a
transfer carries k times its rate, and a link's rate is the sum over the transfers crossing it
(``link_segments``), from which plots and the peak bandwidth are drawn (``peak_access_rate``). A link
keeps its own total only where the network sums it (``network.FlowNetwork.settle_links``).

A link may be shaped by a token bucket (``island.burst_bytes``: tc tbf's ``burst``, a provider's burst
allowance): the bucket holds up to ``burst_bytes`` and refills at the link's spare rate (its capacity
less what it carries). A transfer that starts moving bytes sends at once what every one of its links'
buckets holds (``burst_at``), and the rest at the shared rates; transfers that start together share
a bucket's burst max-min fairly, whatever order they were started in (``take_bursts``). On the
emulated WAN the bucket is 64 KiB or more (``islands.emulation``): a tenth of a 0.15 s exchange at
33 Mbit/s. A burst is sent in no time, so the link table (rates over time) does not draw it; the
trace counts its bytes.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from operator import attrgetter

import simpy

NO_CAP = math.inf
CAPACITY = attrgetter("capacity_bytes_per_s")
# ``Transfer.done`` of a transfer that a fast path plays without a clock (its rate and segments set by
# hand): an event of an environment that never runs, so it never fires and nothing waits on it
UNCLOCKED = simpy.Environment().event()
FEW_LINKS = (
    4  # a transfer this short is walked link by link when filled; a longer one (a ring) is not
)


@dataclass(eq=False)
class Link:
    """One direction of a worker's access link."""

    worker: int
    direction: str  # "up" or "down"
    capacity_bytes_per_s: float
    rate_bytes_per_s: float = 0.0  # its total rate, as last summed (``FlowNetwork.settle_links``)
    peak_bytes_per_s: float = 0.0  # the most it carried at once while transfers shared it
    burst_bytes: float = 0.0  # token bucket depth (0: no bucket)
    tokens_bytes: float = -1.0  # what the bucket held at tokens_since_s; starts full
    tokens_since_s: float = 0.0

    def __post_init__(self) -> None:
        if self.tokens_bytes < 0:
            self.tokens_bytes = self.burst_bytes

    def tokens_at(self, now: float) -> float:
        """What the token bucket holds at ``now``: refilled at the spare rate since it was last settled."""
        spare = max(0.0, self.capacity_bytes_per_s - self.rate_bytes_per_s)
        return max(
            0.0,
            min(self.burst_bytes, self.tokens_bytes + spare * max(0.0, now - self.tokens_since_s)),
        )

    def carry(self, start_s: float, end_s: float, rate: float, burst_bytes: float) -> None:
        """Settle the bucket for a transfer that sends ``burst_bytes`` at once at ``start_s``, then moves
        at ``rate`` until ``end_s`` (the bucket refills at the spare rate meanwhile)."""
        left = self.tokens_at(start_s) - burst_bytes
        spare = max(0.0, self.capacity_bytes_per_s - rate)
        self.tokens_bytes = max(
            0.0, min(self.burst_bytes, left + spare * max(0.0, end_s - start_s))
        )
        self.tokens_since_s = end_s

    def set_rate(self, now: float, rate: float) -> None:
        """Carry ``rate`` in all from now (the token bucket settled at the old rate up to now)."""
        if self.burst_bytes:
            self.carry(now, now, self.rate_bytes_per_s, 0.0)
        self.rate_bytes_per_s = rate
        if rate > self.peak_bytes_per_s:
            self.peak_bytes_per_s = rate


@dataclass(eq=False)
class Transfer:
    """Bytes to push through every one of ``links``; ``done`` fires when they are through."""

    links: tuple[Link, ...]
    remaining_bytes: float
    done: simpy.Event
    cap_bytes_per_s: float = NO_CAP
    narrowest_bytes_per_s: float | None = (
        None  # its narrowest link's share, where the caller knows it
    )
    rate_bytes_per_s: float = 0.0
    active: bool = False  # moving bytes (latency paid)
    cancelled: bool = False
    end_s: float | None = None  # alpha-beta: when it ends
    marks: list[tuple[float, Callable[[], None]]] = field(
        default_factory=list
    )  # flow: (s before the end, action)
    rate_since_s: float = 0.0
    segments: list[tuple[float, float, float]] = field(
        default_factory=list
    )  # (start, end, rate): its rate over time
    peak_bytes_per_s: float = 0.0
    burst_bytes: float = 0.0  # what it sent at once from its links' token buckets
    # links it stopped crossing while it went on, and since when (a member dropped from a ring in
    # flight, ``network.on_departure = "partial"``: its links carry nothing after its departure)
    left_s: dict[Link, float] = field(default_factory=dict)

    @cached_property
    def counted(self) -> Counter[Link]:
        """Its crossings of each link (``crossings``)."""
        return crossings(self.links)

    @cached_property
    def distinct(self) -> bool:
        """Whether it crosses each of its links once (a ring within one region does)."""
        return len(set(self.links)) == len(self.links)

    @cached_property
    def alone_bytes_per_s(self) -> float:
        """Its rate alone on its links: its narrowest link's share (a link it crosses k times gives it
        1/k), at most its own cap."""
        if self.narrowest_bytes_per_s is not None:
            return min(self.narrowest_bytes_per_s, self.cap_bytes_per_s)
        if self.distinct:  # the narrowest link, without a loop in Python
            return min(min(map(CAPACITY, self.links)), self.cap_bytes_per_s)
        return min(
            min(link.capacity_bytes_per_s / count for link, count in self.counted.items()),
            self.cap_bytes_per_s,
        )

    @cached_property
    def repeated(self) -> dict[Link, int]:
        """The links it crosses more than once, and how many times (none for a distinct transfer)."""
        return (
            {}
            if self.distinct
            else {link: count for link, count in self.counted.items() if count > 1}
        )

    @cached_property
    def by_capacity(self) -> list[int]:
        """Its links' places, narrowest first, in listed order among equals (sorted once, in C)."""
        return sorted(range(len(self.links)), key=list(map(CAPACITY, self.links)).__getitem__)

    def position(self, link: Link) -> int:
        """Where ``link`` is first listed among its links."""
        return self.links.index(link)

    def narrowest_private(self, shared: dict[Link, list[int]]) -> tuple[float, int] | None:
        """Of the links it alone crosses, once (those not in ``shared``), and its cap (listed after
        them): the narrowest capacity and its place, the first listed among equals; None if none."""
        links = self.links
        place = next((place for place in self.by_capacity if links[place] not in shared), None)
        found = None if place is None else (links[place].capacity_bytes_per_s, place)
        if self.cap_bytes_per_s < NO_CAP and (found is None or self.cap_bytes_per_s < found[0]):
            found = (self.cap_bytes_per_s, len(links))
        return found

    def crossings_of(self, shared: dict[Link, list[int]]) -> list[Link]:
        """Its crossings of the ``shared`` links, once per crossing."""
        if len(shared) < len(self.links):
            counted = self.counted
            return [link for link in shared for _ in range(counted.get(link, 0))]
        return [link for link in self.links if link in shared]

    def set_rate(self, now: float, rate: float) -> None:
        """Close its current constant-rate segment and start a new one."""
        if rate == self.rate_bytes_per_s:
            return
        if self.rate_bytes_per_s > 0 and now > self.rate_since_s:
            self.segments.append((self.rate_since_s, now, self.rate_bytes_per_s))
        self.rate_bytes_per_s = rate
        self.rate_since_s = now
        if rate > self.peak_bytes_per_s:
            self.peak_bytes_per_s = rate

    def moved_bytes(self, now: float) -> float:
        """Bytes it pushed through each of its links up to ``now``: its burst, and its rate over its
        segments (the one still open, while it moves, up to ``now``)."""
        moved = self.burst_bytes
        for start, end, rate in self.segments:
            if now > start:
                moved += rate * (min(end, now) - start)
        if self.active and now > self.rate_since_s:
            moved += self.rate_bytes_per_s * (now - self.rate_since_s)
        return moved

    def leave(self, links: Iterable[Link], now: float) -> None:
        """``links`` carry nothing of it from ``now`` on (the first time they leave it counts)."""
        for link in links:
            self.left_s.setdefault(link, now)

    def most_access_crossings(self) -> int:
        """The most times it crosses one worker's access link (that link carries its rate that many times)."""
        if self.distinct:
            return int(any(link.worker >= 0 for link in self.links))
        return max((count for link, count in self.counted.items() if link.worker >= 0), default=0)


def crossings(links: tuple[Link, ...]) -> Counter[Link]:
    """How many times a transfer crosses each of its links (a ring may cross one backbone twice: it
    pushes its bytes through it twice)."""
    return Counter(links)


def burst_at(counted: Counter[Link], at_s: float, bytes_per_link: float) -> float:
    """Bytes a transfer starting to move at ``at_s`` may send at once: what every one of its links' token
    buckets holds then (shared among its crossings of a link); none if a link has no bucket."""
    if not counted or not all(link.burst_bytes for link in counted):
        return 0.0
    return min(bytes_per_link, *(link.tokens_at(at_s) / count for link, count in counted.items()))


def take_bursts(crossed: list[Counter[Link]], now: float, wanted_bytes: list[float]) -> list[float]:
    """The bursts of transfers that start moving together at ``now``, taken from their links' buckets.

    They share each bucket max-min fairly (progressive filling, as ``network.max_min_rates`` shares
    rates): every transfer's burst grows at one pace until a bucket it crosses runs dry (a transfer
    crossing a link k times draws k times its burst from it) or it has all it wants, so the split does
    not depend on the order they were started in. Alone, a transfer gets ``burst_at``."""
    eligible = [
        i
        for i, counted in enumerate(crossed)
        if counted and wanted_bytes[i] > 0 and all(link.burst_bytes for link in counted)
    ]
    tokens = {link: link.tokens_at(now) for i in eligible for link in crossed[i]}
    bursts = [0.0] * len(crossed)
    growing = eligible
    while growing:
        weight: Counter[Link] = Counter()
        for i in growing:
            weight.update(crossed[i])
        emptiest = min(weight, key=lambda link: tokens[link] / weight[link])
        nearest = min(growing, key=lambda i: wanted_bytes[i] - bursts[i])
        gap = wanted_bytes[nearest] - bursts[nearest]
        sated = gap <= tokens[emptiest] / weight[emptiest]
        step = gap if sated else tokens[emptiest] / weight[emptiest]
        for i in growing:
            bursts[i] += step
        for link, count in weight.items():
            tokens[link] = max(0.0, tokens[link] - step * count)
        if sated:  # the nearest has all it wants
            bursts[nearest] = wanted_bytes[nearest]
            growing = [i for i in growing if i != nearest]
        else:  # the emptiest bucket ran dry: whoever crosses it stops growing
            growing = [i for i in growing if emptiest not in crossed[i]]
    draw(crossed, bursts, now)
    return bursts


def draw(crossed: list[Counter[Link]], bursts: list[float], now: float) -> None:
    """Take each transfer's burst, once per crossing, from its links' buckets at ``now``."""
    taken: dict[Link, float] = {}
    for counted, burst in zip(crossed, bursts):
        if burst > 0:
            for link, count in counted.items():
                taken[link] = taken.get(link, 0) + burst * count
    for link, burst in taken.items():
        link.carry(now, now, link.rate_bytes_per_s, burst)


def link_segments(transfers: Iterable[Transfer]) -> Iterator[tuple[Link, float, float, float]]:
    """Every link's use, transfer by transfer: (link, start, end, rate), a link crossed k times by a
    transfer carrying k times its rate (where transfers overlap on a link, their rates add up), up
    to the moment the link left the transfer (``Transfer.left_s``)."""
    for transfer in transfers:
        left_s = transfer.left_s
        for link, count in transfer.counted.items():
            until_s = left_s.get(link, math.inf) if left_s else math.inf
            for start, end, rate in transfer.segments:
                if start < until_s:
                    yield link, start, min(end, until_s), rate * count


def peak_access_rate(transfers: Iterable[Transfer], links: Iterable[Link]) -> float:
    """The most any of ``links`` (workers' access links) carried at once: the most a transfer put on one
    (its peak rate, times its crossings), or a link's total while transfers shared it."""
    return max(
        [
            *(link.peak_bytes_per_s for link in links),
            *(
                t.peak_bytes_per_s * t.most_access_crossings()
                for t in transfers
                if t.peak_bytes_per_s
            ),
        ],
        default=0.0,
    )
