"""The ranks of one island in an elastic run with ``trainer.ranks_per_island`` = R > 1: one leader, R - 1
followers, and an island that lives and dies as a whole.

* **The leader** (local rank 0) is the island's only member of the membership (``membership.py``): it
  beats, votes, exchanges the island's pseudo-gradient with the other islands' leaders (whole: inside
  an island the replicas are identical, so there is nothing to shard), evaluates, serves and fetches
  downloads.
* **Every rank** trains: after each backward pass the island's ranks average their gradients over
  the island's own gloo group (plain data parallel, as in a run without churn), so they hold
  identical replicas.
* **Followers** never speak to another island. Wherever the leader decides something with the others
  (an exchange's average, an admission, an evaluation, a checkpoint's commit, the state a returning
  or resumed island adopts) the leader tells its followers the outcome over the island's group
  (``ElasticWorld.shared``), and they apply it exactly as the leader does, so the replicas stay
  identical. An outcome may be "left out" or "run over": the followers then go the leader's way.
* **Dying together.** The island's group is made once per incarnation of the island (a returning
  island gets a fresh one, under its own store prefix). When any collective on it fails (an
  island-mate died: its sockets closed) the rank SIGKILLs itself, as the crashed machine it belongs
  to, so the island leaves as one: the others see one departure, its leader's silent heartbeat. The
  launcher kills all of an island's processes on a ``leave`` event and when one of them dies. So an
  island also ends as one: its followers wait for their leader's word that it is done
  (``ElasticWorld.finish``), and every rank tears the group down before it exits (``close``).

The group's timeout is long on purpose: followers wait in it while their leader re-forms, downloads or
waits to join; a dead peer fails the wait at once (closed sockets), the timeout only bounds a hang.
"""

from __future__ import annotations

import os
import pickle
import re
import signal
import socket
from collections.abc import Callable
from datetime import timedelta
from typing import Any, NoReturn, TypeVar

import torch
import torch.distributed as dist

from ..exchange.comm import StoreGroup
from .spec import LaunchSpec

ISLAND_TIMEOUT = timedelta(days=1)

T = TypeVar("T")


def incarnation(spec: LaunchSpec) -> str:
    """What the ranks of one start of an island share and no other start does: the local launcher's
    count of the island's starts (the launch spec's), or (under torchrun) the node's name and its
    agent's process id."""
    return spec.incarnation or f"{socket.gethostname()}-{os.getppid()}"


class IslandRanks:
    """This rank's side of its island's group: the per-step gradient average and the leader's word."""

    def __init__(self, store: Any, key: str, island: int, local_rank: int, ranks: int):
        """Form the island's group (every rank of this incarnation calls this) under ``key`` in ``store``."""
        self.island = island
        self.group = self.guarded(
            lambda: StoreGroup(
                dist.PrefixStore(key, store), list(range(ranks)), local_rank, ISLAND_TIMEOUT
            )
        )
        self.rank, self.size = self.group.rank, self.group.size
        self.leads = local_rank == 0
        self.speaking = (
            False  # the leader is computing an outcome it will tell (nested ones are not told)
        )

    def guarded(self, collective: Callable[[], T]) -> T:
        try:
            return collective()
        except RuntimeError as error:
            self.die(error)

    def die(self, error: RuntimeError) -> NoReturn:
        print(
            f"island {self.island}: an island-mate is gone ({first_sentence(error)}); the island leaves "
            f"as a whole",
            flush=True,
        )
        os.kill(os.getpid(), signal.SIGKILL)
        raise AssertionError("not reached: SIGKILL cannot be caught")  # for the type checker

    def close(self) -> None:
        """Tear the island's group down before the process exits. Left alive (the trainer holds it in
        reference cycles), a gloo worker thread that frees a finished collective's tensors only once the
        interpreter is shutting down (the main thread ran on first: a loaded machine) aborts the process
        ("terminate called without an active exception"): a death by a signal, which the launcher takes
        for the island's, killing its other ranks."""
        self.group.close()

    def all_reduce_sum_(self, tensor: torch.Tensor) -> None:
        self.guarded(lambda: self.group.all_reduce_sum_(tensor))

    def barrier(self) -> None:
        self.guarded(self.group.barrier)

    def tell(self, message: Any) -> None:
        """The leader's side of ``hear``."""
        self.guarded(lambda: broadcast_object(self.group, message))

    def hear(self) -> Any:
        """What the leader tells (picklable: tensors, numbers, plain containers)."""
        return self.guarded(lambda: broadcast_object(self.group, None))


def first_sentence(error: Exception) -> str:
    """gloo's error without its source location and advice: "Connection reset by peer" and the like."""
    text = re.sub(r"^\[[^\]]*\]\s*", "", str(error).strip())
    return text.split(". ")[0].splitlines()[0] if text else type(error).__name__


def broadcast_object(group: StoreGroup, message: Any) -> Any:
    """Member 0's ``message`` on every member (a length, then the pickled bytes)."""
    data = pickle.dumps(message) if group.rank == 0 else b""
    length = torch.tensor([len(data)], dtype=torch.int64)
    group.broadcast_(length, 0)
    buffer = torch.zeros(int(length.item()), dtype=torch.uint8)
    if group.rank == 0:
        buffer.copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))
    group.broadcast_(buffer, 0)
    return pickle.loads(buffer.numpy().tobytes())
