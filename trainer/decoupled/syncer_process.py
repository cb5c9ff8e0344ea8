"""Decoupled DiLoCo's syncer: a CPU process that holds the global fragments and the outer optimizer.

It hosts the run's ``TCPStore`` (``wire.py``) and loops over its inbox:

* ``hello``: once every learner present at the start has said hello, the run's clock starts and each
  gets time zero; a learner that says hello later (returning after a failure, or joining) gets the
  global model in fp32 and the outer step after the last one it completed, and trains on from there.
* ``report``: learner m's pseudo-gradient of fragment p for outer step t. If p's round t is merged
  already, the report is late: it is answered at once with the global fragment and joins p's next
  merge. Else it waits in p's queue (how long, its reply says: the learner's ``idle``). Fragment p's
  round is merged once ``schedule.quorum`` (K) reports are in and the grace window after that has
  passed (``schedules.decoupled.grace_window_s``, the same rule the simulator plays); every fragment
  is merged at once when no further report can arrive, every learner present whose last report is
  not yet answered having a report waiting (``no_report_can_arrive``: every present learner
  reported it, or fewer than K are left; docs/decoupled.md). Late reports left when nobody can
  report any more are merged into the final model. The merge screens the reports (``robust.screen``: NaN, Inf or an
  outsized norm is left out), weighs the others by tokens (``merge.py``), takes the outer step on the
  global fragment, and answers every report with the new global fragment, encoded at
  ``schedule.bits`` as the difference against the copy that learner holds (the syncer keeps each
  learner's copy exactly, so the error does not build up).
* ``done``: the learner finished; nobody waits for it any more.

A learner whose heartbeat stops for ``network.detection_timeout_s`` is gone: its queued reports are
dropped (it weighs zero) and merges it held up go ahead. The syncer never waits on one learner: a
merge needs only K reports and the grace window. When every learner is done (or the launcher says
no learner process is left) it writes the run's outputs (``outputs.py``), as rank 0 of a
collective run does.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from islands.schedules.decoupled import grace_window_s, no_report_can_arrive
from islands.schedules.layout import EMBEDDINGS
from islands.units import BITS_PER_BYTE, BITS_PER_GBIT, MS_PER_S

from ..config import RunPlan
from ..core.data import validation_batches
from ..core.loop import default_corpus, model_config
from ..core.model import build_model
from ..core.outer import make_outer_optimizer, named_fragments
from ..core.tracing import Clock
from ..exchange.quantize import decode, encode, encoded_bytes, padded_length
from ..exchange.robust import contribution_stats, screen
from ..runtime.store import publish_run_clock
from .merge import merge, token_weight
from .wire import INBOX, OVER, from_bytes, key, pack, to_bytes, unpack

CHECK_S = 0.05  # how often heartbeats are looked at


@dataclass
class Learner:
    incarnation: str | None = None  # its current start (``island.incarnation``)
    incarnations: list[str] = field(default_factory=list)
    present: bool = False
    done: bool = False
    beats: int = -1
    beat_s: float = 0.0  # when its heartbeat last moved (syncer clock)
    replied_s: float = 0.0  # when it was last sent a global fragment
    gone_s: float | None = None
    outer_done: int = 0  # outer steps it completed (its last fragment of them came back)
    steps: int = 0
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Report:
    island: int
    incarnation: str
    seq: int
    outer_step: int
    fragment: int
    delta: torch.Tensor
    weight: float
    arrived_s: float
    slack_s: float


class Ticker:
    """Wakes the syncer's loop, which waits on its inbox: a ``tick`` every ``CHECK_S`` (heartbeats)
    and at the next grace window's end (``wake_at``, syncer clock, set by the loop)."""

    def __init__(self, store: Any, now: Callable[[], float]):
        self.store, self.now = store, now
        self.wake_at_s = math.inf
        self.stopping = False
        self.changed = threading.Condition()
        self.thread = threading.Thread(target=self.run, name="islands-syncer-ticker", daemon=True)
        self.thread.start()

    def wake_at(self, at_s: float) -> None:
        with self.changed:
            if at_s != self.wake_at_s:
                self.wake_at_s = at_s
                self.changed.notify()

    def run(self) -> None:
        tick = pack({"kind": "tick"})
        with self.changed:
            while not self.stopping:
                due_s = min(CHECK_S, self.wake_at_s - self.now())
                if due_s > 0 and self.changed.wait(due_s):
                    continue  # the next deadline moved: wait for the new one
                self.store.queue_push(INBOX, tick)
                if self.wake_at_s <= self.now():
                    self.wake_at_s = math.inf  # woken for it; the loop sets the next one

    def stop(self) -> None:
        with self.changed:
            self.stopping = True
            self.changed.notify()
        self.thread.join()


class GlobalFragment:
    """One fragment's global weights (flat fp32), its outer optimizer, how RDA splits it, and the
    model's parameters it stands for (loaded for the final evaluation)."""

    def __init__(self, params: Sequence[tuple[str, torch.Tensor]], plan: RunPlan):
        self.params = [p for _, p in params]
        self.flat = torch.cat([p.detach().float().flatten() for _, p in params])
        self.sizes = [p.numel() for _, p in params]
        self.embeddings = [name.startswith(EMBEDDINGS) for name, _ in params]
        self.optimizer = make_outer_optimizer([self.flat], plan.spec)
        self.padded = padded_length(self.flat.numel(), 1)

    def step(self, outer_gradient: torch.Tensor) -> None:
        self.flat.grad = outer_gradient
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


class Syncer:
    def __init__(self, plan: RunPlan, store: Any, out_dir: Path):
        self.plan, self.store, self.out_dir = plan, store, out_dir
        spec, schedule = plan.spec, plan.scenario.schedule
        self.bits, self.quorum, self.window = schedule.bits, schedule.quorum, schedule.grace_window
        self.model = build_model(model_config(plan), spec.seed, "cpu")
        self.fragments = [
            GlobalFragment(params, plan)
            for params in named_fragments(self.model, spec.n_layer, plan.fragments, plan.schedule)
        ]
        self.held = {
            island: [f.flat.clone() for f in self.fragments] for island in range(plan.islands)
        }
        self.learners = {island: Learner() for island in range(plan.islands)}
        self.waiting: dict[int, list[Report]] = {
            p: [] for p in range(plan.fragments)
        }  # the open round's
        self.late: dict[int, list[Report]] = {
            p: [] for p in range(plan.fragments)
        }  # answered, to merge
        self.open_round = dict.fromkeys(
            range(plan.fragments), 0
        )  # the outer step p's next merge is for
        self.deadline: dict[int, float] = {}
        self.clock: Clock | None = None
        self.counts = {
            "merges": 0,
            "merges_below_quorum": 0,
            "late_reports": 0,
            "reports": 0,
            "dropped_reports": 0,
            "leaves": 0,
            "joins": 0,
        }
        self.lost_compute_s = 0.0
        self.excluded: list[dict[str, Any]] = []
        self.eval_batches = validation_batches(
            default_corpus(plan).validation,
            spec.eval_batches,
            spec.batch_size,
            spec.block_size,
            spec.seed,
            "cpu",
        )
        self.syncer_rate = (
            math.inf
            if plan.scenario.syncer.bandwidth_gbps is None
            else plan.scenario.syncer.bandwidth_gbps * BITS_PER_GBIT / BITS_PER_BYTE
        )

    def now(self) -> float:
        return self.clock.now() if self.clock else 0.0

    # --- the loop --------------------------------------------------------------------------------

    def run(self) -> None:
        """Merge the learners' reports until every learner is done (``outputs.write_run``
        then writes the run's outputs)."""
        ticker = Ticker(self.store.clone(), self.now)
        checked_s = -math.inf
        try:
            while not self.over():
                message = self.pop()
                if message is not None:
                    self.handle(*unpack(message))
                for fragment, deadline in list(self.deadline.items()):
                    if self.now() >= deadline:
                        self.merge(fragment)
                ticker.wake_at(min(self.deadline.values(), default=math.inf))
                if self.clock and self.now() - checked_s >= CHECK_S:
                    checked_s = self.now()
                    self.check_heartbeats()
        finally:
            ticker.stop()

    def pop(self) -> bytes | None:
        """The next message (the ticker's wake-ups among them); None if even those stopped coming."""
        try:
            return self.store.queue_pop(INBOX)
        except RuntimeError:
            return None

    def over(self) -> bool:
        learners = self.learners.values()
        if self.clock and all(learner.done for learner in learners):
            return True
        if self.store.check([OVER]):
            return True
        timeout_s = self.plan.spec.timeout_s
        return (
            bool(self.clock)
            and not any(learner.present for learner in learners)
            and all(
                learner.done
                or (learner.gone_s is not None and self.now() - learner.gone_s > timeout_s)
                for learner in learners
            )
        )

    def handle(self, header: dict[str, Any], payload: bytes) -> None:
        kind = header["kind"]
        if kind == "tick":
            return
        island = header["island"]
        if kind == "hello":
            self.hello(island, header["incarnation"])
            return
        learner = self.learners[island]
        if header["incarnation"] != learner.incarnation:
            return  # from an incarnation that was given up on
        if kind == "report":
            self.report(header)
        elif kind == "done":
            learner.done, learner.present, learner.steps = True, False, header["steps"]
            learner.info = {
                "eval_losses": header["eval_losses"],
                "mean_step_compute_s": header["mean_step_compute_s"],
            }
            self.consider_all()

    # --- learners come and go --------------------------------------------------------------------

    def hello(self, island: int, incarnation: str) -> None:
        learner = self.learners[island]
        if self.clock and learner.present:
            self.depart(island)  # back before its silence was noticed: the old incarnation is gone
        learner.incarnation, learner.present, learner.gone_s = incarnation, True, None
        learner.incarnations.append(incarnation)
        if self.clock is None:
            if all(self.learners[i].present for i in self.plan.initial_members()):
                self.start()
            return
        self.counts["joins"] += 1
        self.held[island] = [f.flat.clone() for f in self.fragments]
        learner.beat_s = learner.replied_s = self.now()
        weights = torch.cat([f.flat for f in self.fragments]).numpy().tobytes()
        self.reply(
            island,
            {"trace_s": self.now(), "outer_step": learner.outer_done, "weights": True},
            weights,
        )

    def start(self) -> None:
        self.clock = Clock()
        publish_run_clock(self.store, 0.0)
        for island in self.plan.initial_members():
            self.learners[island].beat_s = 0.0
            self.reply(island, {"trace_s": self.now(), "outer_step": 0, "weights": False})

    def reply(self, island: int, header: dict[str, Any], payload: bytes = b"") -> None:
        self.store.queue_push(
            key("to", island, self.learners[island].incarnation), pack(header, payload)
        )

    def check_heartbeats(self) -> None:
        for island, learner in self.learners.items():
            if not learner.present:
                continue
            beats = int(self.store.add(key("beat", island), 0))
            if beats != learner.beats:
                learner.beats, learner.beat_s = beats, self.now()
            elif self.now() - learner.beat_s > self.plan.scenario.network.detection_timeout_s:
                self.depart(island)

    def depart(self, island: int) -> None:
        """Learner ``island`` is gone: its queued reports are dropped and the work since its last
        global fragment is lost."""
        learner = self.learners[island]
        learner.present, learner.gone_s = False, self.now()
        self.counts["leaves"] += 1
        self.lost_compute_s += max(0.0, learner.beat_s - learner.replied_s)
        for fragment, reports in self.waiting.items():
            kept = [r for r in reports if r.island != island]
            self.counts["dropped_reports"] += len(reports) - len(kept)
            self.waiting[fragment] = kept
        print(
            f"syncer: learner {island} is gone (no heartbeat for "
            f"{self.plan.scenario.network.detection_timeout_s:g} s); merges go on without it",
            flush=True,
        )
        self.consider_all()

    # --- reports and merges ----------------------------------------------------------------------

    def report(self, header: dict[str, Any]) -> None:
        island, incarnation, seq = header["island"], header["incarnation"], header["seq"]
        names = [key("up", island, incarnation, seq, index) for index in range(header["pieces"])]
        payload = b"".join(self.store.multi_get(names))
        for name in names:
            self.store.delete_key(name)
        fragment = self.fragments[header["fragment"]]
        delta = decode(from_bytes(payload), self.bits, fragment.padded)[: header["values"]]
        self.counts["reports"] += 1
        report = Report(
            island,
            incarnation,
            seq,
            header["outer_step"],
            header["fragment"],
            delta,
            token_weight(header["tokens"], header["steps"]),
            self.now(),
            header["slack_s"],
        )
        if report.outer_step < self.open_round[report.fragment]:
            self.answer_late(report)
            return
        self.waiting[report.fragment].append(report)
        self.consider(report.fragment)

    def answer_late(self, report: Report) -> None:
        """Its round is merged already: the learner gets the newest global fragment at once and its
        pseudo-gradient joins the fragment's next merge (``late_reports``)."""
        self.counts["late_reports"] += 1
        self.late[report.fragment].append(report)
        self.send_back(report, None)
        if self.learners[report.island].outer_done >= self.plan.scenario.schedule.outer_steps:
            self.consider_all()  # its last report: merges that waited for it go ahead

    def present(self) -> set[int]:
        """The learners that may still send a report: present, and their last report not yet answered."""
        last = self.plan.scenario.schedule.outer_steps
        return {
            island
            for island, learner in self.learners.items()
            if learner.present and not learner.done and learner.outer_done < last
        }

    def consider_all(self) -> None:
        for fragment in range(len(self.fragments)):
            self.consider(fragment)
        if not self.present() and not self.queued():
            for fragment, late in self.late.items():
                if late:  # nobody is left to report: late pseudo-gradients go into the final model
                    self.late[fragment] = []
                    self.outer_step(fragment, late)

    def queued(self) -> set[int]:
        """The learners with a report waiting here, whatever its fragment."""
        return {report.island for reports in self.waiting.values() for report in reports}

    def consider(self, fragment: int) -> None:
        """Merge every fragment when no further report can arrive (``no_report_can_arrive``); else
        start the grace window at the quorum."""
        reports = self.waiting[fragment]
        if not reports:
            self.deadline.pop(fragment, None)
            return
        if no_report_can_arrive(self.present(), self.queued()):
            for queued in range(len(self.fragments)):
                self.merge(queued)
        elif len(reports) >= self.quorum and fragment not in self.deadline:
            first = reports[0]
            slack_s = (
                first.slack_s
                - self.transfers_s(first.island, fragment)
                - (self.now() - first.arrived_s)
            )
            self.deadline[fragment] = self.now() + grace_window_s(self.window, slack_s)

    def transfers_s(self, island: int, fragment: int) -> float:
        """The syncer's estimate of a learner's upload and download of a fragment: latency plus the
        encoded fragment at the slower link, each way."""
        worker = self.plan.workers[island]
        latency_s = worker.latency_s + self.plan.scenario.syncer.latency_ms / MS_PER_S
        fragment_bytes = encoded_bytes(self.fragments[fragment].padded, self.bits)
        up = min(worker.upload_bytes_per_s, self.syncer_rate)
        down = min(worker.download_bytes_per_s, self.syncer_rate)
        return 2 * latency_s + fragment_bytes / up + fragment_bytes / down

    def merge(self, fragment: int) -> None:
        """Merge fragment ``fragment``'s open round (with the late reports since its last merge) and
        answer the round's reports."""
        self.deadline.pop(fragment, None)
        reports, self.waiting[fragment] = self.waiting[fragment], []
        if not reports:
            return
        self.open_round[fragment] = max(r.outer_step for r in reports) + 1
        late, self.late[fragment] = self.late[fragment], []
        reasons = self.outer_step(fragment, reports, late)
        for index, report in enumerate(reports):
            self.send_back(report, reasons.get(index))
        if any(
            self.learners[r.island].outer_done >= self.plan.scenario.schedule.outer_steps
            for r in reports
        ):
            self.consider_all()  # a learner sent its last report: merges that waited for it go ahead

    def outer_step(
        self, fragment: int, reports: list[Report], late: Sequence[Report] = ()
    ) -> dict[int, str]:
        """Screen ``reports`` and ``late`` together, weigh the rest by tokens and take the outer step
        on the global fragment; the reasons for those left out, by index. Below the quorum: fewer
        than K of ``reports``."""
        if len(reports) < self.quorum:
            self.counts["merges_below_quorum"] += 1
        reports = [*reports, *late]
        verdict = screen(
            [contribution_stats(r.delta) for r in reports], self.plan.spec.screen_norm_factor
        )
        accepted = [r for r, ok in zip(reports, verdict.accepted) if ok and r.weight > 0]
        target = self.fragments[fragment]
        if accepted:
            target.step(
                merge(
                    [r.delta for r in accepted],
                    [r.weight for r in accepted],
                    self.plan.spec.aggregation,
                    target.sizes,
                    target.embeddings,
                )
            )
        self.counts["merges"] += 1
        for index, reason in verdict.reasons.items():
            report = reports[index]
            self.excluded.append(
                {
                    "outer_step": report.outer_step,
                    "fragment": fragment,
                    "island": report.island,
                    "reason": reason,
                }
            )
        return verdict.reasons

    def send_back(self, report: Report, reason: str | None) -> None:
        """The new global fragment to the report's learner, as the difference against its copy."""
        target = self.fragments[report.fragment]
        held = self.held[report.island][report.fragment]
        difference = torch.zeros(target.padded)
        difference[: held.numel()] = target.flat.detach() - held
        data = encode(difference, self.bits)
        held += decode(data, self.bits, target.padded)[: held.numel()]
        self.reply(
            report.island,
            {
                "outer_step": report.outer_step,
                "fragment": report.fragment,
                "excluded": reason,
                "queued_s": self.now() - report.arrived_s,
            },
            to_bytes(data),
        )
        self.store.set(key("ready", report.island, report.incarnation, report.seq), "1")
        learner = self.learners[report.island]
        learner.replied_s = self.now()
        if report.fragment == len(self.fragments) - 1:
            learner.outer_done = report.outer_step + 1
