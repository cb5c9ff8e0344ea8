"""What the counts (``counts.py``) draw in bulk, in numpy: the returns and departures of the workers
pooled while a collective was pending, at its end (``alternate``), and a chain of failed rings
(``Chain``, restart only).

While a collective is pending under ``on_departure = "restart"``, nobody joins it (the absent are
pooled until the outer boundary, ``Counts.settle_pool``): its participants are a pure-death process.
Each leaves at 1 / ``mtbf_s``, so the gaps between departures are exponential with rate (participants
left) / ``mtbf_s`` and the order in which they leave is a uniformly random permutation of them (the
same law as ``Counts.step``'s draws, drawn in another order). Every departure breaks the ring in
flight, which restarts ``detection_timeout_s`` after the last one; between departures the rates of the
ring and of the downloads are closed forms of the downloads in flight per holder (``rates``, as
``holders.fill_closed``). A chain begins at a departure that ``Counts.step`` drew. So a
run of departures, restarts and broken rings is a few numpy calls: the gaps, who leaves, each gap's
ring start, rates, download progress and whether the ring or a download gets through in it.

The chain stops at the first thing it does not play itself, always at a time that depends on nothing
drawn after it (the departures it had drawn past it are dropped; they are exponential, so nothing is
biased): a ring or a download that gets through (left to ``Counts.step``'s timers at that instant), a
departure of a holder (played by ``Counts``'s own handlers: its downloads begin again from others),
the last download of a holder gone, the departures drawn (``FIRST_CHUNK``), or the horizon."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .changes import Changes

if TYPE_CHECKING:
    from .holders import Holder

# Departures drawn at once: from FIRST_CHUNK, four times more after a chain that used them all, half
# after one that stopped sooner (most chains stop within a few dozen: a download or a ring gets through)
FIRST_CHUNK = 16
MOST_CHUNK = 1024
# who a drawn departure is, by label: 0 a member that sends nothing, 1 a joiner in the collective whose
# download is in, 2 one whose download begins again at the next outer boundary, then each group of
# downloads in flight, then each holder
FIRST_GROUP = 3


def rates(capacity: float, downloads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ring's rate and each holder's download rate with the ring on, in closed form (``fill``'s
    answer when every download goes to a joiner in the ring, as ``holders.fill_closed`` for one gap):
    ``downloads`` is holders x gaps, a holder with none bounds nothing. The ring is held by the uplink
    of the holder with the most, C / (n + 1); a holder's downloads share what it leaves of its
    uplink, (C - ring) / n."""
    some = downloads > 0
    safe = np.where(some, downloads, 1)
    ring = capacity / (downloads.max(axis=0, initial=0) + 1)
    return ring, np.where(some, (capacity - ring) / safe, 0.0)


def alternate(
    rng: np.random.Generator, since: np.ndarray, end_s: float, return_rate: float, leave_rate: float
) -> tuple[np.ndarray, int, int, float]:
    """Workers that went away at ``since``, each on its own until ``end_s``: back after an exponential
    time (``return_rate``), away again after another (``leave_rate``), and so on, drawn for all at once,
    a round of draws per change. Returns who is back at the end, the returns, the departures, and the
    seconds they were back in all."""
    t, back = since.copy(), np.zeros(len(since), dtype=bool)
    joins = leaves = 0
    back_s = 0.0
    active = np.arange(len(since))
    while active.size:
        was_back = back[active]
        t_now = t[active]
        t_next = t_now + rng.standard_exponential(active.size) / np.where(
            was_back, leave_rate, return_rate
        )
        back_s += float(np.where(was_back, np.minimum(t_next, end_s) - t_now, 0.0).sum())
        changing = t_next < end_s
        flipped = active[changing]
        returning_now = int((~was_back[changing]).sum())
        joins += returning_now
        leaves += flipped.size - returning_now
        back[flipped] = ~back[flipped]
        t[flipped] = t_next[changing]
        active = flipped
    return back, joins, leaves, back_s


def applies(counts: Changes) -> bool:
    """A collective pending under restart, its ring off and tried before, nobody waiting or away in the
    counts (the pool holds them) and every download in flight to a joiner in the collective."""
    return (
        counts.pooled
        and not counts.computing
        and not counts.ring_on
        and counts.first_start_s is not None
        and counts.absent == 0
        and counts.unstarted == 0
        and counts.loaded == 0
        and all(holder.enlisted == holder.downloads for holder in counts.holders)
    )


def play(counts: Changes, first_at: float) -> bool:
    """Play departures (and the rings they break) from the first, at ``first_at`` (``Counts.step``'s
    draw: it comes before every timer but the ring's restart), until the next stop; False if the
    chain does not apply."""
    if not applies(counts):
        return False
    for holder in counts.holders:
        holder.settle(counts.now)
    loaded = [holder for holder in counts.holders if holder.downloads]
    groups = [(h, group) for h, holder in enumerate(loaded) for _, _, group in holder.groups]
    tracked = list(counts.holders)
    sizes = [
        counts.member_count - len(tracked),
        counts.loaded_enlisted,
        counts.unstarted_enlisted,
        *(group.count for _, group in groups),
        *([1] * len(tracked)),
    ]
    participants = sum(sizes)
    if participants <= 1 or min(sizes) < 0:
        return False
    chain = Chain(counts, loaded, groups, tracked, sizes, participants, first_at)
    chain.run()
    return True


class Chain:
    """The drawn departures and every gap's ring and downloads (see the module's docstring)."""

    def __init__(
        self,
        counts: Changes,
        loaded: list[Holder],
        groups: list,
        tracked: list[Holder],
        sizes: list[int],
        participants: int,
        first_at: float,
    ):
        self.counts, self.loaded, self.groups, self.tracked = counts, loaded, groups, tracked
        rng, now = counts.rng, counts.now
        k = min(counts.chain_chunk, participants)
        self.k = k
        left = participants - np.arange(k)
        gaps = rng.standard_exponential(k) / (left * counts.leave_rate)
        gaps[0] = first_at - now
        self.tau = now + np.cumsum(gaps)
        slots = np.repeat(np.arange(len(sizes)), sizes)
        self.label = slots[rng.permutation(participants)[:k]]
        self.first_tracked = FIRST_GROUP + len(groups)
        self.members_left = np.cumsum(self.label == 0)  # member departures by each departure
        self.loaded_left = np.cumsum(self.label == 1)
        self.unstarted_left = np.cumsum(self.label == 2)
        group_of = np.array([h for h, _ in groups], dtype=np.int64)
        downloads = np.array([holder.downloads for holder in loaded], dtype=np.int64)
        is_download = (self.label >= FIRST_GROUP) & (self.label < self.first_tracked)
        holder_of = np.where(
            is_download,
            group_of[np.clip(self.label - FIRST_GROUP, 0, max(len(groups) - 1, 0))]
            if len(groups)
            else 0,
            -1,
        )
        self.downloads = downloads[
            :, None
        ] - np.concatenate(  # holders x gaps (gap j: after j departures)
            [
                np.zeros((len(loaded), 1), dtype=np.int64),
                np.cumsum(holder_of[None, :] == np.arange(len(loaded))[:, None], axis=1),
            ],
            axis=1,
        )
        self.participants = participants
        # gap j runs from departure j (now for j = 0) to departure j + 1; the ring starts in it once
        # the last departure is noticed
        self.starts = np.concatenate([[now], self.tau[:-1]])
        self.ends = self.tau
        noticed = np.concatenate(
            [[max(now, counts.blocked_until_s)], self.tau[:-1] + counts.detect_s]
        )
        self.ring_from = np.minimum(np.maximum(self.starts, noticed), self.ends)
        gaps = self.downloads[:, :k]
        some = gaps > 0
        self.off_rate = np.where(some, counts.capacity / np.where(some, gaps, 1), 0.0)
        self.ring_rate, self.on_rate = rates(counts.capacity, gaps)
        self.ring_bytes = counts.volume(participants - np.arange(k), counts.payload_bytes)
        off_s = self.ring_from - self.starts
        on_s = self.ends - self.ring_from
        moved = self.off_rate * off_s + self.on_rate * on_s
        self.progress_end = np.array([holder.progress for holder in loaded])[:, None] + np.cumsum(
            moved, axis=1
        )
        self.progress_start = self.progress_end - moved

    def run(self) -> None:
        counts, k = self.counts, self.k
        ring_done = self.ring_from + self.ring_bytes / self.ring_rate
        timer = np.where(ring_done < self.ends, ring_done, np.inf)
        kind = np.zeros(k, dtype=np.int64)  # 0: the ring, h + 1: holder h's first download
        if self.loaded:
            done = self.done_times(np.array([holder.groups[0][0] for holder in self.loaded]))
            first = done.argmin(axis=0)
            done = done[first, np.arange(k)]
            earlier = done < timer
            timer = np.where(earlier, done, timer)
            kind = np.where(earlier, first + 1, kind)
        timed = np.flatnonzero(timer < np.inf)
        stops = [k]  # departures that end the chain, after they are played (1-based)
        emptied = np.flatnonzero(
            (self.downloads[:, 1:] == 0).any(axis=0)
        )  # a holder's last download gone
        if emptied.size:
            stops.append(int(emptied[0]) + 1)
        structural = np.flatnonzero(
            (self.label >= self.first_tracked)
            | ((self.label == 0) & (self.members_left == counts.member_count))
        )
        by_departure = min(stops)
        first_structural = int(structural[0]) + 1 if structural.size else k + 1
        first_timer = int(timed[0]) if timed.size else k + 1  # the gap
        if first_timer < min(by_departure, first_structural):
            played, at, timer_kind = first_timer, float(timer[first_timer]), int(kind[first_timer])
        else:
            played = min(by_departure, first_structural - 1)
            at, timer_kind = float(self.tau[played - 1]) if played else counts.now, None
            if first_structural <= by_departure:
                at = float(self.tau[played])
        if (
            at > counts.horizon_s
        ):  # stop at the horizon: the departures before it, and its gap up to it
            self.apply(int(np.searchsorted(self.tau, counts.horizon_s)), counts.horizon_s, None)
        elif timer_kind is None and first_structural <= by_departure:
            self.apply(played, at, None)
            self.leave(int(self.label[played]))
        else:
            self.apply(played, at, timer_kind)

    def done_times(self, done_at: np.ndarray) -> np.ndarray:
        """When each holder's first group is in (``done_at``: its progress then), holders x gaps (inf
        where it is not in that gap)."""
        start, end = self.progress_start, self.progress_end
        done_at = done_at[:, None]
        off_end = start + self.off_rate * (self.ring_from - self.starts)
        with np.errstate(divide="ignore", invalid="ignore"):
            in_off = self.starts + (done_at - start) / self.off_rate
            in_on = self.ring_from + (done_at - off_end) / self.on_rate
        at = np.where(off_end >= done_at, in_off, in_on)
        return np.where((end >= done_at) & (start < done_at), np.maximum(at, self.starts), np.inf)

    def apply(self, played: int, at: float, timer_kind: int | None) -> None:
        """The first ``played`` departures and the gaps up to ``at`` (in gap ``played``), into the counts."""
        counts = self.counts
        label = self.label[:played]
        self.waste(played)
        # presence and stall of the members, gap by gap
        members_in_gap = counts.member_count - np.concatenate([[0], self.members_left[:played]])
        starts = np.concatenate([[counts.now], self.tau[:played]])
        ends = np.concatenate([self.tau[:played], [at]])
        waited = float((members_in_gap * (ends - starts)).sum())
        counts.present += waited
        counts.stall += waited
        member_left = int(self.members_left[played - 1]) if played else 0
        loaded_left = int(self.loaded_left[played - 1]) if played else 0
        counts.unstarted_enlisted -= int(self.unstarted_left[played - 1]) if played else 0
        counts.leaves += played
        counts.lost_s += member_left * counts.period_s
        counts.member_count -= member_left
        if loaded_left:
            share = counts.extension_s / counts.loaded_enlisted
            counts.present += share * loaded_left
            counts.extension_s -= share * loaded_left
            counts.loaded_enlisted -= loaded_left
        left_by_label = np.bincount(label, minlength=self.first_tracked).tolist()
        for g, (_, group) in enumerate(self.groups):
            gone = left_by_label[g + FIRST_GROUP]
            if not gone:
                continue
            counts.drop_downloads(group, gone, enlisted=True)
        counts.pool_since.extend(self.tau[:played].tolist())
        noticed = self.tau[:played] + counts.detect_s
        counts.detections.extend(
            noticed[noticed >= at].tolist()
        )  # the notices still to come (``Counts.orphan``)
        if played:
            counts.blocked_until_s = max(
                counts.blocked_until_s, float(self.tau[played - 1]) + counts.detect_s
            )
        # the downloads' progress and the ring, in the gap the chain stops in
        gap = min(played, self.k - 1)
        begun = counts.now if played == 0 else float(self.tau[played - 1])
        ring_from = (
            float(self.ring_from[gap]) if played < self.k else max(at, counts.blocked_until_s)
        )
        for h, holder in enumerate(self.loaded):
            base = (
                float(self.progress_start[h, gap])
                if played < self.k
                else float(self.progress_end[h, -1])
            )
            if played < self.k:
                base += float(self.off_rate[h, gap]) * (min(at, ring_from) - begun) + float(
                    self.on_rate[h, gap]
                ) * max(0.0, at - ring_from)
            holder.progress, holder.settled_s = base, at
            if timer_kind == h + 1:
                holder.progress = max(holder.progress, holder.groups[0][0])
        if played < self.k and ring_from < at:
            counts.ring_on = True
            counts.ring_participants = self.participants - gap
            counts.ring_bytes = float(self.ring_bytes[gap])
            counts.ring_left = (
                0.0
                if timer_kind == 0
                else max(0.0, counts.ring_bytes - float(self.ring_rate[gap]) * (at - ring_from))
            )
            counts.hold_until_s, counts.dropped_away, counts.dropped_back = -np.inf, [], []
        counts.chain_chunk = (
            min(MOST_CHUNK, 4 * self.k)
            if played == self.k
            else max(FIRST_CHUNK, counts.chain_chunk // 2)
        )
        counts.now = at
        counts.timer_due = timer_kind is not None
        counts.retime()

    def waste(self, played: int) -> None:
        """What the first ``played`` departures threw away (``Changes.waste``): the ring each broke, what
        its participants had moved since it started in its gap, and the download of a joiner that
        left (its holder's progress then, less where the download began)."""
        counts = self.counts
        left = self.participants - np.arange(played)
        moved = self.ring_rate[:played] * (self.tau[:played] - self.ring_from[:played])
        counts.waste(float((left * moved).sum()))
        label = self.label[:played]
        for gap in np.flatnonzero((label >= FIRST_GROUP) & (label < self.first_tracked)).tolist():
            h, group = self.groups[int(label[gap]) - FIRST_GROUP]
            counts.waste_download(float(self.progress_end[h, gap]), group.done_at, 1)

    def leave(self, label: int) -> None:
        """A departure the chain does not play (a holder, or the last member): ``Counts``'s own."""
        counts = self.counts
        if label == 0:  # the last member (``Changes.emptied``): the first after the holders
            counts.member_left(len(counts.holders))
            return
        counts.member_left(counts.holders.index(self.tracked[label - self.first_tracked]))
