"""The narrow collective interface the trainer talks to, with two implementations.

``TorchGroup`` wraps a ``torch.distributed`` process group (gloo on CPU, NCCL on CUDA).
``ThreadGroup`` runs the members as threads of one process (for the unit tests and the benchmark):
its collectives meet at a shared ``threading.Barrier``, so a test drives several islands in one
process without sockets. Both give every member the same result in the same member order. (``Echo``
stands for M identical members in one thread; ``StoreGroup`` is an elastic epoch's group.) The
interface itself, ``Group``, is in ``group.py``.
"""

from __future__ import annotations

import pickle
import threading
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from ..core.faults import kill_point
from .group import Group

# Messages are cut into pieces of at most this many bytes, all posted at once: a shaped link then
# stays busy in both directions. One large message per peer and direction (gloo's all-to-all, and
# its all-gather with two members) reached only 53-70% of a tbf-shaped rate; 64 KiB pieces 88-94%.
# Every receive is posted before any send: gloo sends a piece only once the receiver's "ready to
# receive" has arrived, and the receiver's own pieces, once under way, queue on the same connection
# ahead of the rest of those notices. Posted in pairs, a member's last notices waited behind its own
# data (a piece is 52 ms at 10 Mbit/s) and two islands' exchanges took 1.06-1.17 s for 1.00 s of data
# at random; receives first, 1.06-1.07 s (issue 29, docs/validation.md).
PIECE_BYTES = 65536


def pieces(tensor: torch.Tensor) -> list[torch.Tensor]:
    """``tensor``'s values (flattened, in place) in slices of at most ``PIECE_BYTES``."""
    flat = tensor.view(-1)
    piece = max(1, PIECE_BYTES // tensor.element_size())
    return [flat[start : start + piece] for start in range(0, flat.numel(), piece)]


Message = tuple[torch.Tensor, int]  # a tensor and the member it goes to or comes from


class SteppedCollectives:
    """All-to-all and all-gather in M-1 steps: in step s each member sends to member rank+s
    (all-to-all) or to its right neighbour (all-gather, a ring) and receives from the mirror member,
    so every link carries one message each way at a time, as ``PIECE_BYTES`` pieces posted together;
    a direct gather (``gather_from``) in one step, every sender to every other member at once.
    Subclasses provide ``rank``, ``size`` and ``move_pieces(sends, receives)``: send each (tensor,
    member) of ``sends`` (contiguous) while receiving into each (tensor, member) of ``receives``,
    all at once."""

    rank: int
    size: int
    move_pieces: Callable[[list[Message], list[Message]], None]

    def swap_pieces(self, sent: torch.Tensor, to: int, into: torch.Tensor, source: int) -> None:
        """Send ``sent`` to member ``to`` while receiving member ``source``'s, of the same size, into
        ``into``."""
        self.move_pieces([(sent, to)], [(into, source)])

    def gather_from(
        self, tensor: torch.Tensor, senders: Sequence[int]
    ) -> list[torch.Tensor | None]:
        """The senders' tensors, each sent straight to every other member (``group.Group``)."""
        outgoing = tensor.contiguous()
        sends = (
            [(outgoing, to) for to in range(self.size) if to != self.rank]
            if self.rank in senders
            else []
        )
        gathered: list[torch.Tensor | None] = [None] * self.size
        for source in senders:
            gathered[source] = (
                tensor.clone()
                if source == self.rank
                else torch.empty_like(tensor, memory_format=torch.contiguous_format)
            )
        receives = [
            (into, source)
            for source, into in enumerate(gathered)
            if into is not None and source != self.rank
        ]
        self.move_pieces(sends, receives)
        return gathered

    def all_to_all(self, chunks: list[torch.Tensor]) -> list[torch.Tensor]:
        received = [
            torch.empty_like(chunk, memory_format=torch.contiguous_format) for chunk in chunks
        ]
        received[self.rank].copy_(chunks[self.rank])
        for step in range(1, self.size):
            to, source = (self.rank + step) % self.size, (self.rank - step) % self.size
            self.swap_pieces(chunks[to].contiguous(), to, received[source], source)
        return received

    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        gathered = [
            torch.empty_like(tensor, memory_format=torch.contiguous_format)
            for _ in range(self.size)
        ]
        gathered[self.rank].copy_(tensor)
        right, left = (self.rank + 1) % self.size, (self.rank - 1) % self.size
        for step in range(1, self.size):
            self.swap_pieces(
                gathered[(self.rank - step + 1) % self.size],
                right,
                gathered[(self.rank - step) % self.size],
                left,
            )
        return gathered


class TorchGroup(SteppedCollectives):
    """A ``torch.distributed`` group: ``ranks`` are its members' global ranks, in member order."""

    def __init__(self, ranks: list[int], handle: Any):
        self.ranks = ranks
        self.handle = handle
        self.rank = ranks.index(dist.get_rank())
        self.size = len(ranks)

    def move_pieces(self, sends: list[Message], receives: list[Message]) -> None:
        """Every receive posted before any send (see ``PIECE_BYTES``), all in one batch."""
        operations = [
            dist.P2POp(dist.irecv, incoming, self.ranks[source], self.handle, tag)
            for into, source in receives
            for tag, incoming in enumerate(pieces(into))
        ] + [
            dist.P2POp(dist.isend, outgoing, self.ranks[to], self.handle, tag)
            for sent, to in sends
            for tag, outgoing in enumerate(pieces(sent))
        ]
        for work in dist.batch_isend_irecv(operations) if operations else []:
            work.wait()

    def all_reduce_sum_(self, tensor: torch.Tensor) -> None:
        dist.all_reduce(tensor, group=self.handle)

    def broadcast_(self, tensor: torch.Tensor, src: int = 0) -> None:
        dist.broadcast(tensor, src=self.ranks[src], group=self.handle)

    def all_gather_object(self, value: Any) -> list[Any]:
        gathered: list[Any] = [None] * self.size
        dist.all_gather_object(gathered, value, group=self.handle)
        return gathered

    def barrier(self) -> None:
        """A one-value all-reduce: unlike ``dist.barrier`` it behaves the same on gloo and NCCL."""
        self.all_reduce_sum_(torch.zeros(1, device=device_of(self.handle)))


class StagedGroup:
    """A gloo group that takes tensors on any device: each collective copies them to the CPU, runs
    there and copies the result back (islands that share a GPU cannot share an NCCL group)."""

    def __init__(self, group: TorchGroup):
        self.group = group
        self.rank, self.size = group.rank, group.size

    def __getattr__(self, name: str) -> Any:
        return getattr(self.group, name)

    def all_to_all(self, chunks: list[torch.Tensor]) -> list[torch.Tensor]:
        device = chunks[0].device
        return [
            chunk.to(device) for chunk in self.group.all_to_all([chunk.cpu() for chunk in chunks])
        ]

    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        return [part.to(tensor.device) for part in self.group.all_gather(tensor.cpu())]

    def gather_from(
        self, tensor: torch.Tensor, senders: Sequence[int]
    ) -> list[torch.Tensor | None]:
        return [
            None if part is None else part.to(tensor.device)
            for part in self.group.gather_from(tensor.cpu(), senders)
        ]

    def all_reduce_sum_(self, tensor: torch.Tensor) -> None:
        staged = tensor.cpu()
        self.group.all_reduce_sum_(staged)
        tensor.copy_(staged)

    def broadcast_(self, tensor: torch.Tensor, src: int = 0) -> None:
        staged = tensor.cpu()
        self.group.broadcast_(staged, src)
        tensor.copy_(staged)

    def all_gather_object(self, value: Any) -> list[Any]:
        return self.group.all_gather_object(value)

    def barrier(self) -> None:
        self.group.barrier()


def device_of(handle: Any) -> torch.device:
    backend = dist.get_backend(handle)
    return (
        torch.device("cuda", torch.cuda.current_device())
        if backend == "nccl"
        else torch.device("cpu")
    )


class ThreadHub:
    """The meeting point of one ``ThreadGroup``'s members: a barrier and one slot per member."""

    def __init__(self, size: int, timeout_s: float = 60.0):
        self.size = size
        self.slots: list[Any] = [None] * size
        self.gate = threading.Barrier(size, timeout=timeout_s)

    def swap(self, rank: int, value: Any) -> list[Any]:
        """Publish ``value``, wait for all, read all slots, wait again so the slots can be reused."""
        self.slots[rank] = value
        self.gate.wait()
        values = list(self.slots)
        self.gate.wait()
        return values

    def members(self) -> list[ThreadGroup]:
        return [ThreadGroup(self, rank) for rank in range(self.size)]


class ThreadGroup:
    def __init__(self, hub: ThreadHub, rank: int):
        self.hub = hub
        self.rank = rank
        self.size = hub.size

    def all_to_all(self, chunks: list[torch.Tensor]) -> list[torch.Tensor]:
        table = self.hub.swap(self.rank, chunks)
        return [table[source][self.rank].clone() for source in range(self.size)]

    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        return [value.clone() for value in self.hub.swap(self.rank, tensor.clone())]

    def gather_from(
        self, tensor: torch.Tensor, senders: Sequence[int]
    ) -> list[torch.Tensor | None]:
        values = self.hub.swap(self.rank, tensor.clone() if self.rank in senders else None)
        return [None if value is None else value.clone() for value in values]

    def all_reduce_sum_(self, tensor: torch.Tensor) -> None:
        values = self.hub.swap(self.rank, tensor.clone())
        total = values[0].clone()
        for value in values[1:]:
            total += value
        tensor.copy_(total)

    def broadcast_(self, tensor: torch.Tensor, src: int = 0) -> None:
        tensor.copy_(self.hub.swap(self.rank, tensor.clone())[src])

    def all_gather_object(self, value: Any) -> list[Any]:
        return self.hub.swap(self.rank, value)

    def barrier(self) -> None:
        self.hub.swap(self.rank, None)


class Echo:
    """A group of ``size`` members that are all this one (member 0): each collective returns, in every
    member's place, what this member gave it (``Exchanger.warm_up``: the exchange path's own work at its
    real sizes, with no byte moved)."""

    rank = 0

    def __init__(self, size: int):
        self.size = size

    def all_to_all(self, chunks: list[torch.Tensor]) -> list[torch.Tensor]:
        return [chunks[self.rank].clone() for _ in range(self.size)]

    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        return [tensor.clone() for _ in range(self.size)]

    def gather_from(
        self, tensor: torch.Tensor, senders: Sequence[int]
    ) -> list[torch.Tensor | None]:
        return [tensor.clone() if member in senders else None for member in range(self.size)]

    def all_reduce_sum_(self, tensor: torch.Tensor) -> None:
        tensor.mul_(self.size)

    def broadcast_(self, tensor: torch.Tensor, src: int = 0) -> None:
        pass

    def all_gather_object(self, value: Any) -> list[Any]:
        return [value] * self.size

    def barrier(self) -> None:
        pass


class StoreGroup(SteppedCollectives):
    """A gloo group made from a store without ``init_process_group`` (one per membership epoch of an
    elastic run, ``membership.py``): it needs no default group, so a member's death breaks only this
    group. ``members`` are the islands in member order.

    ``close`` tears the group down so that a peer still blocked on this member wakes with an error at
    once instead of at its ``collective_timeout_s``. On the torch builds we run (2.13, CPU),
    ``ProcessGroupGloo.abort()`` and ``shutdown()`` do not close the sockets a blocked peer waits on;
    destroying the process group does (its pairs close, the peer's recv fails within about 0.5 s). So
    ``close`` aborts and then drops the one reference to the handle: nothing else may keep it."""

    def __init__(self, store: Any, members: list[int], member: int, timeout: timedelta):
        self.members = members
        self.rank = members.index(member)
        self.size = len(members)
        # Any: torch's stubs give ProcessGroupGloo none of its Backend's send, recv and collectives
        self.handle: Any = dist.ProcessGroupGloo(store, self.rank, self.size, timeout)
        self.sent_bytes = 0  # the pieces whose send completed, whether the swap did or not

    def move_pieces(self, sends: list[Message], receives: list[Message]) -> None:
        """The messages, counting in ``sent_bytes`` what left: every piece whose send completed. When
        it breaks (a peer died), the sends that had completed count; those still in flight do not."""
        receiving = [
            self.handle.recv([incoming], source, tag)
            for into, source in receives
            for tag, incoming in enumerate(pieces(into))
        ]
        sending = [
            (self.handle.send([outgoing], to, tag), outgoing.nbytes)
            for sent, to in sends
            for tag, outgoing in enumerate(pieces(sent))
        ]
        waited = 0
        try:
            for work in receiving:
                work.wait()
            for work, nbytes in sending:
                work.wait()
                self.sent_bytes += nbytes
                waited += 1
        except RuntimeError:
            self.sent_bytes += completed_bytes(sending[waited:])
            raise

    def all_reduce_sum_(self, tensor: torch.Tensor) -> None:
        self.handle.allreduce([tensor]).wait()

    def broadcast_(self, tensor: torch.Tensor, src: int = 0) -> None:
        self.handle.broadcast(tensor, src).wait()

    def all_gather_object(self, value: Any) -> list[Any]:
        data = torch.frombuffer(bytearray(pickle.dumps(value)), dtype=torch.uint8)
        lengths = self.all_gather(torch.tensor([data.numel()], dtype=torch.int64))
        padded = torch.zeros(int(max(lengths).item()), dtype=torch.uint8)
        padded[: data.numel()] = data
        return [
            pickle.loads(chunk[: int(length.item())].numpy().tobytes())
            for chunk, length in zip(self.all_gather(padded), lengths)
        ]

    def barrier(self) -> None:
        self.all_reduce_sum_(torch.zeros(1))

    def close(self) -> None:
        if self.handle is None:
            return
        self.handle.abort()
        self.handle = None


def completed_bytes(sends: list[tuple[Any, int]]) -> int:
    """The bytes of the sends (work, bytes) that completed without an error (nothing waits: a completed
    work's ``wait`` returns or raises at once)."""
    total = 0
    for work, nbytes in sends:
        if not work.is_completed():
            continue
        try:
            work.wait()
        except RuntimeError:
            continue
        total += nbytes
    return total


def broadcast_bytes(group: Group, data: bytes | None, src: int, island: int) -> bytes:
    """``data`` of member ``src`` on every member (a length, then the bytes)."""
    length = torch.tensor([len(data) if data is not None else 0], dtype=torch.int64)
    group.broadcast_(length, src)
    kill_point("download-source" if group.rank == src else "download-joiner", island)
    buffer = torch.zeros(int(length.item()), dtype=torch.uint8)
    if data is not None:
        buffer.copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))
    group.broadcast_(buffer, src)
    return buffer.numpy().tobytes()
