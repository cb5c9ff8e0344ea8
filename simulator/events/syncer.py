"""Decoupled DiLoCo's syncer: each learner's round trip, the quorum and grace window, and returns.

A learner's exchange of fragment p (``schedules/decoupled.py``) is its own: it prepares the tensor
(``network.exchange_cpu_s_per_value``, after its previous exchange, as the trainer's single exchange
thread runs them), uploads it over its uplink and the syncer's downlink, and waits there for a merge.
The syncer merges fragment p's round t once ``schedule.quorum`` (K) reports of it are in, after a
grace window; and every fragment at once when no further report can arrive: every live learner
(present, its last report not yet answered) has a report waiting here, in any fragment, as happens
when every present learner has reported p, or when the learners left are fewer than K. A report of a
round merged already is late: it is answered at once, and counts only as traffic (its
pseudo-gradient joins p's next merge). The rules: ``docs/decoupled.md``. Every report in the merge
then downloads the new global fragment over the syncer's uplink and its own downlink; the learner
holds it at the end of that download. A learner waiting for its fragment is ``idle`` while its
report sits at the syncer waiting for others' (quorum, grace window) and ``stall`` while its own
bytes move.

Grace window (Douillard et al. 2026, eq. 3): the slack of the first reporter, the time left before it
needs the fragment back, is tau steps of its compute less the time since it sent and less its
download; the syncer waits gamma < 1 of that slack, or the ``schedule.grace_window`` seconds given
(``schedules.decoupled.grace_window_s``, which the trainer's syncer applies too).

A learner that fails (``failures.py``) loses its reports in flight (it weighs zero in merges until
it is back); ``recovery_s`` later it downloads the global model from the syncer and goes on from its
own last completed outer step: learners never wait for each other, so each keeps its own count.
Without a ``[syncer]`` bandwidth the syncer sits on a non-blocking core: only the learners' links
and latencies count. The syncer's link is not in the run's link table.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import simpy

from islands.schedules import SyncPoint
from islands.schedules.decoupled import grace_window_s, no_report_can_arrive
from islands.trace import NO_FRAGMENT, WASTED

from ..network.links import Link, Transfer
from ..network.syncer_paths import SyncerPaths
from ..workers import WorkerState
from .churn import DEPARTURE
from .context import RunContext
from .exchanges import Exchanges


@dataclass(eq=False)
class Report:
    """One learner's round trip for one fragment of one of its outer steps."""

    rank: int
    outer_step: int
    fragment: int
    payload_bytes: float
    launched_s: float
    lead_steps: float  # steps of compute from the launch to the due step
    done: simpy.Event
    sent_s: float | None = None  # the upload started
    arrived_s: float | None = None  # the upload is in: from here to the merge it waits for others
    first_started_s: float | None = None  # merged
    transfer: Transfer | None = None


class Syncer(Exchanges):
    """The exchanges of Decoupled DiLoCo's learners: each a round trip to the syncer (``Exchanges``)."""

    def __init__(self, context: RunContext):
        self.env, self.scenario, self.network, self.topology = (
            context.env,
            context.scenario,
            context.network,
            context.topology,
        )
        self.fleet, self.trace, self.progress, self.start = (
            context.fleet,
            context.trace,
            context.progress,
            context.start,
        )
        self.pending: dict = {}  # no collectives: every round trip is its learner's own
        self.paths = SyncerPaths.of(context.scenario)
        self.waiting: dict[int, list[Report]] = {}
        self.armed: dict[int, int] = {}  # fragment -> generation of its armed grace timer
        self.generation = 0
        self.in_flight: dict[int, set[Report]] = {}
        self.last_outer, self.last_fragment = (
            context.progress.synced_outer_steps - 1,
            context.last_fragment,
        )
        self.finished: set[int] = set()  # learners whose last report is answered: they send no more
        self.open_round: dict[int, int] = {}  # fragment -> the outer step its next merge is for
        self.late: dict[int, list[Report]] = {}  # fragment -> reports answered late, not yet merged
        self.counts = {"merges": 0, "merges_below_quorum": 0, "late_reports": 0}

    # --- a learner's round trip ------------------------------------------------------------------

    def join(self, state: WorkerState, point: SyncPoint) -> Report:
        """The learner's report of ``point``: prepared after its previous exchange, then sent."""
        env = self.env
        report = Report(
            state.worker.rank,
            point.outer_step,
            point.fragment,
            point.payload_bytes,
            env.now,
            point.apply_step - point.launch_step,
            env.event(),
        )
        work_s = self.scenario.network.exchange_cpu_s_per_value * point.values
        previous, state.exchanging = state.exchanging, report
        process = state.process
        if previous is not None and not previous.done.triggered:
            previous.done.callbacks.append(
                lambda _event: self.prepare(state, process, report, work_s)
            )
        else:
            self.prepare(state, process, report, work_s)
        return report

    def prepare(self, state: WorkerState, process: Any, report: Report, work_s: float) -> None:
        if work_s > 0:
            worked = self.env.timeout(work_s)
            worked.callbacks.append(lambda _event: self.send(state, process, report))
        else:
            self.send(state, process, report)

    def send(self, state: WorkerState, process: Any, report: Report) -> None:
        if not state.present or state.process is not process:
            return
        report.sent_s = self.env.now
        report.transfer = self.network.transfer(
            self.path_to_syncer(report.rank), report.payload_bytes, self.hop_latency_s(report.rank)
        )
        self.in_flight.setdefault(report.rank, set()).add(report)
        self.tell_watcher(report.rank)
        transfer = report.transfer
        transfer.done.callbacks.append(lambda _event: self.arrived(report, transfer))

    def hop_latency_s(self, rank: int) -> float:
        return self.paths.hop_latency_s(self.topology, rank)

    def path_to_syncer(self, rank: int) -> tuple[Link, ...]:
        return self.paths.to_syncer(self.topology, rank)

    def path_from_syncer(self, rank: int) -> tuple[Link, ...]:
        return self.paths.from_syncer(self.topology, rank)

    def arrived(self, report: Report, transfer: Transfer) -> None:
        if report.transfer is not transfer:
            return
        report.transfer = None
        report.arrived_s = self.env.now
        self.in_flight[report.rank].discard(report)
        self.tell_watcher(report.rank)
        if report.outer_step < self.open_round.get(report.fragment, 0):
            self.answer_late(report)
            return
        self.waiting.setdefault(report.fragment, []).append(report)
        self.consider(report.fragment)

    def answer_late(self, report: Report) -> None:
        """Its round is merged already: the learner takes the newest global fragment at once and its
        pseudo-gradient joins the fragment's next merge (``late_reports``)."""
        self.counts["late_reports"] += self.fleet.state_of[
            report.rank
        ].count  # one per learner it stands for
        self.late.setdefault(report.fragment, []).append(report)
        self.answer([report])

    # --- merging ---------------------------------------------------------------------------------

    def live_learners(self) -> set[int]:
        """The learners the syncer counts on for a report: members (a departed one until its silence
        is noticed, ``network.detection_timeout_s`` later, as the trainer's syncer notices it) whose
        last report is not yet answered."""
        return self.fleet.members - self.finished

    def queued_learners(self) -> set[int]:
        """The learners with a report waiting here, whatever its fragment."""
        return {report.rank for reports in self.waiting.values() for report in reports}

    def consider(self, fragment: int) -> None:
        """Merge every fragment now if no further report can arrive (``no_report_can_arrive``); else
        arm the grace window at the quorum."""
        reports = self.waiting.get(fragment, [])
        if not reports:
            return
        if no_report_can_arrive(self.live_learners(), self.queued_learners()):
            self.merge_all()
        elif (
            sum(self.fleet.state_of[r.rank].count for r in reports) >= self.scenario.schedule.quorum
            and fragment not in self.armed
        ):
            self.generation += 1
            self.armed[fragment] = self.generation
            timer = self.env.timeout(self.grace_s(reports[0]))
            generation = self.generation
            timer.callbacks.append(lambda _event: self.grace_over(fragment, generation))

    def grace_s(self, first: Report) -> float:
        """The grace window after the quorum: seconds, or gamma x the first reporter's slack."""
        state = self.fleet.state_of[first.rank]
        due_s = first.launched_s + first.lead_steps * state.worker.step_time_s
        download_s = self.hop_latency_s(first.rank) + first.payload_bytes / self.download_rate(
            first.rank
        )
        return grace_window_s(
            self.scenario.schedule.grace_window, due_s - self.env.now - download_s
        )

    def download_rate(self, rank: int) -> float:
        return min(link.capacity_bytes_per_s for link in self.path_from_syncer(rank))

    def grace_over(self, fragment: int, generation: int) -> None:
        if self.armed.get(fragment) == generation:
            self.merge(fragment)

    def merge_all(self) -> None:
        for fragment in sorted(self.waiting):
            self.merge(fragment)

    def merge(self, fragment: int) -> None:
        self.armed.pop(fragment, None)
        reports = self.waiting.pop(fragment, [])
        if not reports:
            return
        self.late.pop(fragment, None)
        self.open_round[fragment] = max(r.outer_step for r in reports) + 1
        self.count_merge(reports)
        self.answer(reports)

    def count_merge(self, reports: list[Report]) -> None:
        self.counts["merges"] += 1
        if sum(self.fleet.state_of[r.rank].count for r in reports) < self.scenario.schedule.quorum:
            self.counts["merges_below_quorum"] += 1

    def answer(self, reports: list[Report]) -> None:
        """Send each report's learner the global fragment; a learner whose last report this is sends no
        more, so merges that waited for it go ahead (and, the last one done, late reports merge)."""
        for report in reports:
            report.first_started_s = self.env.now
            self.send_back(report)
        last = {
            r.rank
            for r in reports
            if r.outer_step == self.last_outer and r.fragment == self.last_fragment
        }
        if last:
            self.finished |= last
            self.consider_all()

    def merge_leftover_late(self) -> None:
        """No learner is left to report: late pseudo-gradients not yet merged are merged now, one
        merge per fragment, as the trainer's syncer merges them into the final model."""
        for fragment in sorted(self.late):
            reports = self.late.pop(fragment)
            if reports:
                self.count_merge(reports)

    def send_back(self, report: Report) -> None:
        report.transfer = self.network.transfer(
            self.path_from_syncer(report.rank),
            report.payload_bytes,
            self.hop_latency_s(report.rank),
        )
        self.in_flight.setdefault(report.rank, set()).add(report)
        self.tell_watcher(report.rank)
        transfer = report.transfer
        transfer.done.callbacks.append(lambda _event: self.returned(report, transfer))

    def returned(self, report: Report, transfer: Transfer) -> None:
        if report.transfer is not transfer:
            return
        report.transfer = None
        self.in_flight[report.rank].discard(report)
        self.tell_watcher(report.rank)
        state = self.fleet.state_of[report.rank]
        assert report.sent_s is not None, "a report comes back after it was sent (send)"
        self.trace.add(
            report.sent_s,
            self.env.now,
            report.rank,
            state.worker.island,
            "comm",
            report.payload_bytes,
            report.fragment,
            report.outer_step,
        )
        report.done.succeed()

    def own_end(self, rank: int, exchange: Report) -> simpy.Event:
        return exchange.done

    def moving(self, rank: int) -> bool:
        """Its upload or its download is under way."""
        return bool(self.in_flight.get(rank))

    def record_wait(
        self, state: WorkerState, since_s: float, exchange: Report, point: SyncPoint
    ) -> None:
        """The learner waited from ``since_s`` to now for its report: idle while the report sat at the
        syncer before its merge, stall the rest (its own transfers and exchange work)."""
        report = exchange
        now = self.env.now
        assert report.arrived_s is not None and report.first_started_s is not None, (
            "its learner waited until the report was answered (returned), so it arrived and was merged"
        )
        idle_from = min(max(since_s, report.arrived_s), now)
        idle_to = min(max(idle_from, report.first_started_s), now)
        rank, island = report.rank, state.worker.island
        for start, end, kind in (
            (since_s, idle_from, "stall"),
            (idle_from, idle_to, "idle"),
            (idle_to, now, "stall"),
        ):
            if end > start:
                self.trace.add(
                    start, end, rank, island, kind, 0.0, report.fragment, report.outer_step
                )

    # --- learners that fail, finish and return ---------------------------------------------------

    def applied(self, state: WorkerState, point: SyncPoint) -> None:
        """A learner that applied the last fragment of an outer step completed it (``Progress``)."""
        if point.fragment == self.last_fragment:
            self.progress.learner_done(state.worker.rank, point.outer_step)

    def noticed(self) -> None:
        self.consider_all()  # merges that waited for the departed learner's report go ahead

    def consider_all(self) -> None:
        for fragment in sorted(self.waiting):
            self.consider(fragment)
        if not self.live_learners() and not any(self.waiting.values()):
            self.merge_leftover_late()

    def departed(self, state: WorkerState) -> None:
        """A failed learner's reports in flight or waiting are gone, their uploads wasted (``waste``);
        merges it held up go ahead once its departure is noticed (``churn.detected``)."""
        rank = state.worker.rank
        for report in self.in_flight.pop(rank, set()):
            self.waste(report)
            if report.transfer is not None:
                self.network.cancel(report.transfer)
                report.transfer = None
        state.exchanging = None
        for fragment in list(self.waiting):
            for report in self.waiting[fragment]:
                if report.rank == rank:
                    self.waste(report)
            self.waiting[fragment] = [r for r in self.waiting[fragment] if r.rank != rank]
        self.consider_all()

    def waste(self, report: Report) -> None:
        """A round trip cut now: its learner redoes its outer step when it returns (its work since its
        last apply is lost), so what it uploaded is wasted: a wasted row from the upload's start to
        now with the bytes that left its uplink (all of them, once the upload was in). The syncer's
        bytes back are no learner's (as a round trip's comm row counts only the upload)."""
        sent_s, now, upload = report.sent_s, self.env.now, report.transfer
        assert sent_s is not None, "a report in flight or waiting was sent"
        sent = report.payload_bytes
        if report.arrived_s is None and upload is not None:  # uploading: what has left so far
            sent = upload.moved_bytes(now)
        island = self.fleet.workers[report.rank].island
        self.trace.add(
            sent_s, now, report.rank, island, WASTED, sent, report.fragment, report.outer_step
        )

    def close(self) -> None:
        """The run is over: round trips in flight or waiting never complete."""
        for in_flight in self.in_flight.values():
            for report in in_flight:
                self.waste(report)
        for waiting in self.waiting.values():
            for report in waiting:
                self.waste(report)

    def joiner(
        self, state: WorkerState, from_peers: Generator[simpy.Event, Any, None]
    ) -> Generator[simpy.Event, Any, None]:
        """A returning learner fetches the global model from the syncer, not from its peers."""
        return self.catch_up(state)

    def catch_up(self, state: WorkerState) -> Generator[simpy.Event, Any, None]:
        """Fetch the global model from the syncer, then train from the learner's own next outer step."""
        rank = state.worker.rank
        started_s = self.env.now
        download = self.network.transfer(
            self.path_from_syncer(rank), self.scenario.weights_bytes, self.hop_latency_s(rank)
        )
        try:
            yield download.done
        except simpy.Interrupt as interrupt:
            if interrupt.cause is not DEPARTURE:
                raise
            self.network.cancel(download)
            return
        learner_outer = self.progress.learner_outer[rank]
        self.trace.add(
            started_s,
            self.env.now,
            rank,
            state.worker.island,
            "comm",
            0.0,
            NO_FRAGMENT,
            learner_outer,
        )
        self.fleet.admit(rank)
        self.finished.discard(rank)  # it trains from its own last applied outer step
        self.start(state, learner_outer)
