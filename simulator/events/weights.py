"""A joiner's download of the global state, from the holders that ``network.weights_from`` picks
(``schedules/serving.py``: the rule the trainer plays too).

A download is made of parts: one (``"fastest"``: the whole state from the holder that gives the joiner
the highest rate when it starts) or one per holder present when it starts (``"striped"``: equal
parts). Each part is one transfer from its holder to the joiner, over the holder's uplink and the
joiner's downlink, which it shares with every other flow there. A holder that leaves takes the parts
it was sending with them: each starts again from the fastest holder then (``Churn.download_when_quiet``
waits for the quiet moment). The download is in once every part is; its trace row (comm, the state's
bytes) runs from the start of the attempt that got through: the last time no part was in or in flight.
What is thrown away is wasted (a ``wasted`` row of the joiner, which receives it, as its comm row
counts what it received): a part its holder's departure broke, what it had moved; a download its
joiner no longer needs (it left, or starts alone) or that the run's end leaves unfinished, its parts in
and what its parts in flight had moved.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import simpy

from islands.schedules import serving
from islands.trace import NO_FRAGMENT, WASTED

from ..network.collectives import copy_leg, launch
from ..workers import WorkerState
from .context import RunContext


@dataclass(eq=False)
class Part:
    """One part of a download: its bytes, and the holder sending it now (None: none is)."""

    download: Download
    bytes: float
    holder: int | None = None
    transfer: Any = None
    done: bool = False
    started_s: float = 0.0  # when it was last sent (launched)
    arrived_s: float = 0.0  # when it arrived, once ``done``


@dataclass(eq=False)
class Download:
    """A joiner's download: its parts (none before it first starts), when the attempt that is to get
    through started, and an event that fires when a part arrives or breaks (``changed``)."""

    state: WorkerState
    parts: list[Part] = field(default_factory=list)
    started_s: float = 0.0
    changed: simpy.Event | None = None

    @property
    def complete(self) -> bool:
        return bool(self.parts) and all(part.done for part in self.parts)


class Downloads:
    """The downloads of the global state in flight in one run, and what each holder is sending."""

    def __init__(self, context: RunContext):
        self.env, self.scenario, self.network, self.topology = (
            context.env,
            context.scenario,
            context.network,
            context.topology,
        )
        self.fleet, self.trace, self.progress = context.fleet, context.trace, context.progress
        self.striped = context.scenario.network.weights_from == "striped"
        self.of: dict[int, Download] = {}  # by joiner
        # by holder: the parts it is sending, in the order they began (a dict, not a set: the order
        # in which their joiners hear of a departure must not depend on addresses)
        self.sent_by: dict[int, dict[Part, None]] = {}
        self.sending: Counter[int] = Counter()

    def begin(self, state: WorkerState) -> Download:
        download = Download(state)
        self.of[state.worker.rank] = download
        return download

    def send(self, download: Download, holders: Iterable[int]) -> simpy.Event | None:
        """Send every part that is neither in nor in flight, each from the holder the rule picks now
        (striped, the first time: one part from each holder); the event that fires when a part arrives
        or breaks, or None where no holder is present."""
        holders = sorted(holders)
        if not holders:
            return None
        if not any(part.done or part.holder is not None for part in download.parts):
            download.started_s = self.env.now
        if not download.parts:
            count = len(holders) if self.striped else 1
            download.parts = [
                Part(download, size) for size in serving.parts(self.scenario.weights_bytes, count)
            ]
            if self.striped:
                for part, holder in zip(download.parts, holders):
                    self.launch(part, holder)
        for part in download.parts:
            if not part.done and part.holder is None:
                self.launch(part, self.fastest(download.state.worker.rank, holders))
        download.changed = self.env.event()
        return download.changed

    def fastest(self, joiner: int, holders: list[int]) -> int:
        """``serving.fastest`` among ``holders`` (ranks), from the scenario's links and what each sends."""
        workers = self.fleet.state_of
        chosen = serving.fastest(
            (
                serving.Holder(
                    rank,
                    workers[rank].worker.upload_bytes_per_s,
                    self.sending[rank],
                    self.topology.hop_latency_s(rank, joiner),
                )
                for rank in holders
            ),
            workers[joiner].worker.download_bytes_per_s,
        )
        assert chosen is not None, "send has a holder"
        return chosen.rank

    def launch(self, part: Part, holder: int) -> None:
        joiner = part.download.state.worker.rank
        part.holder, part.started_s = holder, self.env.now
        part.transfer = launch(
            self.network, copy_leg(holder, joiner, part.bytes, self.topology, self.scenario.network)
        )
        part.transfer.done.callbacks.append(partial(self.arrived, part, part.transfer))
        self.sent_by.setdefault(holder, {})[part] = None
        self.sending[holder] += 1

    def arrived(self, part: Part, transfer: Any, _event: simpy.Event) -> None:
        if part.transfer is not transfer:
            return  # a transfer its holder's departure cancelled as it ended
        self.stopped(part)
        part.done, part.arrived_s = True, self.env.now
        if part.download.complete:
            self.changed(part.download)

    def stopped(self, part: Part) -> None:
        """``part`` is no longer sent by its holder (it arrived, or broke)."""
        assert part.holder is not None, "a part in flight has a holder"
        del self.sent_by[part.holder][part]
        self.sending[part.holder] -= 1
        part.holder, part.transfer = None, None

    def changed(self, download: Download) -> None:
        if download.changed is not None and not download.changed.triggered:
            download.changed.succeed()

    def holder_left(self, holder: int) -> None:
        """``holder`` left: every part it was sending breaks (to be sent again by another), and what it
        had moved is wasted."""
        for part in self.sent_by.pop(holder, {}):
            self.waste(part)
            self.network.cancel(part.transfer)
            part.holder, part.transfer = None, None
            self.changed(part.download)
        self.sending.pop(holder, None)

    def drop(self, joiner: int) -> None:
        """``joiner`` needs its download no more (it left, or started alone): its parts stop, and what
        they had moved is wasted."""
        download = self.of.pop(joiner, None)
        if download is None:
            return
        for part in download.parts:
            self.waste(part)
            if part.holder is not None:
                self.network.cancel(part.transfer)
                self.stopped(part)

    def close(self) -> None:
        """The run is over: the downloads still unfinished are never used."""
        for download in self.of.values():
            for part in download.parts:
                self.waste(part)

    def waste(self, part: Part) -> None:
        """``part`` is thrown away: a wasted row of its joiner, from when it was sent, with what it
        moved (all of it, if it was in)."""
        if part.done:
            end_s, moved = part.arrived_s, part.bytes
        elif part.holder is not None:
            end_s, moved = self.env.now, part.transfer.moved_bytes(self.env.now)
        else:
            return  # waiting for a holder: nothing in flight
        state = part.download.state
        self.trace.add(
            part.started_s,
            end_s,
            state.worker.rank,
            state.worker.island,
            WASTED,
            moved,
            NO_FRAGMENT,
            self.progress.completed_outer,
        )

    def finish(self, download: Download) -> None:
        """The download is in: its row (``comm``, the state's bytes)."""
        state = download.state
        del self.of[state.worker.rank]
        self.trace.add(
            download.started_s,
            self.env.now,
            state.worker.rank,
            state.worker.island,
            "comm",
            self.scenario.weights_bytes,
            NO_FRAGMENT,
            self.progress.completed_outer,
        )
