"""The counts that ``returning.py`` plays a run of churn that returns on: who is where, when the next
change comes, the rates of the ring and of the downloads, and the totals of the summary (see
``returning.py`` for the rules and what they approximate)."""

from __future__ import annotations

import heapq
import math
from collections import deque
from functools import partial

import numpy as np

from ..network.collectives import collective_for
from ..setup import RunSetup
from . import chain
from .chain import alternate
from .changes import Changes, churn_times
from .holders import Group, Holder, assign, closed_rates

DRAWS = 8192  # exponential and uniform draws taken from the generator at once
STREAM = 3  # the counts' own stream of the scenario's seed (``compute.worker_generator``'s are 0-2)


class Counts(Changes):
    """One run played on counts (see the module's docstring)."""

    def __init__(self, setup: RunSetup, period_steps: float, horizon_s: float | None):
        scenario = setup.scenario
        island = scenario.islands[0]
        worker = setup.workers[0]
        self.scenario = scenario
        self.fleet_size = scenario.worker_count
        mtbf_s, mttr_s = churn_times(island)
        self.leave_rate = 1.0 / mtbf_s
        self.return_rate = 1.0 / mttr_s
        self.period_steps = period_steps
        self.period_s = period_steps * worker.step_time_s
        self.capacity = worker.upload_bytes_per_s
        self.detect_s = scenario.network.detection_timeout_s
        self.partial = scenario.network.on_departure == "partial"
        # restart: the workers away while a collective is pending are played at its end (``settle_pool``);
        # under partial each one's return may matter to the ring in flight (``dropped_again``)
        self.pooled = not self.partial
        self.pool_since: list[float] = []
        self.weights_bytes = scenario.weights_bytes
        self.payload_bytes = scenario.payload_bytes
        self.volume = collective_for(scenario).volume_bytes
        self.outer_steps = setup.synced_outer_steps
        self.horizon_s = horizon_s if horizon_s is not None else math.inf
        self.rng = np.random.default_rng(np.random.SeedSequence([scenario.seed, STREAM]))
        self.exponentials: list[float] = []
        self.uniforms: list[float] = []
        self.drawn = DRAWS
        # who is where
        self.member_count = self.fleet_size
        self.absent = 0
        self.unstarted = 0  # joiners whose download waits for the next outer boundary
        self.loaded = 0  # joiners whose download is in and who wait for a collective (not in one)
        self.loaded_enlisted = 0  # joiners whose download is in, in the collective
        self.unstarted_enlisted = (
            0  # joiners in the collective whose holder left: theirs begins again
        )
        self.extension_s = (
            0.0  # of those, seconds their download rows reach past the collective's forming
        )
        self.holders: list[
            Holder
        ] = []  # the members sending downloads, in the order they became so
        self.detections: deque[float] = (
            deque()
        )  # when the others notice the departures of the last detect_s
        self.in_flight = 0  # downloads in flight, of every holder (``Holder.downloads`` summed)
        self.in_flight_enlisted = (
            0  # of those, to joiners in the collective (``Holder.enlisted`` summed)
        )
        # when each holder's first download gets through at the rates of the last ``refill``: a heap
        # of (time, number, timing, holder), an entry stale once its holder is timed again
        self.download_ends: list[tuple[float, int, int, Holder]] = []
        # holders whose downloads changed since the last refill, each once, in the order touched
        self.touched: dict[Holder, None] = {}
        self.rates_key: tuple[bool, int] | None = (
            None  # what every holder's rate hangs on, at the last
        )
        self.holder_numbers = 0
        self.group_numbers = 0
        self.dirty = False  # a flow started or ended since the rates were filled
        self.timer_due = False  # ``chain`` stopped at a timer that ``step`` plays next
        self.chain_chunk = chain.FIRST_CHUNK  # departures ``chain`` draws at once
        # the period
        self.now = 0.0
        self.boundary_s = 0.0
        self.computing = True
        self.formed = False  # this outer step's collective has formed (its joiners enlisted)
        self.enlisted_orphan_s = (
            -math.inf
        )  # no member left: when its joiners start alone (``orphan``)
        self.formed_s = 0.0
        self.first_start_s: float | None = None
        self.blocked_until_s = (
            -math.inf
        )  # the last departure the others have not noticed, + the timeout
        self.ring_on = False
        self.ring_left = 0.0
        self.ring_rate = 0.0
        self.ring_bytes = 0.0
        self.ring_participants = 0  # of the try in flight, at its start
        self.hold_until_s = -math.inf  # partial: the ring ends no sooner than this
        # partial: what each participant dropped from the ring in flight had sent by its first
        # departure, those away and those back (a participant back and leaving again is dropped again,
        # as ``Churn.leave`` drops it)
        self.dropped_away: list[float] = []
        self.dropped_back: list[float] = []
        self.completed = 0
        # the totals
        self.compute = self.idle = self.stall = self.present = self.bytes_sent = self.sync_rows = (
            0.0
        )
        self.wasted = 0.0  # of the bytes sent, those thrown away (``Changes.waste``)
        self.lost_s = 0.0
        self.merged_steps = 0.0
        self.durations: list[float] = []
        self.joins = self.leaves = self.dropped_members = 0
        self.horizon_reached = False

    # --- draws ----------------------------------------------------------------------------------

    def draw(self) -> tuple[float, float]:
        """A standard exponential and a uniform, from the run's generator, taken in batches."""
        if self.drawn == DRAWS:
            self.exponentials = self.rng.standard_exponential(DRAWS).tolist()
            self.uniforms = self.rng.random(DRAWS).tolist()
            self.drawn = 0
        index = self.drawn
        self.drawn += 1
        return self.exponentials[index], self.uniforms[index]

    # --- counts -----------------------------------------------------------------------------------

    def downloading(self) -> tuple[int, int]:
        """Joiners with a download in flight: waiting, and in the collective."""
        return self.in_flight - self.in_flight_enlisted, self.in_flight_enlisted

    def counted(self) -> int:
        """Every worker, wherever it is (the fleet's size, whatever happened: ``tests``)."""
        waiting_dl, enlisted_dl = self.downloading()
        return (
            self.member_count
            + self.unstarted
            + self.loaded
            + self.loaded_enlisted
            + self.unstarted_enlisted
            + waiting_dl
            + enlisted_dl
            + self.absent
            + len(self.pool_since)
        )

    def play(self) -> None:
        while self.completed < self.outer_steps:
            self.step()
        self.close()

    def close(self) -> None:
        """The run is over: a ring still in flight (at the horizon) and the downloads still in flight
        are never used (``Simulation.play``: ``Exchanges.close``, ``Churn.close``)."""
        if self.ring_on:
            self.waste_ring()
        for holder in self.holders:
            holder.settle(self.now)
            for _, _, group in holder.groups:
                self.waste_download(holder.progress, group.done_at, group.count)

    def step(self) -> None:
        """Move to the next change: a departure or a return, or a timer, whichever comes first."""
        if self.dirty:
            self.refill()
        due, self.timer_due = self.timer_due, False
        waiting_dl, enlisted_dl = self.downloading()
        present = (
            self.member_count
            + self.unstarted
            + self.loaded
            + self.loaded_enlisted
            + self.unstarted_enlisted
            + waiting_dl
            + enlisted_dl
        )
        total_rate = present * self.leave_rate + self.absent * self.return_rate
        exponential, uniform = self.draw()
        random_at = self.now + exponential / total_rate if total_rate > 0 else math.inf
        timer_at, timer = self.next_timer()
        at = min(random_at, timer_at)
        if at > self.horizon_s:
            self.advance(self.horizon_s, waiting_dl)
            if not self.computing:
                self.settle_pool(self.horizon_s)
            self.horizon_reached = True
            self.completed = self.outer_steps  # stop; ``play`` reports how far it got
            return
        if (
            not due
            and (random_at < timer_at or timer == self.start_ring)
            and chain.play(self, random_at)
        ):
            return  # the departure at random_at, and those after it, played at once (a chain of broken rings)
        self.advance(at, waiting_dl)
        if random_at < timer_at:
            self.change(uniform * total_rate, present, waiting_dl, enlisted_dl)
        else:
            timer()

    def next_timer(self):
        """The next timer: the end of the compute, a (re)start, the ring's end, a download's end."""
        if self.computing:
            best, action = (
                (self.boundary_s + self.period_s, self.arrive)
                if self.member_count
                else (self.orphan_at(), self.orphan)
            )
        elif self.ring_on:
            end_s = self.now + self.ring_left / self.ring_rate if self.ring_left > 0 else self.now
            best, action = max(end_s, self.hold_until_s), self.ring_done
            if end_s < self.hold_until_s and self.ring_left > 0:
                best, action = end_s, self.bytes_through
        else:
            best, action = max(self.now, self.blocked_until_s), self.start_ring
        ends = self.download_ends
        while ends and ends[0][2] != ends[0][3].timing:
            heapq.heappop(ends)
        if ends and ends[0][0] < best:
            best, action = ends[0][0], partial(self.download_done, ends[0][3])
        return best, action

    def advance(self, at: float, waiting_dl: int) -> None:
        """Everything that runs at a rate, and every presence, from now to ``at`` (``waiting_dl``: the
        joiners downloading while they wait for a collective)."""
        dt = at - self.now
        if dt <= 0:
            self.now = max(self.now, at)
            return
        waiting = self.unstarted + self.loaded + waiting_dl
        self.idle += waiting * dt
        self.present += (self.member_count + waiting) * dt
        if self.computing:
            self.compute += self.member_count * dt
        elif self.first_start_s is None:
            self.idle += self.member_count * dt
        else:
            self.stall += self.member_count * dt
        if self.ring_on:
            self.ring_left = max(0.0, self.ring_left - self.ring_rate * dt)
        self.now = at

    # --- downloads --------------------------------------------------------------------------------

    def begin_downloads(self, count: int) -> None:
        """``count`` joiners begin downloading the weights now, each from the holder the rule picks
        (``holders.assign``: the one sending the fewest, or a member sending none, a new holder).
        While ``count`` members send nothing, each download goes to one of them (C / 1 beats any
        holder's C / (n + 1)), and the holders need not be looked at."""
        if count <= self.member_count - len(self.holders):
            for _ in range(count):
                self.begin_group(self.new_holder(), 1)
            return
        loaded = [holder for holder in self.holders if holder.downloads]
        idle = self.member_count - len(loaded)
        taken = assign([holder.downloads for holder in loaded], idle, count)
        for place, downloads in enumerate(taken):
            source = loaded[place] if place < len(loaded) else self.new_holder()
            if downloads:
                self.begin_group(source, downloads)

    def new_holder(self) -> Holder:
        """A member that sends nothing begins to send: a holder, numbered after the others."""
        source = Holder(self.holder_numbers)
        self.holder_numbers += 1
        self.holders.append(source)
        return source

    def begin_group(self, source: Holder, count: int) -> None:
        source.settle(self.now)
        group = Group(source, source.progress + self.weights_bytes, count)
        self.group_numbers += 1  # ties broken by the order the groups began in, not by address
        heapq.heappush(source.groups, (group.done_at, self.group_numbers, group))
        source.downloads += count
        self.in_flight += count
        self.touch(source)

    def holder_left(self, holder: Holder) -> None:
        """``holder`` left (the members counted without it): its downloads begin again from the others,
        now while the members compute (``Churn.download_when_quiet``), else at the next outer boundary,
        as do those of joiners in the collective (``unstarted_enlisted``); with no member left, not
        before one is back (the joiners start alone first, ``orphan``). What they had moved is wasted."""
        holder.settle(self.now)
        self.stop_following(holder)
        self.in_flight -= holder.downloads
        self.in_flight_enlisted -= holder.enlisted
        for _, _, group in holder.groups:
            self.waste_download(holder.progress, group.done_at, group.count)
        enlisted = holder.enlisted
        waiting = holder.downloads - enlisted
        self.unstarted_enlisted += enlisted
        if waiting and self.member_count and self.computing and not self.formed:
            self.begin_downloads(waiting)
        else:
            self.unstarted += waiting
        self.rates()

    def download_done(self, source: Holder) -> None:
        """The downloads of ``source``'s first group are in: each a comm row of the weights."""
        _, _, group = heapq.heappop(source.groups)
        source.downloads -= group.count
        self.in_flight -= group.count
        self.bytes_sent += group.count * self.weights_bytes
        if group.enlisted:
            source.enlisted -= group.count
            self.in_flight_enlisted -= group.count
            self.loaded_enlisted += group.count
            self.extension_s += group.count * (self.now - self.formed_s)
        else:
            self.loaded += group.count
        self.touch(source)

    def stop_following(self, holder: Holder) -> None:
        """``holder`` left, or sends nothing: a member like the others again."""
        self.holders.remove(holder)
        holder.following = False
        holder.timing += 1

    # --- the network ------------------------------------------------------------------------------

    def rates(self) -> None:
        """The ring started or ended: the rates are filled again before time moves on (``refill``)."""
        self.dirty = True

    def touch(self, holder: Holder) -> None:
        """``holder``'s downloads changed: its rate is filled again before time moves on."""
        self.touched[holder] = None
        self.dirty = True

    def retime(self) -> None:
        """Every holder's progress was set anew (``chain``): every rate is filled again."""
        self.rates_key = None
        self.dirty = True

    def refill(self) -> None:
        """Every flow's rate now (``holders.closed_rates``: the max-min fair shares), and when each
        holder's first download gets through at it. A holder's rate hangs on its own downloads, and
        with the ring on on the most any holder sends: while those hold, only the holders touched since
        the last refill are filled again (the others' rates and ends stand), so a change costs the
        same whatever the fleet's size."""
        self.dirty = False
        touched, self.touched = list(self.touched), {}
        for holder in touched:
            if holder.following and not holder.downloads:
                self.stop_following(holder)
        most = max((holder.downloads for holder in self.holders), default=0) if self.ring_on else 0
        ring, left = closed_rates(self.capacity, self.ring_on, most)
        self.ring_rate = ring if self.ring_on else 0.0
        if (self.ring_on, most) != self.rates_key:
            self.rates_key = (self.ring_on, most)
            self.download_ends = []
            touched = self.holders
        for holder in touched:
            if holder.following:
                self.time_downloads(holder, left)

    def time_downloads(self, holder: Holder, left: float) -> None:
        """``holder``'s downloads share ``left`` from now: when its first group gets through."""
        holder.settle(self.now)
        holder.rate = left / holder.downloads
        holder.timing += 1
        end_s = self.now + max(0.0, holder.groups[0][0] - holder.progress) / holder.rate
        heapq.heappush(self.download_ends, (end_s, holder.number, holder.timing, holder))

    # --- the period -------------------------------------------------------------------------------

    def arrive(self) -> None:
        """The members have computed the period: they form the collective, or join the one formed before
        every member left (``emptied``), as it stands."""
        if self.formed:
            self.computing = False
            self.pool_absent()
        else:
            self.form()

    def form(self) -> None:
        """The collective forms, taking in every joiner present (whose downloads began at the last
        boundary or since)."""
        self.computing = False
        self.formed = True
        self.formed_s = self.now
        self.first_start_s = None
        self.loaded_enlisted, self.loaded = self.loaded, 0
        self.extension_s = 0.0
        for holder in self.holders:
            for _, _, group in holder.groups:
                group.enlisted = True
            holder.enlisted = holder.downloads
        self.in_flight_enlisted = self.in_flight
        self.pool_absent()

    def pool_absent(self) -> None:
        """A collective is pending: under restart, pool the absent."""
        if self.pooled:  # the absent: nothing they do matters before the next outer boundary
            self.pool_since.extend([self.now] * self.absent)
            self.absent = 0

    def settle_pool(self, end_s: float) -> None:
        """The returns and departures of the workers that went away while the collective was pending,
        from when each went, up to ``end_s``, drawn now (``alternate``): those back are joiners whose
        download waits for this outer boundary."""
        if not self.pooled:
            return
        since = np.array(self.pool_since)
        self.pool_since = []
        back, joins, leaves, present_s = alternate(
            self.rng, since, end_s, self.return_rate, self.leave_rate
        )
        self.joins += joins
        self.leaves += leaves
        self.idle += present_s
        self.present += present_s
        self.unstarted += int(back.sum())
        self.absent += len(back) - int(back.sum())

    def participants(self) -> int:
        return self.member_count + self.enlisted_count()

    def start_ring(self) -> None:
        """Every departure is noticed: the ring starts (again) among the participants present."""
        participants = self.participants()
        self.ring_participants = participants
        self.ring_bytes = self.volume(participants, self.payload_bytes)
        self.ring_left = self.ring_bytes
        self.ring_on = True
        self.hold_until_s, self.dropped_away, self.dropped_back = -math.inf, [], []  # this try's
        if self.first_start_s is None:
            self.first_start_s = self.now
        self.rates()

    def bytes_through(self) -> None:
        """``partial``: the bytes are through; the ring waits until the others notice the dropped member."""
        self.ring_left = 0.0

    def ring_done(self) -> None:
        """The outer step is done: rows for the collective, the joiners whose download is in become
        members and compute with the others from now, the others wait for the next collective."""
        end_s = self.now
        participants = self.participants()
        enlisted = participants - self.member_count
        assert self.first_start_s is not None, "a ring that ends has started"
        self.durations.append(end_s - self.first_start_s)  # every try (``summary.sync_spans``)
        self.bytes_sent += participants * self.ring_bytes
        self.sync_rows += participants
        self.waste(sum(self.dropped_bytes()))  # the dropped participants' wasted rows
        self.idle += enlisted * (self.first_start_s - self.formed_s)
        self.stall += enlisted * (end_s - self.first_start_s)
        self.present += enlisted * (end_s - self.formed_s)
        self.merged_steps += self.member_count * self.period_steps
        self.completed += 1
        self.ring_on = False
        self.formed = False
        self.member_count += self.loaded_enlisted
        self.unstarted += self.unstarted_enlisted  # in no collective until the next forms
        self.loaded_enlisted, self.unstarted_enlisted, self.extension_s = 0, 0, 0.0
        for holder in self.holders:
            for _, _, group in holder.groups:
                group.enlisted = False
            holder.enlisted = 0
        self.in_flight_enlisted = 0
        self.settle_pool(end_s)
        self.computing = True
        self.boundary_s = end_s
        if self.completed < self.outer_steps and self.unstarted:
            count, self.unstarted = self.unstarted, 0
            self.begin_downloads(count)
        self.rates()

    # --- no member left ---------------------------------------------------------------------------

    def enlisted_count(self) -> int:
        return self.loaded_enlisted + self.unstarted_enlisted + self.in_flight_enlisted

    def orphan_at(self) -> float:
        """No member is left (nor a holder, nor a download in flight): when the joiners start alone
        (``orphan``), if any is present."""
        at = math.inf
        if self.unstarted + self.loaded:  # at the first departure the others notice from now
            detections = self.detections
            while detections and detections[0] < self.now:
                detections.popleft()
            at = detections[0] if detections else self.now
        if self.formed and self.enlisted_count():  # at the notice of the last member's departure
            at = min(at, max(self.now, self.enlisted_orphan_s))
        return at

    def orphan(self) -> None:
        """``Churn.orphan``: no member holding the state is left, and the others notice a departure: the
        joiners waiting, and once the last member's departure is noticed those in the collective, start
        alone from the last completed outer step, members computing from now. No download is in flight
        (their holders left with them); none begins for them any more."""
        assert not self.holders, "no member is left, so no holder"
        orphans = self.loaded + self.unstarted
        self.loaded = self.unstarted = 0
        if self.formed and self.now >= self.enlisted_orphan_s:
            # their rows end where they joined the collective, but a download's past it
            orphans += self.loaded_enlisted + self.unstarted_enlisted
            self.present += self.extension_s
            self.loaded_enlisted = self.unstarted_enlisted = 0
            self.extension_s = 0.0
        self.member_count += orphans
        self.boundary_s = self.now
        self.rates()
