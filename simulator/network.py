"""The physics of the WAN: access links and the two network models that turn bytes into seconds.

Every island worker owns a full-duplex access link (an uplink and a downlink) to a non-blocking WAN
core. A *transfer* crosses a set of links and must push the same number of bytes through each of them
(a point-to-point copy crosses the sender's uplink and the receiver's downlink; a ring all-reduce
crosses every participant's uplink and downlink, see ``collectives.py``). A transfer first pays its
latency, then moves its bytes, at most at its own rate cap (TCP window / RTT, see ``collectives.py``).

Two models sit behind one interface, ``transfer(links, bytes_per_link, latency_s, cap) -> Transfer``
and ``cancel(transfer)``:

* ``AlphaBetaNetwork``: the closed form. A transfer alone takes latency + bytes / min(slowest link's
  capacity, cap). It ignores other transfers, so it is exact only when nothing shares a link; it is
  the fast path for blocking schedules.
* ``FlowNetwork``: flow-level max-min fair sharing (progressive filling, as in SimGrid's flow models):
  whenever a transfer starts or ends, every link's capacity is divided max-min fairly among the
  transfers crossing it, so two transfers in flight on one link each get half of it.

Both record each link's rate over time, from which plots and the peak bandwidth are drawn.

A link may be shaped by a token bucket (``island.burst_bytes``: tc tbf's ``burst``, a provider's burst
allowance): the bucket holds up to ``burst_bytes`` and refills at the link's spare rate (its capacity
less what it carries). A transfer that starts moving bytes sends at once what every one of its links'
buckets holds (``take_burst``), and the rest at the shared rates. On the emulated WAN the bucket is
64 KiB or more (``islands.emulation``): a tenth of a 0.15 s exchange at 33 Mbit/s. A burst is sent in
no time, so the link table (rates over time) does not draw it; the trace counts its bytes.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

import simpy

# A transfer whose remaining time is below this fraction of the clock (at least 1 ns) is complete: it
# absorbs floating-point residue, which must stay above the clock's resolution, or a wake-up scheduled
# "a residue later" lands on the same instant forever.
COMPLETION_TOLERANCE = 1e-9
NO_CAP = math.inf


@dataclass(eq=False)
class Link:
    """One direction of a worker's access link."""

    worker: int
    direction: str  # "up" or "down"
    capacity_bytes_per_s: float
    rate_bytes_per_s: float = 0.0
    rate_since_s: float = 0.0
    segments: list[tuple[float, float, float]] = field(default_factory=list)
    peak_bytes_per_s: float = 0.0
    burst_bytes: float = 0.0    # token bucket depth (0: no bucket)
    tokens_bytes: float = -1.0  # what the bucket held at tokens_since_s; starts full
    tokens_since_s: float = 0.0

    def __post_init__(self) -> None:
        if self.tokens_bytes < 0:
            self.tokens_bytes = self.burst_bytes

    def tokens_at(self, now: float) -> float:
        """What the token bucket holds at ``now``: refilled at the spare rate since it was last settled."""
        spare = max(0.0, self.capacity_bytes_per_s - self.rate_bytes_per_s)
        return max(0.0, min(self.burst_bytes, self.tokens_bytes + spare * max(0.0, now - self.tokens_since_s)))

    def carry(self, start_s: float, end_s: float, rate: float, burst_bytes: float) -> None:
        """Settle the bucket for a transfer that sends ``burst_bytes`` at once at ``start_s``, then moves
        at ``rate`` until ``end_s`` (the bucket refills at the spare rate meanwhile)."""
        left = self.tokens_at(start_s) - burst_bytes
        spare = max(0.0, self.capacity_bytes_per_s - rate)
        self.tokens_bytes = max(0.0, min(self.burst_bytes, left + spare * max(0.0, end_s - start_s)))
        self.tokens_since_s = end_s

    def set_rate(self, now: float, rate: float) -> None:
        """Close the current constant-rate segment and start a new one."""
        if abs(rate - self.rate_bytes_per_s) <= 1e-12 * self.capacity_bytes_per_s:
            return
        if self.burst_bytes:
            self.carry(now, now, self.rate_bytes_per_s, 0.0)
        if self.rate_bytes_per_s > 0 and now > self.rate_since_s:
            self.segments.append((self.rate_since_s, now, self.rate_bytes_per_s))
        self.rate_bytes_per_s = rate
        self.rate_since_s = now
        if rate > self.peak_bytes_per_s:
            self.peak_bytes_per_s = rate


@dataclass(eq=False)
class Transfer:
    """Bytes to push through every one of ``links``; ``done`` fires when they are through."""

    links: tuple[Link, ...]
    remaining_bytes: float
    done: simpy.Event
    cap_bytes_per_s: float = NO_CAP
    rate_bytes_per_s: float = 0.0
    active: bool = False      # moving bytes (latency paid)
    cancelled: bool = False
    recorded: list[tuple[Link, int]] = field(default_factory=list)  # alpha-beta: its link segments
    end_s: float | None = None  # alpha-beta: when it ends
    marks: list[tuple[float, Callable[[], None]]] = field(default_factory=list)  # flow: (s before the end, action)
    counted: Counter[Link] = field(init=False)  # its crossings of each link (``crossings``)

    def __post_init__(self) -> None:
        self.counted = crossings(self.links)


def crossings(links: tuple[Link, ...]) -> Counter[Link]:
    """How many times a transfer crosses each of its links (a ring may cross one backbone twice: it
    pushes its bytes through it twice)."""
    return Counter(links)


def alone_rate(counted: Counter[Link], cap_bytes_per_s: float) -> float:
    """The rate of a transfer alone on its links: its narrowest link's share (a link it crosses k times
    gives it 1/k), at most its own cap."""
    return min(min(link.capacity_bytes_per_s / count for link, count in counted.items()), cap_bytes_per_s)


def burst_at(counted: Counter[Link], at_s: float, bytes_per_link: float) -> float:
    """Bytes a transfer starting to move at ``at_s`` may send at once: what every one of its links' token
    buckets holds then (shared among its crossings of a link); none if a link has no bucket."""
    if not counted or not all(link.burst_bytes for link in counted):
        return 0.0
    return min(bytes_per_link, *(link.tokens_at(at_s) / count for link, count in counted.items()))


def take_burst(counted: Counter[Link], now: float, bytes_per_link: float) -> float:
    """``burst_at`` now, taken from every link's bucket."""
    burst = burst_at(counted, now, bytes_per_link)
    if burst > 0:
        for link, count in counted.items():
            link.carry(now, now, link.rate_bytes_per_s, burst * count)
    return burst


class AlphaBetaNetwork:
    """Closed form: latency + bytes / min(capacity, cap); exact when transfers do not share links."""

    name = "alpha-beta"

    def __init__(self, env: simpy.Environment):
        self.env = env

    def transfer(self, links: tuple[Link, ...], bytes_per_link: float, latency_s: float,
                 cap_bytes_per_s: float = NO_CAP) -> Transfer:
        handle = Transfer(links, bytes_per_link, self.env.event(), cap_bytes_per_s)
        counted = handle.counted
        handle.rate_bytes_per_s = rate = alone_rate(counted, cap_bytes_per_s)
        data_start = self.env.now + latency_s
        burst = burst_at(counted, data_start, bytes_per_link)
        data_end = data_start + (bytes_per_link - burst) / rate
        for link, count in counted.items():
            if link.burst_bytes:
                link.carry(data_start, data_end, rate * count, burst * count)
            handle.recorded.append((link, len(link.segments)))
            link.segments.append((data_start, data_end, rate * count))
            link.peak_bytes_per_s = max(link.peak_bytes_per_s, rate * count)
        handle.end_s = data_end
        timer = self.env.timeout(data_end - self.env.now)
        timer.callbacks.append(lambda _event: None if handle.cancelled else handle.done.succeed())
        return handle

    def before_end(self, handle: Transfer, offset_s: float, action: Callable[[], None]) -> None:
        """Run ``action`` ``offset_s`` before the transfer ends (now, if that is past), unless it is
        cancelled first."""
        timer = self.env.timeout(max(0.0, handle.end_s - offset_s - self.env.now))
        timer.callbacks.append(lambda _event: None if handle.cancelled else action())

    def cancel(self, handle: Transfer) -> None:
        """Stop a transfer now: its links' recorded use ends here and ``done`` never fires."""
        handle.cancelled = True
        for link, index in handle.recorded:
            start, end, rate = link.segments[index]
            link.segments[index] = (start, max(start, min(end, self.env.now)), rate)


class FlowNetwork:
    """Flow-level model: concurrent transfers share every link max-min fairly."""

    name = "flow"

    def __init__(self, env: simpy.Environment):
        self.env = env
        self.flows: list[Transfer] = []
        self.last_update_s = 0.0
        self.wakeup_generation = 0

    def transfer(self, links: tuple[Link, ...], bytes_per_link: float, latency_s: float,
                 cap_bytes_per_s: float = NO_CAP) -> Transfer:
        handle = Transfer(links, bytes_per_link, self.env.event(), cap_bytes_per_s)
        if latency_s > 0:
            self.env.timeout(latency_s).callbacks.append(lambda _event: self.add(handle))
        else:
            self.add(handle)
        return handle

    def before_end(self, handle: Transfer, offset_s: float, action: Callable[[], None]) -> None:
        """Run ``action`` when the transfer, at the rates of the moment, is ``offset_s`` from its end
        (at once if it is nearer), unless it is cancelled first; rates that change later move it."""
        if handle.done.triggered:
            self.env.timeout(0).callbacks.append(lambda _event: action())
            return
        handle.marks.append((offset_s, action))
        if handle.active:
            self.advance()
            self.schedule_wakeup()

    def cancel(self, handle: Transfer) -> None:
        handle.cancelled = True
        if handle.active:
            self.advance()
            self.flows.remove(handle)
            handle.active = False
            for link in handle.links:
                link.set_rate(self.env.now, 0.0)
            self.reallocate()

    def add(self, handle: Transfer) -> None:
        if handle.cancelled:
            return
        self.advance()
        handle.remaining_bytes -= take_burst(handle.counted, self.env.now, handle.remaining_bytes)
        if handle.remaining_bytes <= 0:
            for _, action in handle.marks:
                action()
            handle.done.succeed()
            return
        handle.active = True
        self.flows.append(handle)
        self.reallocate()

    def advance(self) -> None:
        """Move every flow forward at its current rate up to now."""
        elapsed = self.env.now - self.last_update_s
        if elapsed > 0:
            for flow in self.flows:
                flow.remaining_bytes -= flow.rate_bytes_per_s * elapsed
        self.last_update_s = self.env.now

    def reallocate(self) -> None:
        touched = {link for flow in self.flows for link in flow.links}
        rates = max_min_rates(self.flows)
        now = self.env.now
        link_rates = dict.fromkeys(touched, 0.0)
        for flow, rate in zip(self.flows, rates):
            flow.rate_bytes_per_s = rate
            for link in flow.links:
                link_rates[link] += rate
        for link, rate in link_rates.items():
            link.set_rate(now, rate)
        self.schedule_wakeup()

    def schedule_wakeup(self) -> None:
        self.wakeup_generation += 1
        if not self.flows:
            return
        next_s = min(min([left_s, *(left_s - offset_s for offset_s, _ in flow.marks)])
                     for flow, left_s in ((f, f.remaining_bytes / f.rate_bytes_per_s) for f in self.flows))
        generation = self.wakeup_generation
        timer = self.env.timeout(max(next_s, 0.0))
        timer.callbacks.append(lambda _event: self.on_wakeup(generation))

    def on_wakeup(self, generation: int) -> None:
        if generation != self.wakeup_generation:
            return
        self.advance()
        tolerance_s = COMPLETION_TOLERANCE * max(1.0, self.env.now)
        due = [(flow, mark) for flow in self.flows for mark in flow.marks
               if flow.remaining_bytes <= flow.rate_bytes_per_s * (mark[0] + tolerance_s)]
        for flow, mark in due:
            flow.marks.remove(mark)
        finished = [f for f in self.flows if f.remaining_bytes <= f.rate_bytes_per_s * tolerance_s]
        self.flows = [f for f in self.flows if f not in finished]
        for flow in finished:
            flow.active = False
            for link in flow.links:
                link.set_rate(self.env.now, 0.0)
        self.reallocate()
        for _, (_, action) in due:
            action()
        for flow in finished:
            flow.done.succeed()


def max_min_rates(flows: list[Transfer]) -> list[float]:
    """Max-min fair rates by progressive filling.

    Repeatedly find the link whose remaining capacity divided by its unfrozen flows is smallest,
    freeze those flows at that share and subtract it from every link they cross (Bertsekas &
    Gallager, Data Networks, section 6.5.2). A flow's own rate cap acts as a private link. A flow
    alone needs no filling (``alone_rate``).
    """
    if len(flows) == 1:
        return [alone_rate(flows[0].counted, flows[0].cap_bytes_per_s)]
    capacity: dict[object, float] = {}
    crossing: dict[object, list[int]] = {}
    for index, flow in enumerate(flows):
        for link in flow.links:
            capacity[link] = link.capacity_bytes_per_s
            crossing.setdefault(link, []).append(index)
        if flow.cap_bytes_per_s < NO_CAP:
            capacity[("cap", index)] = flow.cap_bytes_per_s
            crossing[("cap", index)] = [index]
    unfrozen = {link: len(members) for link, members in crossing.items()}
    rates = [0.0] * len(flows)
    frozen = [False] * len(flows)
    while unfrozen:
        bottleneck = min(unfrozen, key=lambda link: capacity[link] / unfrozen[link])
        share = capacity[bottleneck] / unfrozen[bottleneck]
        for index in crossing[bottleneck]:
            if frozen[index]:
                continue
            frozen[index] = True
            rates[index] = share
            private = [("cap", index)] if ("cap", index) in capacity else []
            for link in [*flows[index].links, *private]:
                capacity[link] -= share
                unfrozen[link] -= 1
                if unfrozen[link] == 0:
                    del unfrozen[link]
    return rates


def make_network(model: str, env: simpy.Environment) -> AlphaBetaNetwork | FlowNetwork:
    return {"alpha-beta": AlphaBetaNetwork, "flow": FlowNetwork}[model](env)
