"""How one member fetches the top-k payloads a round averages (``network.gather``), and which.

``Gathering`` holds the way (``schedules/gather.py``: around the ring, straight from the round's K
peers, or through the object store) and draws the round's K peers (``chosen``: from the scenario's
seed and the outer step, the simulator's own draw). ``StoreRounds`` is one member's side of the store,
the requests of ``schedules/store_round.py`` in its order:

1. PUT its payload, as ``<outer step>-<fragment>-<member>.topk`` (every member does, drawn or not);
2. LIST the round's objects (``<outer step>-<fragment>-``) until every member's payload is in (at most
   ``deadline_s``: the run's ``trainer.timeout_s``), as the simulator's GETs start once every PUT is in;
3. GET the payloads of the round's K peers, its own among them where it is one, and average the
   accepted ones (``sparse.mean_of``): one missing at the deadline, or that cannot be decoded, is
   refused with its reason and logged (``Trainer.note_exclusions``), never merged.

Off the critical path, once a round's LIST has shown every member's payload, it deletes its payloads
of the rounds before in a thread of its own, waited for by no one: every member has fetched them,
since no member PUTs a round before it has finished the one before. (A round whose LIST stopped at the
deadline deletes nothing: a member still missing may still be reading.) ``close`` deletes the rest.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import torch

from islands.scenarios import Scenario
from islands.schedules.gather import DIRECT, RING, STORE, chosen, uploads

from .group import Group
from .object_store import ObjectStore, wait_for
from .sparse import Entry, Gathered, direct_mean, gather_mean, picked_mean


def object_name(key: tuple[int, int], member: int) -> str:
    """The store's name of ``member``'s payload of round ``key`` (outer step, fragment)."""
    return f"{round_prefix(key)}{member}.topk"


def round_prefix(key: tuple[int, int]) -> str:
    """What the names of round ``key``'s payloads, and no other's, begin with."""
    return f"{key[0]}-{key[1]}-"


class StoreRounds:
    """One member's rounds through the object store (the module's docstring)."""

    def __init__(self, store: ObjectStore, deadline_s: float):
        self.store = store
        self.deadline_s = deadline_s
        self.kept: list[str] = []  # its payloads not yet deleted, the last round's among them
        self.deleter = ThreadPoolExecutor(1, thread_name_prefix="islands-delete")
        self.deleting: list[Future[None]] = []

    def mean(
        self, group: Group, key: tuple[int, int], entry: Entry, picked: tuple[int, ...]
    ) -> Gathered:
        names = [object_name(key, member) for member in range(group.size)]
        self.store.put(names[group.rank], entry.payload.cpu().numpy().tobytes())
        if wait_for(self.store, round_prefix(key), names, time.monotonic() + self.deadline_s):
            self.delete_kept()
        fetched = self.store.get([names[member] for member in picked])
        self.kept.append(names[group.rank])
        payloads = {
            member: None if data is None else torch.frombuffer(bytearray(data), dtype=torch.uint8)
            for member, data in zip(picked, fetched)
        }
        sent_bytes = uploads(STORE, group.size, group.rank in picked) * entry.codec.size_bytes
        return picked_mean(payloads, entry, picked, group.rank, sent_bytes)

    def delete_kept(self) -> None:
        """Start deleting the payloads it keeps, in the background; a deletion that failed is raised
        here, once the next one starts."""
        for done in [future for future in self.deleting if future.done()]:
            self.deleting.remove(done)
            done.result()
        self.deleting += [self.deleter.submit(self.store.delete, name) for name in self.kept]
        self.kept = []

    def close(self) -> None:
        """Delete the payloads it keeps, and wait for every deletion."""
        self.delete_kept()
        self.deleter.shutdown(wait=True)
        for future in self.deleting:
            future.result()
        self.deleting = []


@dataclass(frozen=True)
class Gathering:
    """The way a member fetches the payloads (``network.gather``), the round's K (None: every
    member), the seed the K are drawn from, and the store where the way is through one."""

    way: str = RING
    peers: int | None = None
    seed: int = 0
    store: StoreRounds | None = None

    def mean(self, group: Group, key: tuple[int, int], entry: Entry) -> Gathered:
        """The round ``key``'s mean of the accepted payloads of its chosen members."""
        if self.way == RING:
            return gather_mean(group, entry)
        picked = chosen(self.seed, key[0], range(group.size), self.peers)
        if self.way == DIRECT:
            return direct_mean(group, entry, picked)
        assert self.store is not None, 'network.gather = "store" exchanges through a store'
        return self.store.mean(group, key, entry, picked)

    def without_store(self) -> Gathering:
        """The same round's payloads fetched straight from the peers (the store's way, but for the
        store: ``Exchanger.warm_up``, where no byte moves)."""
        return Gathering(DIRECT, self.peers, self.seed) if self.way == STORE else self


AROUND_THE_RING = Gathering()  # every payload to every member, no draw


def gathering_of(scenario: Scenario, store: ObjectStore | None) -> Gathering:
    """The scenario's way (``network.gather``), through ``store`` where that is the way (a payload
    missing after ``trainer.timeout_s`` is refused)."""
    way = scenario.network.gather
    rounds = None
    if way == STORE:
        assert store is not None, (
            'network.gather = "store" exchanges through a store (Groups.store)'
        )
        rounds = StoreRounds(store, scenario.trainer.timeout_s)
    return Gathering(way, scenario.schedule.gather_peers, scenario.seed, rounds)
