"""Who is training now: the membership of an elastic run, kept in a store no island hosts.

A gloo group dies with any member and torch.distributed cannot shrink one, so an elastic run keeps
its control plane apart from the data plane. The control plane is a ``TCPStore`` hosted by a
process that does not train (the local launcher, or torchrun's agent): islands keep their state in
it under ``islands/``. The data plane is one ``comm.StoreGroup`` per membership *epoch*, made from
the store under the epoch's prefix.

* Every collective the trainer needs runs through ``run(op)``: the op runs on the epoch's group,
  then the members vote in the store (``islands/epoch/N/op/K``): everyone done means commit; an
  error (a peer's socket closed, or ``collective_timeout_s`` passed) or no vote from someone within
  the detection timeout means abort, decided once by an atomic compare-and-set. On abort the
  survivors re-form and the op runs again among them: a broken all-reduce restarts, as in the
  simulator, and nobody applies a result that somebody else threw away.
* Failure detection: every island's heartbeat thread writes ``islands/alive/I`` every
  ``HEARTBEAT_S`` (its process and a beat counter, so it changes even while the island evaluates;
  a joiner from its request on) and, once a member, its progress to ``islands/progress/I``; it reads
  the other members' alive keys, noting when each last changed. A member silent for ``detection_timeout_s`` is
  gone, counted from its last beat: the simulator's rule (a departure is noticed detection_timeout_s
  after it happens, not after the others reach the next collective). A member never seen beating (a
  slow start, or a joiner that died at once) is given the detection timeout from the re-formation.
* Re-forming (``reform``): the first survivor to arrive at epoch N+1 waits until every member of
  epoch N has arrived or is gone (a member that still beats but never arrives is given up after
  ``collective_timeout_s`` more), then fixes the members of epoch N+1 as those who arrived. A
  departed member is then reported with the compute it lost: the time between its last applied sync
  and its last heartbeat (so it errs low by at most ``HEARTBEAT_S``).
* Joining (``request_join``, ``admit_joiners``): a new or returning island adds itself to
  ``islands/join/requests``; at the start of each outer boundary the members agree on how many
  requests they have seen and on who holds the state (the lowest such member is the *leader*, who
  reports and serves downloads), and if there are new requests all of them move to the next epoch
  with the joiners, who take part in the boundary's exchange while their state downloads in the
  background (``joining.py``).
* Forming an epoch's group (``form_group``): gloo's rendezvous cannot be abandoned (it waits in C++
  for every member), so the members first meet in the store, where a member's heartbeat showing it
  gone ends the wait (a joiner that died while the members formed the epoch admitting it): that
  death costs the detection timeout, not ``collective_timeout_s``.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar, cast

import torch.distributed as dist

from islands.errors import UserError

from ..core.world import Rejoin
from ..exchange.comm import StoreGroup
from ..runtime.store import HEARTBEAT_S, ROOT

POLL_S = 0.02
FIRST_POLL_S = 0.0005
STORE_WAIT_S = 600.0
JOIN_POLL_S = 0.5
MAX_FAILURES = 5

T = TypeVar("T")


def no_attempt() -> None:
    """``Membership.run``'s default: nobody hears of an abandoned attempt."""


class LeftOut(Rejoin):
    """This island was too late for the new epoch: the others count it as gone; it must join again."""


@dataclass(frozen=True)
class Timing:
    detection_s: float  # scenario network.detection_timeout_s
    collective_s: float  # trainer.collective_timeout_s


@dataclass
class Progress:
    """What the heartbeat publishes: trace seconds of the last applied sync and of the latest step,
    and the outer step the island was computing."""

    synced_s: float = 0.0
    now_s: float = 0.0
    outer_step: int = 0


@dataclass
class History:
    """Membership changes as every member saw them (identical on all members; joiners receive it)."""

    leaves: list[dict[str, Any]] = field(default_factory=list)
    joins: list[dict[str, Any]] = field(default_factory=list)
    epochs: list[dict[str, Any]] = field(default_factory=list)


class Membership:
    """One island's view of the membership; every method is called at the same point by all members."""

    def __init__(self, store: Any, beat_store: Any, island: int, timing: Timing):
        self.store = store
        self.beat_store = beat_store
        self.island = island
        self.timing = timing
        self.epoch = -1
        self.first_epoch = 0
        self.stateful: set[int] = (
            set()
        )  # members that hold the global state, as of the last boundary
        self.members: list[int] = []
        self.group: StoreGroup | None = None
        self.ops = 0
        self.admitted_joins = 0
        self.history = History()
        self.progress = Progress()
        self.on_install: Callable[[], None] = lambda: None
        self.now_s: Callable[[], float] = lambda: self.progress.now_s
        self.stopping = threading.Event()
        self.beats = 0
        self.last_change: dict[
            int, tuple[bytes, float]
        ] = {}  # island: (its heartbeat, when it changed)
        self.heartbeat = threading.Thread(target=self.beat, daemon=True, name="islands-heartbeat")

    # ------------------------------------------------------------------ the store
    def key(self, *parts: Any) -> str:
        return "/".join([ROOT, *map(str, parts)])

    def wait_key(self, key: str, timeout_s: float) -> bool:
        """Whether ``key`` was set within ``timeout_s`` (polled: the store's own wait logs its timeouts)."""
        deadline, pause_s = time.monotonic() + timeout_s, FIRST_POLL_S
        while not self.store.check([key]):
            if time.monotonic() >= deadline:
                return False
            time.sleep(pause_s)
            pause_s = min(2 * pause_s, POLL_S)
        return True

    def get(self, key: str) -> str:
        if not self.wait_key(key, STORE_WAIT_S):
            raise UserError(f"the run's store never set {key}; the island that should have is gone")
        return self.store.get(key).decode()

    def start_heartbeat(self) -> None:
        if not self.heartbeat.is_alive():
            self.beat_once()  # seen from now on, even if this process dies before the thread's first beat
            self.heartbeat.start()

    def beat(self) -> None:
        while not self.stopping.wait(HEARTBEAT_S):
            self.beat_once()
            self.watch(list(self.members))

    def beat_once(self) -> None:
        """Alive from the start; progress once a member (until the members have recorded a returning
        island's departure, its progress key must still describe the dead incarnation)."""
        self.beats += 1
        self.beat_store.set(self.key("alive", self.island), f"{os.getpid()}:{self.beats}")
        if self.members:
            self.beat_store.set(self.key("progress", self.island), json.dumps(vars(self.progress)))

    def watch(self, islands: list[int]) -> None:
        """Note when each other member's heartbeat last changed (this process's clock: no skew)."""
        keys = [self.key("alive", island) for island in islands if island != self.island]
        present = [key for key in keys if self.beat_store.check([key])]
        now = time.monotonic()
        for key, value in zip(present, self.beat_store.multi_get(present) if present else []):
            island = int(key.rsplit("/", 1)[1])
            if self.last_change.get(island, (None,))[0] != value:
                self.last_change[island] = (value, now)

    def gone(self) -> list[int]:
        """The members whose heartbeat has been silent for the detection timeout."""
        return [
            island
            for island in self.members
            if island != self.island and self.silent_s(island) >= self.timing.detection_s
        ]

    def seen(self, island: int) -> bool:
        """Whether this process has seen ``island``'s heartbeat at all."""
        return island in self.last_change

    def silent_s(self, island: int) -> float:
        """Seconds since ``island``'s heartbeat last changed, as this process saw it; 0 for an island
        never seen beating yet (a slow start on a busy machine is not a death: the quorum still gives
        up on it after the detection and collective timeouts)."""
        return time.monotonic() - self.last_change[island][1] if self.seen(island) else 0.0

    # ------------------------------------------------------------------ epochs
    def start(self, members: list[int]) -> None:
        """The run's first epoch (0, or after a resumed run's history) among the islands present."""
        self.start_heartbeat()
        self.install(self.first_epoch, members)

    @property
    def formed(self) -> StoreGroup:
        """This epoch's group, once ``install`` has formed it."""
        assert self.group is not None, "no group is formed"
        return self.group

    def install(self, epoch: int, members: list[int]) -> None:
        """Make epoch ``epoch``'s group; a member missing while it forms sends us to the next epoch,
        and is recorded as gone (a joiner that died before its first epoch formed is a leave too)."""
        wanted = list(members)
        while True:
            self.release_group()
            for island in set(members) - set(
                self.members
            ):  # a returning island's old beats say nothing
                self.last_change.pop(island, None)
            self.epoch, self.members, self.ops, self.group = epoch, members, 0, None
            self.history.epochs.append({"epoch": epoch, "members": members, "at_s": self.now_s()})
            try:
                self.group = self.form_group(epoch, members)
                self.on_install()
                if self.group.rank == 0:
                    print(
                        f"membership: epoch {epoch}, islands {members} (M = {len(members)})",
                        flush=True,
                    )
                for island in sorted(set(wanted) - set(members)):
                    self.record_leave(island)
                return
            except RuntimeError:
                epoch, members = self.next_quorum(epoch, members)

    def form_group(self, epoch: int, members: list[int]) -> StoreGroup:
        """Epoch ``epoch``'s group. The members first meet in the store, polled, so that a member's
        death (its heartbeat silent for the detection timeout) or the collective timeout ends the wait
        with a RuntimeError; gloo's own rendezvous, which cannot be abandoned (it waits in C++ for
        every member), then only waits for members that were there a moment ago."""
        self.store.set(self.key("epoch", epoch, "ready", self.island), "1")
        ready = [self.key("epoch", epoch, "ready", island) for island in members]
        deadline = time.monotonic() + self.timing.collective_s
        while not self.store.check(ready):
            self.watch(members)
            if self.gone():
                raise RuntimeError(f"islands {self.gone()} are gone while epoch {epoch} formed")
            if time.monotonic() >= deadline:
                raise RuntimeError(
                    f"epoch {epoch}'s members did not all arrive within the collective timeout"
                )
            time.sleep(POLL_S)
        prefix = dist.PrefixStore(self.key("epoch", epoch, "group"), self.store)
        return StoreGroup(prefix, members, self.island, timedelta(seconds=self.timing.collective_s))

    def run(self, op: Callable[[StoreGroup], T], abandoned: Callable[[], None] = no_attempt) -> T:
        """``op(group)`` completed by every member of one epoch, re-forming until it is (an op that
        keeps failing with no one leaving is a bug, re-raised after ``MAX_FAILURES`` tries). Each
        attempt of ``op`` given up (it failed here, or the vote threw it away) is told to
        ``abandoned``, before the group re-forms."""
        failures = 0
        while True:
            self.ops += 1
            vote = self.key("epoch", self.epoch, "op", self.ops)
            attempted = False
            try:
                if self.gone():
                    raise RuntimeError(
                        "a member is gone: its heartbeat stopped"
                    )  # no doomed attempt
                attempted = True
                result, done = op(self.formed), True
            except RuntimeError:
                failures += 1
                if failures >= MAX_FAILURES:
                    raise
                result, done = None, False
            if self.decide(vote, done):
                return cast(T, result)  # decided: every member completed op, this one too
            if attempted:
                abandoned()
            self.reform()

    def decide(self, vote: str, done: bool) -> bool:
        """Commit when every member finished the op; abort on an error or a silent member."""
        decision = vote + "/decision"
        if done and self.store.add(vote + "/done", 1) == len(self.members):
            self.store.compare_set(decision, "", "commit")
        elif not done:
            self.store.compare_set(decision, "", "abort")
        if not self.wait_key(decision, self.timing.detection_s):
            self.store.compare_set(decision, "", "abort")
        return self.store.get(decision) == b"commit"

    def reform(self) -> None:
        """Move to the next epoch with the members who show up; record who left and what they lost.
        The broken epoch's group is torn down first: a member still blocked in the op on us wakes
        now, and reaches the quorum within the detection timeout instead of being left out."""
        before = self.members
        self.release_group()
        epoch, members = self.next_quorum(self.epoch, before)
        self.install(epoch, members)
        for island in sorted(set(before) - set(members)):
            self.record_leave(island)

    def next_quorum(self, epoch: int, expected: list[int]) -> tuple[int, list[int]]:
        """The members of epoch + 1: the first to arrive waits for ``expected`` or the detection
        timeout, then fixes them; one that arrives too late is out (``LeftOut``) and must join again."""
        epoch += 1
        arrived = self.key("epoch", epoch, "arrived")
        order = self.store.add(arrived, 1)
        self.store.set(self.key("epoch", epoch, "arrival", order), str(self.island))
        if order == 1:
            self.fix_members(epoch, expected)
        fixing_s = (
            2 * self.timing.detection_s + self.timing.collective_s
        )  # the first arriver's longest wait, and more
        if not self.wait_key(self.key("epoch", epoch, "members"), fixing_s):
            self.fix_members(
                epoch, expected
            )  # the first arriver died before it fixed them; one of us wins
        members = [int(i) for i in self.get(self.key("epoch", epoch, "members")).split(",")]
        if self.island not in members:
            raise LeftOut(
                f"island {self.island} arrived after the detection timeout; it joins again"
            )
        return epoch, members

    def fix_members(self, epoch: int, expected: list[int]) -> None:
        """Wait for every expected member that is not gone (see the module's docstring), then fix
        epoch ``epoch``'s members as those who arrived."""
        started = time.monotonic()
        deadline = started + self.timing.detection_s + self.timing.collective_s
        while True:
            missing = set(expected) - set(self.arrivals(epoch))
            gone = all(
                self.silent_s(island) >= self.timing.detection_s
                if self.seen(island)
                else time.monotonic() - started >= self.timing.detection_s
                for island in missing
            )
            if not missing or gone or time.monotonic() >= deadline:
                break
            time.sleep(POLL_S)
        islands = sorted(self.arrivals(epoch))
        self.store.compare_set(self.key("epoch", epoch, "members"), "", ",".join(map(str, islands)))

    def arrivals(self, epoch: int) -> list[int]:
        """The islands that arrived at epoch ``epoch``'s quorum (one that died between counting itself
        and naming itself is not among them)."""
        count = self.store.add(self.key("epoch", epoch, "arrived"), 0)
        keys = [self.key("epoch", epoch, "arrival", i) for i in range(1, count + 1)]
        return [int(self.store.get(key)) for key in keys if self.store.check([key])]

    def record_leave(self, island: int) -> None:
        key = self.key("progress", island)
        progress = json.loads(self.store.get(key)) if self.store.check([key]) else vars(Progress())
        leave = {
            "island": island,
            "epoch": self.epoch,
            "detected_s": self.now_s(),
            "outer_step": progress["outer_step"],
            "last_sync_s": progress["synced_s"],
            "last_seen_s": progress["now_s"],
            "lost_compute_s": max(0.0, progress["now_s"] - progress["synced_s"]),
        }
        self.history.leaves.append(leave)
        if self.formed.rank == 0:
            print(
                f"membership: island {island} left; {leave['lost_compute_s']:.2f} s of its compute lost",
                flush=True,
            )

    # ------------------------------------------------------------------ joining
    @property
    def leader(self) -> int | None:
        """The lowest member that holds the global state: it reports and serves downloads."""
        holders = sorted(set(self.members) & self.stateful)
        return holders[0] if holders else None

    def request_join(self, requested_s: float) -> int | None:
        """Ask to enter at the next outer boundary and wait until the members admit this island;
        returns the boundary's inner step, or None if the run finished first. The heartbeat starts
        with the request, so that the members forming the epoch that admits this island see it die."""
        self.start_heartbeat()
        number = self.store.add(self.key("join", "requests"), 1)
        self.store.set(
            self.key("join", "request", number),
            json.dumps({"island": self.island, "requested_s": requested_s}),
        )
        admitted = self.key("join", "admitted", number)
        while not self.wait_key(admitted, JOIN_POLL_S):
            if self.store.check([self.key("run", "finished")]):
                return None
        epoch = int(self.store.get(admitted))
        self.install(
            epoch, [int(i) for i in self.get(self.key("epoch", epoch, "members")).split(",")]
        )
        return int(self.get(self.key("epoch", epoch, "step")))

    def admit_joiners(self, has_state: bool, step: int) -> None:
        """At the start of an outer boundary (inner step ``step``): agree on who holds the state and
        on the requests admitted so far, then move to a new epoch with the joiners every member has
        seen, if there are any."""
        mine = {
            "seen": self.store.add(self.key("join", "requests"), 0),
            "has_state": has_state,
            "admitted": self.admitted_joins,
        }
        views = self.run(lambda group: group.all_gather_object(mine))
        self.stateful = {island for island, view in zip(self.members, views) if view["has_state"]}
        self.admitted_joins = max(view["admitted"] for view in views)
        total = max(view["seen"] for view in views)
        if total == self.admitted_joins:
            return
        numbers = range(self.admitted_joins + 1, total + 1)
        requests = [json.loads(self.get(self.key("join", "request", n))) for n in numbers]
        joiners = [r["island"] for r in requests if r["island"] not in self.members]
        epoch, members = self.epoch + 1, sorted(set(self.members) | set(joiners))
        if self.formed.rank == 0:
            self.store.compare_set(
                self.key("epoch", epoch, "members"), "", ",".join(map(str, members))
            )
            self.store.set(self.key("epoch", epoch, "step"), str(step))
            for number in numbers:
                self.store.set(self.key("join", "admitted", number), str(epoch))
        members = [int(i) for i in self.get(self.key("epoch", epoch, "members")).split(",")]
        self.admitted_joins = total
        self.history.joins.extend({**r, "admitted_s": self.now_s()} for r in requests)
        self.install(epoch, members)

    def release_group(self) -> None:
        if self.group is not None:
            self.group.close()

    def adopt_history(self, holders: list[tuple[int, dict[str, Any] | None]]) -> None:
        """A member without the state takes the history of the lowest member that has it
        (``holders``: each member's island and its history, None where it holds no state)."""
        histories = sorted((island, history) for island, history in holders if history is not None)
        if histories:
            self.history = History(**histories[0][1])

    def close(self) -> None:
        self.stopping.set()
        self.release_group()
