"""A joiner's state arrives in the background while the members train on: the rule both executors play.

1. **Download from the first quiet moment.** A joiner asks for the global state as soon as it asks
   to join. The members' leader (the lowest member that holds the state) snapshots the global fp32
   weights and the outer optimizer state at its first inner step from which no average is due
   before the next admission (``DiLoCo.quiet_until_admission``: at once under DiLoCo, whose
   weights change only at the syncs; under Streaming DiLoCo from the outer boundary to the next
   period's first launch), and sends it on a thread, over a two-member gloo group of its own, paced
   like every other WAN byte (``paced.PacedGroup``): the leader trains on meanwhile.
2. **Passive until it has it.** At the next launch of fragment 0 the members admit it: from then on
   it is a member of the ring, takes part in every exchange with a zero contribution that the
   screening leaves out of the mean (``robust.JOINING``), and keeps each average.
3. **Active from the first boundary after its download.** It adopts the snapshot, applies the kept
   averages in order (the same outer steps the members took, so its global weights equal theirs bit
   for bit), and trains from the next outer step.

The simulator plays the same rule (``simulator/events/churn.py``): the download from the lowest present
worker starts at the first moment after the join with no collective pending since the last outer
boundary, the joiner is in every collective from the next first fragment's on, and it computes from
the outer step after the first outer boundary once its download is in. If the leader dies
mid-download the joiner asks again and the next leader serves it; a joiner that dies is a member
that left.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch.distributed as dist

from ..core.comm import StoreGroup, broadcast_bytes
from ..runtime.paced import paced
from .membership import Membership

RETRY_PAUSE_S = 0.2


@dataclass
class Download:
    """What a joiner received: the snapshot's bytes and when (trace seconds) it came."""

    data: bytes
    started_s: float
    done_s: float


def transfer_group(
    membership: Membership, number: int, server: int, joiner: int, pacer: str | None
) -> Any:
    """The two-member group of download ``number`` (member 0 the server), paced as WAN traffic."""
    store = dist.PrefixStore(membership.key("download", number, "group"), membership.store)
    group = StoreGroup(
        store,
        [server, joiner],
        membership.island,
        timedelta(seconds=membership.timing.collective_s),
    )
    return group, paced(group, pacer, [server, joiner])


class Server:
    """The leader's side: serves every download request once, each on its own thread."""

    def __init__(self, membership: Membership, pacer: str | None):
        self.membership = membership
        self.pacer = pacer
        self.seen = 0

    def poll(self, snapshot: Callable[[], bytes]) -> None:
        """Called by the leader between inner steps: claim and serve the requests not yet served, each
        with a ``snapshot()`` of the global state taken now."""
        membership = self.membership
        total = membership.store.add(membership.key("download", "requests"), 0)
        for number in range(self.seen + 1, total + 1):
            claim = membership.key("download", number, "server")
            if membership.store.compare_set(claim, "", str(membership.island)).decode() != str(
                membership.island
            ):
                continue
            joiner = int(membership.get(membership.key("download", number, "joiner")))
            data = snapshot()
            threading.Thread(
                target=self.serve,
                args=(number, joiner, data),
                daemon=True,
                name=f"islands-serve-{number}",
            ).start()
        self.seen = total

    def serve(self, number: int, joiner: int, data: bytes) -> None:
        group = None
        try:
            group, paced = transfer_group(
                self.membership, number, self.membership.island, joiner, self.pacer
            )
            broadcast_bytes(paced, data, 0, self.membership.island)
        except RuntimeError as error:
            print(
                f"download {number} to island {joiner} broke off ({error}); it asks again",
                flush=True,
            )
        finally:
            if group is not None:
                group.close()


class Fetcher:
    """The joiner's side: asks for the state and receives it on a thread, asking again if the
    leader dies mid-way."""

    def __init__(self, membership: Membership, now_s: Callable[[], float], pacer: str | None):
        self.membership = membership
        self.now_s = now_s
        self.pacer = pacer
        self.result: Download | None = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.fetch, daemon=True, name="islands-fetch")

    def start(self) -> None:
        self.thread.start()

    def fetch(self) -> None:
        while not self.membership.stopping.is_set():
            number = self.request()
            started_s = self.now_s()
            group = None
            try:
                group, paced = transfer_group(
                    self.membership,
                    number,
                    self.server_of(number),
                    self.membership.island,
                    self.pacer,
                )
                data = broadcast_bytes(paced, None, 0, self.membership.island)
            except RuntimeError:
                time.sleep(RETRY_PAUSE_S)
                continue
            finally:
                if group is not None:
                    group.close()
            self.result = Download(data, started_s, self.now_s())
            self.done.set()
            return

    def request(self) -> int:
        membership = self.membership
        number = membership.store.add(membership.key("download", "requests"), 1)
        membership.store.set(membership.key("download", number, "joiner"), str(membership.island))
        return number

    def server_of(self, number: int) -> int:
        """The island that claimed request ``number`` (waits for a claim up to the store's timeout)."""
        return int(self.membership.get(self.membership.key("download", number, "server")))
