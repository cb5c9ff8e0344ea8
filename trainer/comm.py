"""The narrow collective interface the trainer talks to, with two implementations.

``TorchGroup`` wraps a ``torch.distributed`` process group (gloo on CPU, NCCL on CUDA).
``ThreadGroup`` runs the members as threads of one process (for the unit tests and the benchmark):
its collectives meet at a shared ``threading.Barrier``, so a test drives several islands in one
process without sockets. Both give every member the same result in the same member order.
"""

from __future__ import annotations

import pickle
import threading
from datetime import timedelta
from typing import Any, Protocol

import torch
import torch.distributed as dist


class Group(Protocol):
    rank: int
    size: int

    def all_to_all(self, chunks: list[torch.Tensor]) -> list[torch.Tensor]:
        """Send ``chunks[j]`` to member j; return what each member j sent to this one."""

    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """Every member's ``tensor`` (same shape on all members), in member order."""

    def all_reduce_sum_(self, tensor: torch.Tensor) -> None:
        """Replace ``tensor`` by its sum over the members."""

    def broadcast_(self, tensor: torch.Tensor, src: int = 0) -> None:
        """Replace ``tensor`` by member ``src``'s."""

    def all_gather_object(self, value: Any) -> list[Any]:
        """Every member's picklable ``value``, in member order."""

    def barrier(self) -> None:
        """Return once every member has called it."""


class TorchGroup:
    """A ``torch.distributed`` group: ``ranks`` are its members' global ranks, in member order."""

    def __init__(self, ranks: list[int], handle: Any):
        self.ranks = ranks
        self.handle = handle
        self.rank = ranks.index(dist.get_rank())
        self.size = len(ranks)

    def all_to_all(self, chunks: list[torch.Tensor]) -> list[torch.Tensor]:
        received = [torch.empty_like(chunk) for chunk in chunks]
        dist.all_to_all(received, chunks, group=self.handle)
        return received

    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        gathered = [torch.empty_like(tensor) for _ in range(self.size)]
        dist.all_gather(gathered, tensor, group=self.handle)
        return gathered

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


def device_of(handle: Any) -> torch.device:
    backend = dist.get_backend(handle)
    return torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")


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


class StoreGroup:
    """A gloo group made from a store without ``init_process_group`` (one per membership epoch of an
    elastic run, ``membership.py``): it needs no default group, so a member's death breaks only this
    group. ``members`` are the islands in member order; ``close`` aborts it, which wakes a peer still
    blocked on this member with an error instead of leaving it to its timeout."""

    def __init__(self, store: Any, members: list[int], member: int, timeout: timedelta):
        self.members = members
        self.rank = members.index(member)
        self.size = len(members)
        self.handle = dist.ProcessGroupGloo(store, self.rank, self.size, timeout)

    def all_to_all(self, chunks: list[torch.Tensor]) -> list[torch.Tensor]:
        sent = torch.cat(chunks)
        received = torch.empty_like(sent)
        self.handle.alltoall_base(received, sent, [], [], dist.AllToAllOptions()).wait()
        return list(received.split([chunk.numel() for chunk in chunks]))

    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        gathered = [torch.empty_like(tensor) for _ in range(self.size)]
        self.handle.allgather([gathered], [tensor.contiguous()]).wait()
        return gathered

    def all_reduce_sum_(self, tensor: torch.Tensor) -> None:
        self.handle.allreduce([tensor]).wait()

    def broadcast_(self, tensor: torch.Tensor, src: int = 0) -> None:
        self.handle.broadcast(tensor, src).wait()

    def all_gather_object(self, value: Any) -> list[Any]:
        data = torch.frombuffer(bytearray(pickle.dumps(value)), dtype=torch.uint8)
        lengths = self.all_gather(torch.tensor([data.numel()], dtype=torch.int64))
        padded = torch.zeros(int(max(lengths).item()), dtype=torch.uint8)
        padded[: data.numel()] = data
        return [pickle.loads(chunk[: int(length.item())].numpy().tobytes())
                for chunk, length in zip(self.all_gather(padded), lengths)]

    def barrier(self) -> None:
        self.all_reduce_sum_(torch.zeros(1))

    def close(self) -> None:
        self.handle.abort()
