"""The two network models that turn bytes into seconds (the links and transfers: ``links.py``).

A transfer first pays its latency, then moves its bytes, at most at its own rate cap (TCP window /
RTT, see ``collectives.py``). Two models sit behind one interface, ``transfer(links, bytes_per_link,
latency_s, cap) -> Transfer`` and ``cancel(transfer)``:

* ``AlphaBetaNetwork``: the closed form. A transfer alone takes latency + bytes / min(slowest link's
  capacity, cap). It ignores other transfers, so it is exact only when nothing shares a link; it is
  the fast path for blocking schedules.
* ``FlowNetwork``: flow-level max-min fair sharing (progressive filling, as in SimGrid's flow models):
  whenever a transfer starts or ends, every link's capacity is divided max-min fairly among the
  transfers crossing it, so two transfers in flight on one link each get half of it.

The flow model shares links only when transfers meet on one: while the transfers in flight cross
disjoint links, each moves at its rate alone, and no link is visited (a ring of M workers crosses 2M
links: under churn its restarts would otherwise cost M each). When they meet, only the links crossed
more than once are filled one by one and summed (``shared_links``): a link one transfer crosses once
only bounds that transfer, by its narrowest such link, and carries its rate, whose peak the transfer
keeps; a ring's 2M links are never walked while a joiner's download shares one of them. Where a
link's own total matters at every change (a token bucket's refill), the network fills and sums every
link at every change (``tracks_links``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import simpy

from islands.scenarios import Scenario
from islands.schedules import schedule_of

from .links import FEW_LINKS, NO_CAP, Link, Transfer, burst_at, take_bursts

# A transfer whose remaining time is below this fraction of the clock (at least 1 ns) is complete: it
# absorbs floating-point residue, which must stay above the clock's resolution, or a wake-up scheduled
# "a residue later" lands on the same instant forever.
COMPLETION_TOLERANCE = 1e-9


def network_model_for(scenario: Scenario) -> str:
    """The scenario's network model; ``auto`` takes the flow model where transfers may share links."""
    if scenario.network.model != "auto":
        return scenario.network.model
    overlap = (
        schedule_of(scenario).transfers_may_overlap(scenario.schedule)
        or scenario.has_churn()
        or scenario.has_failures()
        or scenario.network.collective == "tree"
    )
    return "flow" if overlap or scenario.schedule.barrier == "deadline" else "alpha-beta"


class AlphaBetaNetwork:
    """Closed form: latency + bytes / min(capacity, cap); exact when transfers do not share links.

    ``tracks_links``: some link has a token bucket (its transfers settle it).
    """

    name = "alpha-beta"

    def __init__(self, env: simpy.Environment, tracks_links: bool = True):
        self.env = env
        self.tracks_links = tracks_links
        self.carried: list[Transfer] = []

    def transfer(
        self,
        links: tuple[Link, ...],
        bytes_per_link: float,
        latency_s: float,
        cap_bytes_per_s: float = NO_CAP,
        narrowest_bytes_per_s: float | None = None,
    ) -> Transfer:
        handle = Transfer(
            links, bytes_per_link, self.env.event(), cap_bytes_per_s, narrowest_bytes_per_s
        )
        handle.rate_bytes_per_s = rate = handle.peak_bytes_per_s = handle.alone_bytes_per_s
        data_start = self.env.now + latency_s
        burst = burst_at(handle.counted, data_start, bytes_per_link) if self.tracks_links else 0.0
        handle.burst_bytes = burst
        data_end = data_start + (bytes_per_link - burst) / rate
        if self.tracks_links:
            for link, count in handle.counted.items():
                if link.burst_bytes:
                    link.carry(data_start, data_end, rate * count, burst * count)
        handle.segments.append((data_start, data_end, rate))
        self.carried.append(handle)
        handle.end_s = data_end
        timer = self.env.timeout(data_end - self.env.now)

        def end(_event: simpy.Event) -> None:
            if not handle.cancelled:
                handle.done.succeed()

        timer.callbacks.append(end)
        return handle

    def before_end(self, handle: Transfer, offset_s: float, action: Callable[[], None]) -> None:
        """Run ``action`` ``offset_s`` before the transfer ends (now, if that is past), unless it is
        cancelled first."""
        assert handle.end_s is not None, (
            "an alpha-beta transfer knows its end from its start (transfer)"
        )
        timer = self.env.timeout(max(0.0, handle.end_s - offset_s - self.env.now))
        timer.callbacks.append(lambda _event: None if handle.cancelled else action())

    def cancel(self, handle: Transfer) -> None:
        """Stop a transfer now: its recorded rate ends here and ``done`` never fires."""
        handle.cancelled = True
        start, end, rate = handle.segments[0]
        handle.segments[0] = (start, max(start, min(end, self.env.now)), rate)

    def close(self) -> None:
        """The run is over: a transfer still in flight carried its rate up to now, not to the end its
        segment was given when it started."""
        now = self.env.now
        for handle in self.carried:
            start, end, rate = handle.segments[0]
            if end > now and not handle.cancelled:
                handle.segments[0] = (start, max(start, now), rate)


class FlowNetwork:
    """Flow-level model: concurrent transfers share every link max-min fairly.

    ``tracks_links``: some link has a token bucket, so the rates are filled and every link's total
    summed at every change (``settle_links``); otherwise only while transfers share a link.
    """

    name = "flow"

    def __init__(self, env: simpy.Environment, tracks_links: bool = True):
        self.env = env
        self.tracks_links = tracks_links
        self.flows: list[Transfer] = []
        self.carried: list[
            Transfer
        ] = []  # every transfer that moved bytes at a rate, in start order
        self.loaded: list[
            Link
        ] = []  # the links that carried something at the last ``settle_links``
        self.starting: list[
            Transfer
        ] = []  # transfers to start together at this instant (token buckets)
        self.last_update_s = 0.0
        self.wakeup_generation = 0

    def transfer(
        self,
        links: tuple[Link, ...],
        bytes_per_link: float,
        latency_s: float,
        cap_bytes_per_s: float = NO_CAP,
        narrowest_bytes_per_s: float | None = None,
    ) -> Transfer:
        handle = Transfer(
            links, bytes_per_link, self.env.event(), cap_bytes_per_s, narrowest_bytes_per_s
        )
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
            self.stop(handle)
            self.reallocate()

    def stop(self, flow: Transfer) -> None:
        flow.active = False
        flow.set_rate(self.env.now, 0.0)

    def close(self) -> None:
        """The run is over: every transfer still in flight has its rate recorded up to now."""
        self.advance()
        for flow in self.flows:
            flow.set_rate(self.env.now, 0.0)

    def add(self, handle: Transfer) -> None:
        """Start moving ``handle``'s bytes now. A transfer whose links all have token buckets starts with
        the others that reach them at this instant, once the events already due now have run, so that
        they share the buckets' bursts whatever order they came in (``links.take_bursts``)."""
        if not (self.tracks_links and all(link.burst_bytes for link in handle.counted)):
            self.start([handle])
            return
        self.starting.append(handle)
        if len(self.starting) == 1:
            self.env.timeout(0).callbacks.append(lambda _event: self.start(self.take_starting()))

    def take_starting(self) -> list[Transfer]:
        starting, self.starting = self.starting, []
        return starting

    def start(self, handles: list[Transfer]) -> None:
        handles = [handle for handle in handles if not handle.cancelled]
        if not handles:
            return
        self.advance()
        if self.tracks_links:
            bursts = take_bursts(
                [h.counted for h in handles], self.env.now, [h.remaining_bytes for h in handles]
            )
            for handle, burst in zip(handles, bursts):
                handle.remaining_bytes -= burst
                handle.burst_bytes = burst
        moving = [handle for handle in handles if handle.remaining_bytes > 0]
        for handle in moving:
            self.begin(handle)
        if moving:
            self.reallocate()
        for handle in handles:
            if handle.remaining_bytes <= 0:  # its burst carried it all: it ends now
                for _, action in handle.marks:
                    action()
                handle.done.succeed()

    def begin(self, handle: Transfer) -> None:
        """Start moving ``handle``'s remaining bytes at a shared rate."""
        handle.active = True
        handle.rate_since_s = self.env.now
        self.flows.append(handle)
        self.carried.append(handle)

    def advance(self) -> None:
        """Move every flow forward at its current rate up to now."""
        elapsed = self.env.now - self.last_update_s
        if elapsed > 0:
            for flow in self.flows:
                flow.remaining_bytes -= flow.rate_bytes_per_s * elapsed
        self.last_update_s = self.env.now

    def reallocate(self) -> None:
        """Every flow's max-min fair rate from now: its rate alone while no two flows share a link (or,
        where links are tracked, by progressive filling at every change)."""
        now, flows = self.env.now, self.flows
        if self.tracks_links:
            rates = max_min_rates(flows)
        else:
            shared = shared_links(flows) if len(flows) > 1 else {}
            sharing = any(crossing[0] != crossing[-1] for crossing in shared.values())
            rates = (
                max_min_rates(flows, shared)
                if sharing
                else [flow.alone_bytes_per_s for flow in flows]
            )
        for flow, rate in zip(flows, rates):
            flow.set_rate(now, rate)
        if self.tracks_links:
            self.settle_links(now)
        elif sharing:
            settle_shared(flows, shared, now)
        self.schedule_wakeup()

    def settle_links(self, now: float) -> None:
        """Sum every loaded link's rate now: its peak, and the spare rate that refills its token bucket."""
        totals = dict.fromkeys(self.loaded, 0.0)
        for flow in self.flows:
            rate = flow.rate_bytes_per_s
            for link in flow.links:
                totals[link] = totals.get(link, 0.0) + rate
        for link, total in totals.items():
            link.set_rate(now, total)
        self.loaded = [link for link, total in totals.items() if total > 0]

    def schedule_wakeup(self) -> None:
        self.wakeup_generation += 1
        if not self.flows:
            return
        next_s = math.inf
        for (
            flow
        ) in self.flows:  # the nearest end, or mark before an end, at the rates of the moment
            left_s = flow.remaining_bytes / flow.rate_bytes_per_s
            if flow.marks:
                left_s = min([left_s, *(left_s - offset_s for offset_s, _ in flow.marks)])
            if left_s < next_s:
                next_s = left_s
        generation = self.wakeup_generation
        timer = self.env.timeout(max(next_s, 0.0))
        timer.callbacks.append(lambda _event: self.on_wakeup(generation))

    def on_wakeup(self, generation: int) -> None:
        if generation != self.wakeup_generation:
            return
        self.advance()
        tolerance_s = COMPLETION_TOLERANCE * max(1.0, self.env.now)
        due = [
            (flow, mark)
            for flow in self.flows
            for mark in flow.marks
            if flow.remaining_bytes <= flow.rate_bytes_per_s * (mark[0] + tolerance_s)
        ]
        for flow, mark in due:
            flow.marks.remove(mark)
        finished = [f for f in self.flows if f.remaining_bytes <= f.rate_bytes_per_s * tolerance_s]
        self.flows = [f for f in self.flows if f not in finished]
        for flow in finished:
            self.stop(flow)
        self.reallocate()
        for _, (_, action) in due:
            action()
        for flow in finished:
            flow.done.succeed()


def settle_shared(flows: list[Transfer], shared: dict[Link, list[int]], now: float) -> None:
    """Without token buckets a link's total matters only for its peak, and a link that one flow
    crosses once carries that flow's rate, whose own peak counts (``links.peak_access_rate``): sum
    the ``shared`` links alone, flow by flow as ``FlowNetwork.settle_links`` sums them."""
    for link, crossing in shared.items():
        total = 0.0
        for index in crossing:
            total += flows[index].rate_bytes_per_s
        link.set_rate(now, total)


def shared_links(flows: list[Transfer]) -> dict[Link, list[int]]:
    """The links crossed more than once in all (by two flows, or twice by one), each with the indices
    of the flows crossing it, once per crossing, in flow order. The flow with the most links (a ring
    of M workers crosses 2M) is never walked: the others' links are looked up in its counts."""
    if len(flows) < 2:
        alone = flows[0] if flows else None
        return {link: [0] * count for link, count in alone.repeated.items()} if alone else {}
    sizes = [len(flow.links) for flow in flows]
    widest = sizes.index(max(sizes))
    wide = flows[widest].counted
    met: dict[Link, list[int]] = {}
    for index, flow in enumerate(flows):
        if index == widest:
            continue
        if sizes[index] <= FEW_LINKS:  # a copy: its links in order (a link listed twice, twice)
            for link in flow.links:
                met.setdefault(link, []).append(index)
        else:
            for link, count in flow.counted.items():
                met.setdefault(link, []).extend([index] * count)
    shared: dict[Link, list[int]] = {}
    for link, crossing in met.items():
        count = wide.get(link, 0)
        if count or len(crossing) > 1:
            shared[link] = sorted(crossing + [widest] * count) if count else crossing
    for link, count in flows[widest].repeated.items():
        shared.setdefault(link, sorted(met.get(link, []) + [widest] * count))
    return shared


def few_links_private(
    flow: Transfer, shared: dict[Link, list[int]]
) -> tuple[tuple[float, int] | None, list[Link]]:
    """``Transfer.narrowest_private`` and ``Transfer.crossings_of`` of a copy, in one walk of its few links."""
    found: tuple[float, int] | None = None
    crossed = []
    for place, link in enumerate(flow.links):
        if link in shared:
            crossed.append(link)
        elif found is None or link.capacity_bytes_per_s < found[0]:
            found = (link.capacity_bytes_per_s, place)
    if flow.cap_bytes_per_s < NO_CAP and (found is None or flow.cap_bytes_per_s < found[0]):
        found = (flow.cap_bytes_per_s, len(flow.links))
    return found, crossed


def max_min_rates(
    flows: list[Transfer], shared: dict[Link, list[int]] | None = None
) -> list[float]:
    """Max-min fair rates by progressive filling.

    Repeatedly find the link whose remaining capacity divided by its unfrozen flows is smallest,
    freeze those flows at that share and subtract it from every link they cross (Bertsekas &
    Gallager, Data Networks, section 6.5.2). A flow's own rate cap acts as a private link. A flow
    alone needs no filling (``Transfer.alone_bytes_per_s``).

    Only the links crossed more than once (``shared_links``) are filled one by one: a link that one
    flow crosses once keeps its capacity until that flow is frozen, so of a flow's private links (its
    cap included) only the narrowest can be the bottleneck, the first of them in the order the links
    are listed where several are as narrow (``Transfer.narrowest_private``). Ties between links are
    broken by that order, flow by flow, as a walk over every link would break them.
    """
    if len(flows) == 1:
        return [flows[0].alone_bytes_per_s]
    if shared is None:
        shared = shared_links(flows)
    capacity = {link: link.capacity_bytes_per_s for link in shared}
    unfrozen = {link: len(crossing) for link, crossing in shared.items()}
    place = {
        link: (crossing[0], flows[crossing[0]].position(link)) for link, crossing in shared.items()
    }
    private: dict[
        int, tuple[float, int, int]
    ] = {}  # flow index: (narrowest private capacity, index, place)
    crossed: list[list[Link] | None] = [None] * len(flows)  # a copy's crossings of shared links
    for index, flow in enumerate(flows):
        if len(flow.links) <= FEW_LINKS:
            own, crossed[index] = few_links_private(flow, shared)
        else:
            own = flow.narrowest_private(shared)
        if own is not None:
            private[index] = (own[0], index, own[1])
    rates = [0.0] * len(flows)
    frozen = [False] * len(flows)
    while unfrozen or private:
        link_key = min(
            unfrozen, key=lambda link: (capacity[link] / unfrozen[link], place[link]), default=None
        )
        narrowest = min(private.values(), default=None)
        if narrowest is not None and (
            link_key is None
            or narrowest < (capacity[link_key] / unfrozen[link_key], *place[link_key])
        ):
            share, members = narrowest[0], [narrowest[1]]
        else:
            assert link_key is not None, (
                "a flow is unfrozen while a shared link or a private one is left"
            )
            share, members = capacity[link_key] / unfrozen[link_key], shared[link_key]
        for index in members:
            if frozen[index]:
                continue
            frozen[index] = True
            rates[index] = share
            private.pop(index, None)
            copy_crossed = crossed[index]
            for link in flows[index].crossings_of(shared) if copy_crossed is None else copy_crossed:
                capacity[link] -= share
                unfrozen[link] -= 1
                if unfrozen[link] == 0:
                    del unfrozen[link]
    return rates


def make_network(
    model: str, env: simpy.Environment, tracks_links: bool
) -> AlphaBetaNetwork | FlowNetwork:
    models: dict[str, type[AlphaBetaNetwork] | type[FlowNetwork]] = {
        "alpha-beta": AlphaBetaNetwork,
        "flow": FlowNetwork,
    }
    return models[model](env, tracks_links)
