"""Cross-island collectives paced by an emulated WAN (the Group interface, wrapped).

Under ``islands validate`` each island's link is emulated: by the kernel (tbf shapes the bytes; the
latency is added here when the kernel has no netem) or, without root, entirely in-process. Either
way the pacer comes from the process that owns the WAN as one string, the launch spec's
``wan_pacer`` (``wan.pacer_config()``, ``spec.py``), and every collective of the cross-island group is wrapped in
``pacer.transfer(island, sent, received, latency, paced_by)``. The caller names the island of each
member of the group, in member order: the whole fleet at launch (``fixed.torch_groups``), the
epoch's members in an elastic run, where after a departure member 1 may be island 2. Intra-island
groups are never paced.

Bytes per member: all-to-all and all-gather send (M-1) chunks and receive (M-1); an all-reduce is
counted as a ring, 2(M-1)/M of the tensor each way; a direct gather sends (M-1) copies from each
sender and receives one from each other sender. Messages of one collective travel in parallel,
so each pays one path latency: this member's one-way latency plus the farthest peer's.

The object store of ``network.gather = "store"`` is a directory (``exchange/object_store.py``) whose
bytes cross no emulated link, kernel-shaped or not: ``PacedStore`` paces every request of a round
(``schedules/store_round.py``) in this process, on the island's link and the store's share of its
own, the handshakes of the connections the declaration opens, and the store's own time to answer
each request (``store.request_ms``). Under ``islands validate``'s kernel shaping the store is instead
a host of its own (the directory served over HTTP, ``object_store_host.py``, which waits the store's
time to answer each request itself) behind a kernel-shaped link: its bytes are the kernel's to pace,
and ``StoreLatency`` adds only each request's round trip where the kernel has no netem, and each new
connection's handshake round trips that the kernel does not make (all where it has no netem; those
past TCP's one, a TLS handshake's, where it has).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from islands.emulation.shaper import (
    InProcessLatency,
    InProcessShaper,
    pacer_from_config,
    shaper_from_config,
)
from islands.scenarios.model import StoreSpec
from islands.schedules.store_round import (
    GET,
    LIST,
    NOTHING_HELD,
    PUT,
    TCP_HANDSHAKE_ROUND_TRIPS,
    StoreRequest,
)
from islands.units import BITS_PER_GBIT, MS_PER_S

from ..exchange.group import Group
from ..exchange.object_store import HttpStore, ObjectStore


class PacedGroup:
    """A cross-island group whose data collectives wait as the emulated links would make them."""

    def __init__(
        self,
        inner: Group,
        pacer: InProcessShaper | InProcessLatency,
        islands: Sequence[int] | None = None,
    ):
        islands = list(range(inner.size)) if islands is None else list(islands)
        if len(islands) != inner.size:
            raise ValueError(f"{len(islands)} member islands given for a group of {inner.size}")
        self.inner = inner
        self.pacer = pacer
        self.rank = inner.rank
        self.size = inner.size
        self.island = islands[inner.rank]
        self.islands = islands
        self.peers = [island for member, island in enumerate(islands) if member != inner.rank]
        self.latency_s = pacer.latency_s(self.island) + max(
            (pacer.latency_s(p) for p in self.peers), default=0.0
        )

    def paced(self, sent_bytes: float, received_bytes: float):
        return self.pacer.transfer(
            self.island, int(sent_bytes), int(received_bytes), self.latency_s, self.peers
        )

    def all_to_all(self, chunks: list[torch.Tensor]) -> list[torch.Tensor]:
        outgoing = sum(chunk.nbytes for member, chunk in enumerate(chunks) if member != self.rank)
        with self.paced(outgoing, outgoing):
            return self.inner.all_to_all(chunks)

    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        moved = tensor.nbytes * (self.size - 1)
        with self.paced(moved, moved):
            return self.inner.all_gather(tensor)

    def gather_from(
        self, tensor: torch.Tensor, senders: Sequence[int]
    ) -> list[torch.Tensor | None]:
        """Every copy at the round's one rate (``copy_bits_per_s``), as the simulator moves them: a
        sender's M - 1 copies, or a receiver's, end together with everyone's."""
        sending = self.rank in senders
        copies_out = self.size - 1 if sending else 0
        copies_in = len(senders) - sending
        ceiling = self.copy_bits_per_s(senders) * max(copies_out, copies_in)
        with self.pacer.transfer(
            self.island,
            tensor.nbytes * copies_out,
            tensor.nbytes * copies_in,
            self.latency_s,
            ceiling_bits_per_s=ceiling,
        ):
            return self.inner.gather_from(tensor, senders)

    def copy_bits_per_s(self, senders: Sequence[int]) -> float:
        """The rate of each copy of a direct gather: its busiest link's share, a sender's uplink
        carrying M - 1 copies, a member's downlink one from each other sender
        (``simulator/network/gather_rounds.py``)."""
        links = {link.island: link for link in self.pacer.links}
        shares = [links[self.islands[m]].upload_bits_per_s / (self.size - 1) for m in senders]
        for member, island in enumerate(self.islands):
            copies = len(senders) - (member in senders)
            if copies:
                shares.append(links[island].download_bits_per_s / copies)
        return min(shares)

    def all_reduce_sum_(self, tensor: torch.Tensor) -> None:
        moved = 2 * (self.size - 1) / self.size * tensor.nbytes
        with self.paced(moved, moved):
            self.inner.all_reduce_sum_(tensor)

    def broadcast_(self, tensor: torch.Tensor, src: int = 0) -> None:
        sent = tensor.nbytes * (self.size - 1) if self.rank == src else 0
        with self.paced(sent, 0 if self.rank == src else tensor.nbytes):
            self.inner.broadcast_(tensor, src)

    def all_gather_object(self, value: Any) -> list[Any]:
        return self.inner.all_gather_object(value)

    def barrier(self) -> None:
        self.inner.barrier()


def paced(group: Group, pacer: str | None, islands: Sequence[int] | None = None) -> Group:
    """``group`` (whose member i is island ``islands[i]``; default: island i) wrapped in ``pacer`` (the
    launch spec's ``wan_pacer``), or unchanged without one."""
    return PacedGroup(group, pacer_from_config(pacer), islands) if pacer else group


class PacedStore:
    """An object store whose requests take as long as the emulated links make them, as the simulator
    prices them (``simulator/network/gather_rounds.py``): each a round trip to the store (this island's
    one-way latency and the store's, there and back). A PUT's bytes leave after nothing and reach the
    store one way later, at the stage's one rate, the slowest of the ``members`` islands' uplinks and a
    member's share of the store's ingress (1 / ``members`` of it: every member PUTs at once): the
    object is in once the store has answered it (``store.request_ms``), the answer one way later. A
    LIST reads the store one way and an answer's time after it leaves; a GET asks, is answered (the
    K at once: one answer's time), and the payloads come back at the slowest downlink or the egress
    share. A request that opens connections (``store_round.opening``: a member's first PUT, its
    first GETs) waits their handshake first, ``store.handshake_round_trips`` round trips. A DELETE,
    off the critical path, is not paced."""

    def __init__(
        self,
        inner: ObjectStore,
        pacer: InProcessShaper,
        island: int,
        members: int,
        store: StoreSpec,
    ):
        self.inner, self.pacer, self.island = inner, pacer, island
        self.one_way_s = pacer.latency_s(island) + store.latency_ms / MS_PER_S
        self.handshake_s = 2 * store.handshake_round_trips * self.one_way_s
        self.request_s = store.request_ms / MS_PER_S
        self.held = dict(NOTHING_HELD)  # the connections the declaration has it hold open, by kind
        links = pacer.links[:members]
        self.put_bits_per_s = min(
            share_bits_per_s(store.ingress, members), *(link.upload_bits_per_s for link in links)
        )
        self.get_bits_per_s = min(
            share_bits_per_s(store.egress, members), *(link.download_bits_per_s for link in links)
        )

    def wait_s(self, seconds: float) -> None:
        """Wait ``seconds`` on the island's pacer, moving no bytes."""
        with self.pacer.transfer(self.island, 0, 0, seconds):
            pass

    def one_way(self) -> None:
        """Wait one way to or from the store."""
        self.wait_s(self.one_way_s)

    def served(self) -> None:
        """Wait the store's own time to answer a request (none where it takes none)."""
        if self.request_s > 0:
            self.wait_s(self.request_s)

    def open_for(self, request: StoreRequest, peers: int = 1) -> None:
        """Wait one handshake where ``request`` needs more connections of its kind than it holds
        (those it opens go at once)."""
        if request.lacking(self.held, peers):
            with self.pacer.transfer(self.island, 0, 0, self.handshake_s):
                self.held[request.connection] = request.connections(peers)

    def put(self, name: str, data: bytes) -> None:
        self.open_for(PUT)
        with self.pacer.transfer(
            self.island, len(data), 0, self.one_way_s, ceiling_bits_per_s=self.put_bits_per_s
        ):
            pass
        self.served()
        self.inner.put(name, data)
        self.one_way()

    def listing(self, prefix: str) -> list[str]:
        self.open_for(LIST)
        self.one_way()
        self.served()
        names = self.inner.listing(prefix)
        self.one_way()
        return names

    def get(self, names: list[str]) -> list[bytes | None]:
        self.open_for(GET, len(names))
        self.served()  # the K at once, before their first byte
        fetched = self.inner.get(names)
        received = sum(len(data) for data in fetched if data is not None)
        with self.pacer.transfer(
            self.island, 0, received, 2 * self.one_way_s, ceiling_bits_per_s=self.get_bits_per_s
        ):
            return fetched

    def delete(self, name: str) -> None:
        self.inner.delete(name)


def share_bits_per_s(gbps: float | None, members: int) -> float:
    """One of ``members`` workers' share of a store link of ``gbps`` (None: it never binds)."""
    return math.inf if gbps is None else gbps * BITS_PER_GBIT / members


def paced_store(
    store: ObjectStore, pacer: str | None, island: int, members: int, spec: StoreSpec
) -> ObjectStore:
    """``store`` paced for ``island`` of ``members`` under the launch spec's ``wan_pacer``, or
    unchanged without one."""
    if not pacer:
        return store
    return PacedStore(store, shaper_from_config(pacer), island, members, spec)


class StoreLatency:
    """A store on a host of its own behind a kernel-shaped link (``HttpStore``): every request waits
    a round trip, there and back over this island's one-way latency and the store's, where the
    kernel has no netem to add it (``InProcessLatency``); the bytes are the kernel's. Each connection
    the client opens waits ``handshake_s`` (``opened``)."""

    def __init__(
        self,
        address: str,
        pacer: InProcessLatency,
        island: int,
        store: StoreSpec,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.pacer, self.island, self.sleep = pacer, island, sleep
        self.round_trip_s = 2 * (pacer.latency_s(island) + store.latency_ms / MS_PER_S)
        made = 0 if pacer.sleep_latency else TCP_HANDSHAKE_ROUND_TRIPS  # netem delays TCP's
        self.handshake_s = (store.handshake_round_trips - made) * self.round_trip_s
        self.inner = HttpStore(address, on_open=self.opened)

    def opened(self) -> None:
        """A connection's TCP handshake is done: wait the round trips the kernel did not make."""
        if self.handshake_s > 0:
            self.sleep(self.handshake_s)

    def waited(self):
        return self.pacer.transfer(self.island, 0, 0, self.round_trip_s)

    def put(self, name: str, data: bytes) -> None:
        with self.waited():
            self.inner.put(name, data)

    def get(self, names: list[str]) -> list[bytes | None]:
        with self.waited():
            return self.inner.get(names)

    def listing(self, prefix: str) -> list[str]:
        with self.waited():
            return self.inner.listing(prefix)

    def delete(self, name: str) -> None:
        with self.waited():
            self.inner.delete(name)


def store_latency(address: str, pacer: str | None, island: int, spec: StoreSpec) -> ObjectStore:
    """The store served at ``address``, its requests' round trips and its connections' handshakes
    under the launch spec's ``wan_pacer`` (kernel shaping), or as they come without one."""
    if not pacer:
        return HttpStore(address)
    latency = pacer_from_config(pacer)
    assert isinstance(latency, InProcessLatency), "a store host is served under kernel shaping"
    return StoreLatency(address, latency, island, spec)
