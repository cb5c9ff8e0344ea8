"""What the counts follow of the network (``counts.py``): the holders that joiners download the weights
from, the groups of downloads begun together, and the max-min fair rates of the ring and of the downloads
over the links that carry more than one flow (see ``returning.py`` for the rules)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

RING = -1  # the ring's key among the flows (a holder's downloads are keyed by the holder's number)


def fill(
    capacity: float, ring_on: bool, loads: list[tuple[int, int, int, bool]]
) -> dict[int, float | None]:
    """Each flow's max-min fair rate by progressive filling (``network.max_min_rates``), every link of
    ``capacity``: the ring (if on) and each holder's downloads ``(holder, downloads, downloads to
    joiners in the ring, holder in the ring)``. The links that may bind: a holder's uplink (its
    downloads, and the ring if it is in it), a joiner's downlink in the ring (the ring and its download),
    and each flow's own links (None: a flow no link binds). The reference that ``fill_closed`` (the
    one the counts use) is checked against."""
    ring = len(loads)  # the flows by place: each holder's downloads, then the ring
    links: list[tuple[tuple[int, int], ...]] = []  # each link's (flow, crossings)
    for place, (_, downloads, in_ring_joiners, in_ring) in enumerate(loads):
        links.append(
            ((place, downloads), (ring, 1)) if ring_on and in_ring else ((place, downloads),)
        )
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


MEMBER, ABSENT, UNSTARTED, DOWNLOADING, LOADED, ENLISTED = range(
    6
)  # a tracked holder's place in the counts


@dataclass(eq=False)
class Group:
    """Joiners whose downloads began together from one holder (``source``), all in the collective
    (``enlisted``) or all waiting for the next; the downloads are in once the source's progress
    reaches ``done_at``. ``tracked``: the holders among them (they are counted in ``count`` too).
    ``ghost``: joiners that started alone meanwhile (no member was left), members now, whose download
    goes on all the same (``Churn.orphan`` leaves their fetch running): it moves bytes, nothing else."""

    source: Holder
    done_at: float
    count: int
    enlisted: bool = False
    ghost: bool = False
    tracked: list[Holder] = field(default_factory=list)


@dataclass(eq=False)
class Holder:
    """A worker that joiners download the weights from (the lowest present member then,
    ``Churn.lowest_holder``), followed on its own while its uplink carries downloads: where it is in the
    counts (``place``: a member, absent, a joiner...), so that the ring crosses its uplink exactly when
    it takes part, and so that, back among the members, it is the lowest holder again."""

    number: int  # the order they became holders in: the lower, the lower its rank
    place: int = MEMBER
    group: Group | None = None  # where it downloads the weights itself, once back as a joiner
    away_since: float = 0.0  # when it last went away
    in_ring: bool = (
        False  # its uplink is one of the ring's in flight (the ring keeps the links it started on)
    )
    progress: float = 0.0  # bytes each of its downloads has moved since it began sending
    rate: float = 0.0
    groups: list[tuple[float, int, Group]] = field(default_factory=list)  # a heap by done_at
    downloads: int = 0
    enlisted: int = 0  # downloads to joiners in the collective
    ghosts: int = 0  # downloads to members (``Group.ghost``), in the ring whenever it runs


def fill_closed(
    capacity: float, ring_on: bool, loads: list[tuple[int, int, bool]]
) -> dict[int, float]:
    """``fill`` in closed form, holders numbered by their place in ``loads`` (``(downloads, downloads to
    joiners in the ring, holder in the ring)``, each with a download): the ring takes the tightest of
    C / (n + 1) on the uplink of a holder in it and, for a holder out of it with a joiner in it,
    C - C / n (C / 2 for one download) on that joiner's downlink; each holder's downloads share what
    the ring leaves of its uplink, or out of the ring C / n up to what it leaves of the downlink."""
    if not ring_on:
        return {place: capacity / downloads for place, (downloads, _, _) in enumerate(loads)}
    ring = capacity
    for downloads, in_ring_joiners, in_ring in loads:
        if in_ring:
            ring = min(ring, capacity / (downloads + 1))
        elif in_ring_joiners:
            ring = min(ring, max(capacity - capacity / downloads, capacity / 2))
    filled = {
        place: (capacity - ring) / downloads
        if in_ring
        else min(capacity / downloads, capacity - ring)
        if in_ring_joiners
        else capacity / downloads
        for place, (downloads, in_ring_joiners, in_ring) in enumerate(loads)
    }
    filled[RING] = ring
    return filled
