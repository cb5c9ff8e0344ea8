"""A Decoupled DiLoCo learner: one island's process, on its own clock, talking only to the syncer.

The ``Trainer`` runs the same loop as for every schedule; this module is its world
(``DecoupledWorld``) and its transport (``SyncerTransport``). A learner never meets another: it says
hello to the syncer (``syncer_process.py``) and gets the run's clock (and, returning after a failure, the
global model and the outer step it trains from next); each fragment's exchange is a round trip on
the learner's one exchange thread: encode the pseudo-gradient at ``schedule.bits``, upload it in
pieces, push the report, wait until the syncer has merged it (``idle`` for as long as the syncer
says the report waited for other learners' there; the rest of the wait is the upload), download the
global fragment as a difference against the copy the learner holds (``stall``: its own
bytes moving), and the loop adopts it at the due step. It evaluates its own copy of the global model
alone, and its trace rows go to the store as they are recorded, for the syncer to write the run's
outputs. Under an emulated WAN each upload and download is paced as one transfer between the
learner's link and the syncer's (``trainer.paced``'s pacer, the syncer's link last).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch

from islands.emulation.shaper import pacer_from_config
from islands.errors import UserError
from islands.schedules import SyncPoint
from islands.units import MS_PER_S

from ..config import RunPlan
from ..core.faults import kill_point
from ..core.outer import Fragment
from ..core.tracing import Clock, Recorder
from ..core.world import Ending, Entry, EvaluateOn, Groups, Local, Start, flatten
from ..exchange.comm import Echo
from ..exchange.quantize import decode, encode, encoded_bytes, padded_length
from ..exchange.robust import Verdict
from ..exchange.sync import Exchange
from ..runtime.store import HEARTBEAT_S, connect, run_time_s
from .wire import INBOX, from_bytes, key, pack, split_pieces, to_bytes, unpack

JOIN_POLL_S = 0.05


@dataclass
class Welcome:
    """The syncer's answer to a hello: the run's clock, the outer step to train from, and (a
    returning or late learner) the global model, downloaded from ``download_s[0]`` to ``[1]``."""

    trace_s: float
    outer_step: int
    weights: torch.Tensor | None
    download_s: tuple[float, float]


class SyncerLink:
    """A learner's connections to the syncer's store: one per thread that uses it (the training
    thread, the exchange thread, the heartbeat), so a blocking wait on one never holds up another."""

    def __init__(
        self, plan: RunPlan, island: int, incarnation: str, host: str, port: int, pacer: str | None
    ):
        self.plan, self.island, self.incarnation = plan, island, incarnation
        self.timeout_s = plan.spec.timeout_s
        self.main = connect(host, port, False, self.timeout_s)
        self.exchange = connect(host, port, False, self.timeout_s)
        self.replies = key("to", island, incarnation)
        self.pacer = pacer_from_config(pacer) if pacer else None
        self.syncer_link = plan.islands  # the syncer's link follows the learners' in the pacer
        self.hop_latency_s = (
            plan.workers[island].latency_s + plan.scenario.syncer.latency_ms / MS_PER_S
        )
        self.stopping = threading.Event()
        self.beat_store = connect(host, port, False, self.timeout_s)
        self.beating = threading.Thread(target=self.beat, name="islands-learner-beat", daemon=True)
        self.beating.start()

    def beat(self) -> None:
        beat = key("beat", self.island)
        while not self.stopping.wait(HEARTBEAT_S):
            try:
                self.beat_store.add(beat, 1)
            except RuntimeError:
                return  # the syncer is gone: the exchange thread's wait says so

    def paced(self, sent_bytes: int, received_bytes: int):
        """One transfer between this learner's link and the syncer's, under an emulated WAN."""
        if self.pacer is None:
            return contextlib.nullcontext()
        return self.pacer.transfer(
            self.island, sent_bytes, received_bytes, self.hop_latency_s, [self.syncer_link]
        )

    def hello(self, join_at_s: float | None) -> Welcome:
        """Wait for the join time (a returning learner), say hello, take the syncer's answer."""
        while join_at_s is not None and (run_time_s(self.main) or -1.0) < join_at_s:
            time.sleep(JOIN_POLL_S)
        self.main.queue_push(
            INBOX, pack({"kind": "hello", "island": self.island, "incarnation": self.incarnation})
        )
        asked = time.monotonic()
        reply = self.pop(self.main, self.plan.spec.timeout_s)
        received = time.monotonic()
        header, payload = unpack(reply)
        weights = from_bytes(payload).view(torch.float32) if header["weights"] else None
        return Welcome(
            header["trace_s"],
            header["outer_step"],
            weights,
            (header["trace_s"] - (received - asked), header["trace_s"]),
        )

    def pop(self, store: Any, timeout_s: float) -> bytes:
        store.set_timeout(timedelta(seconds=timeout_s))
        try:
            return store.queue_pop(self.replies)
        except RuntimeError:
            raise UserError(
                f"island {self.island}: the syncer did not answer within trainer.timeout_s = "
                f"{timeout_s:g} s"
            ) from None

    def wait_ready(self, seq: int) -> None:
        ready = key("ready", self.island, self.incarnation, seq)
        try:
            self.exchange.wait([ready], timedelta(seconds=self.timeout_s))
        except RuntimeError:
            raise UserError(
                f"island {self.island}: the syncer merged nothing within trainer.timeout_s = "
                f"{self.timeout_s:g} s"
            ) from None
        self.exchange.delete_key(ready)

    def done(self, document: dict[str, Any]) -> None:
        """Tell the syncer this learner is done, and stop the heartbeat (joined: a thread still in the
        store's C++ code when the interpreter exits would abort the process)."""
        self.main.queue_push(
            INBOX,
            pack(
                {"kind": "done", "island": self.island, "incarnation": self.incarnation, **document}
            ),
        )
        self.close()

    def close(self) -> None:
        self.stopping.set()
        self.beating.join()


class StoreSink:
    """The recorder's sink: every trace row appended to ``rows/I/N`` in the store as it is recorded."""

    def __init__(self, store: Any, name: str):
        self.store, self.name = store, name

    def write(self, text: str) -> None:
        self.store.append(self.name, text)

    def flush(self) -> None:
        pass


@dataclass
class StepTime:
    """A learner's seconds per inner step: its pace, or its mean compute over the steps it trained
    (from ``first_step``, where it entered) up to the latest launch."""

    paced_s: float
    recorder: Recorder
    first_step: int
    step: int = 0

    def __call__(self) -> float:
        if self.paced_s > 0:
            return self.paced_s
        done = self.step - self.first_step
        return self.recorder.seconds("compute") / done if done else 0.0


class SyncerTransport:
    """Each exchange a round trip to the syncer on one background thread; the pseudo-gradient is
    encoded at the launch, on the training thread (a thread that encodes while the training thread
    computes waited 10-30x the encoding's own time for the interpreter here)."""

    def __init__(
        self,
        link: SyncerLink,
        plan: RunPlan,
        clock: Clock,
        held: Callable[[int], torch.Tensor],
        first_step: int,
        step_time_s: StepTime,
    ):
        self.link, self.plan, self.clock, self.held = link, plan, clock, held
        self.bits = plan.scenario.schedule.bits
        self.tokens_per_step = plan.tokens_per_step // plan.islands  # this learner's
        self.step_time_s = step_time_s
        self.base_step: dict[int, int] = {p: first_step for p in range(plan.fragments)}
        self.seq = 0
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="islands-learner")

    def reach(self, step: int, contributes: bool) -> None:
        pass

    def launch(self, step: int, point: SyncPoint, delta: torch.Tensor, contributes: bool) -> Future:
        self.step_time_s.step = step
        steps = step - self.base_step[point.fragment]
        launched_s = self.clock.now()
        values = delta.numel()
        padded = torch.zeros(padded_length(values, 1))
        padded[:values] = delta.cpu()
        payload = to_bytes(encode(padded, self.bits))
        return self.pool.submit(self.round_trip, point, payload, values, launched_s, steps)

    def collect(self, point: SyncPoint, handle: Future) -> Exchange:
        return handle.result()

    def applied(self, point: SyncPoint) -> None:
        self.base_step[point.fragment] = int(point.apply_step)

    def round_trip(
        self, point: SyncPoint, payload: bytes, values: int, launched_s: float, steps: int
    ) -> Exchange:
        """Upload, wait for the merge, download; the global fragment is the copy held plus the
        difference the syncer sent."""
        self.seq += 1
        started_s = self.clock.now()
        self.upload(point, payload, values, steps, slack_s=self.slack_s(launched_s, started_s))
        self.link.wait_ready(self.seq)
        merged_s = self.clock.now()
        header, difference = self.download(values)
        excluded = header.get("excluded")
        verdict = Verdict((excluded is None,), {0: excluded} if excluded else {})
        held = self.held(point.fragment)
        return Exchange(
            held + difference.to(held.device),
            started_s,
            self.clock.now(),
            len(payload),
            verdict,
            queued=(merged_s - header["queued_s"], merged_s),
        )

    def slack_s(self, launched_s: float, started_s: float) -> float:
        """What is left of tau steps of this learner's compute when its upload starts (the syncer
        takes the transfers off for the grace window, ``schedules.decoupled.grace_window_s``)."""
        return self.plan.scenario.schedule.overlap_steps * self.step_time_s() - (
            started_s - launched_s
        )

    def upload(
        self, point: SyncPoint, payload: bytes, values: int, steps: int, slack_s: float
    ) -> None:
        """The payload's pieces, then the report that names them (``wire``)."""
        link = self.link
        pieces = split_pieces(payload)
        with link.paced(len(payload), 0):
            for index, piece in enumerate(pieces):
                link.exchange.set(key("up", link.island, link.incarnation, self.seq, index), piece)
                kill_point("syncer-upload", link.island)
            link.exchange.queue_push(
                INBOX,
                pack(
                    {
                        "kind": "report",
                        "island": link.island,
                        "incarnation": link.incarnation,
                        "seq": self.seq,
                        "outer_step": point.outer_step,
                        "fragment": point.fragment,
                        "values": values,
                        "pieces": len(pieces),
                        "tokens": steps * self.tokens_per_step,
                        "steps": steps,
                        "slack_s": slack_s,
                    }
                ),
            )

    def download(self, values: int) -> tuple[dict[str, Any], torch.Tensor]:
        padded = padded_length(values, 1)
        with self.link.paced(0, encoded_bytes(padded, self.bits)):
            header, data = unpack(self.link.pop(self.link.exchange, self.link.timeout_s))
        return header, decode(from_bytes(data), self.bits, padded)[:values]

    def close(self) -> None:
        self.pool.shutdown(wait=True)


class DecoupledWorld:
    """A learner's world: itself, the syncer, and nobody else (``core/world.py``'s ``World``)."""

    def __init__(self, plan: RunPlan, island: int, link: SyncerLink, join_at_s: float | None):
        self.plan, self.island, self.link, self.join_at_s = plan, island, link, join_at_s
        self.groups = Groups(world=Echo(1), cross=Echo(1))
        self.welcome: Welcome | None = None
        self.syncer_transport: SyncerTransport | None = None

    def share_initial_weights(self, model: torch.nn.Module) -> None:
        """Nothing to share: the learners and the syncer build the model from one seed."""

    def holds_checkpoint(self, resume_dir) -> bool:
        return False

    def agree_on_resume(self, error: str | None, state: dict[str, Any] | None) -> list[str | None]:
        return [error]

    def start_s(self, state: dict[str, Any] | None) -> float:
        self.welcome = self.link.hello(self.join_at_s)
        return self.welcome.trace_s

    def transport(
        self, exchanger, recorder: Recorder, fragments: list[Fragment]
    ) -> SyncerTransport:
        assert self.welcome is not None, "start_s said hello first"
        first_step = self.welcome.outer_step * self.plan.eval_every_steps
        held = lambda fragment: flatten(fragments[fragment].global_params)  # noqa: E731
        self.syncer_transport = SyncerTransport(
            self.link,
            self.plan,
            recorder.clock,
            held,
            first_step,
            StepTime(self.plan.pace_s(self.island), recorder, first_step),
        )
        return self.syncer_transport

    def entering(self, local: Local) -> contextlib.AbstractContextManager[Start | None]:
        """A returning (or late) learner catches up: the global model the syncer sent with its answer to
        hello."""
        welcome = self.welcome
        assert welcome is not None, "start_s said hello first"
        if welcome.weights is None:
            return contextlib.nullcontext()
        return contextlib.nullcontext(
            Start(catch_up=Entry(welcome.weights, welcome.outer_step, welcome.download_s))
        )

    def rows_sink(self) -> StoreSink:
        return StoreSink(self.link.main, key("rows", self.island, self.link.incarnation))

    def between_steps(self, local: Local) -> None:
        pass

    def members(self) -> list[int]:
        return [self.island]

    def reports(self) -> bool:
        return self.island == 0

    def evaluate(self, evaluate_on: EvaluateOn) -> float:
        """This learner's copy of the global model, on every validation batch, alone."""
        return evaluate_on(self.groups.world, None)

    def publish_clock(self, paused: bool = False) -> None:
        pass

    def pause_s(self, paused_s: float) -> float:
        """A learner's clock is its own: it stands still for as long as this learner paused."""
        return paused_s

    def save_checkpoint(self, period: int, out_dir, state: dict[str, Any]) -> None:
        pass

    def finish(self, ending: Ending) -> None:
        if self.syncer_transport:
            self.syncer_transport.close()
        self.link.done(
            {
                "steps": ending.step,
                "eval_losses": ending.run_info["eval_losses"],
                "mean_step_compute_s": ending.run_info["mean_step_compute_s"],
            }
        )

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state(self, state: dict[str, Any]) -> None:
        pass
