"""A joiner's state arrives in the background while the members train on: the rule both executors play.

1. **Download from the first quiet moment, from the fastest holder.** A joiner asks for the global
   state as soon as it asks to join. The members' leader (the lowest member that holds the state)
   picks the holder that sends it (``network.weights_from = "fastest"``, ``schedules/serving.py``:
   the one that gives the joiner the highest rate now, min(its uplink / (downloads it is sending +
   1), the joiner's downlink), from the scenario's links; ties to the lower latency, then the lower
   island) and names it in the store (``Server.assign``); any holder may be picked, not only the
   leader. The holder picked snapshots the global fp32 weights and the outer optimizer state at its
   first inner step from which no average is due before the next admission
   (``DiLoCo.quiet_until_admission``: at once under DiLoCo, whose weights change only at the syncs;
   under Streaming DiLoCo from the outer boundary to the next period's first launch), and sends it on
   a thread, over a two-member gloo group of its own, paced like every other WAN byte
   (``paced.PacedGroup``, over its own uplink): it trains on meanwhile. (``"striped"`` is simulated
   only: ``config.check_supported`` refuses it.)
2. **Passive until it has it.** At the next launch of fragment 0 the members admit it: from then on
   it is a member of the ring, takes part in every exchange with a zero contribution that the
   screening leaves out of the mean (``robust.JOINING``), and keeps each average.
3. **Active from the first boundary after its download.** It adopts the snapshot, applies the kept
   averages in order (the same outer steps the members took, so its global weights equal theirs bit
   for bit), and trains from the next outer step.

The simulator plays the same rule (``simulator/events/churn.py`` and ``weights.py``): the download
from the holder the same function picks starts at the first moment after the join with no collective
pending since the last outer boundary, the joiner is in every collective from the next first
fragment's on, and it computes from the outer step after the first outer boundary once its download
is in. If the holder sending it dies mid-download the joiner asks again and the leader picks another
(the simulator starts such a download again from the holder the rule picks then); a joiner that dies
is a member that left.

The store keeps, per download ``N``: ``joiner``, ``broken`` (the holder whose sending broke off in the
joiner's attempt before, which the leader passes over while another holder is there), ``server`` (the
holder picked), ``claim`` (who picked it, once) and ``over`` (set once the attempt ended, on either
side: a holder never serves it again, and the leader no longer counts it among its downloads).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch.distributed as dist

from islands.scenarios import Worker
from islands.schedules import serving

from ..exchange.comm import StoreGroup, broadcast_bytes
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
    """A holder's side: the leader picks the holder of each download request (``assign``), and every
    holder serves the requests it was picked for, each once, on its own thread."""

    def __init__(self, membership: Membership, pacer: str | None, workers: tuple[Worker, ...]):
        self.membership = membership
        self.pacer = pacer
        self.workers = workers  # by island: the scenario's links, the rule's inputs
        self.assigned = 0  # requests up to this one have a holder, as far as this leader knows
        self.served = 0  # requests up to this one were looked at by this holder
        self.open: dict[int, int] = {}  # the leader's: the downloads not over, and their holders

    def poll(self, snapshot: Callable[[], bytes], leads: bool) -> None:
        """Called by a holder between inner steps while no average is due: the leader (``leads``)
        picks the holders of the new requests, then this holder serves those it was picked for, each
        with a ``snapshot()`` of the global state taken now."""
        total = self.membership.store.add(self.membership.key("download", "requests"), 0)
        if leads:
            self.assign(total)
        self.serve_mine(total, snapshot)

    def assign(self, total: int) -> None:
        """Pick the holder of every request up to ``total`` that has none (``serving.fastest``): the
        holders are the members that hold the state and still beat, each sending the downloads the
        leader picked it for that are not over (a new leader first reads them back from the store)."""
        membership = self.membership
        for number in range(self.assigned + 1, total + 1):
            named = membership.key("download", number, "server")
            if not membership.store.check([named]):
                joiner = int(membership.get(membership.key("download", number, "joiner")))
                chosen = self.fastest(joiner, self.broken(number))
                if chosen is None:
                    return  # no holder: the next poll
                if membership.store.add(membership.key("download", number, "claim"), 1) == 1:
                    membership.store.set(named, str(chosen))
            if not self.is_over(number):
                self.open[number] = int(membership.get(named))
            self.assigned = number

    def broken(self, number: int) -> int | None:
        """The holder whose sending broke off in the joiner's attempt before request ``number``."""
        key = self.membership.key("download", number, "broken")
        return int(self.membership.store.get(key)) if self.membership.store.check([key]) else None

    def fastest(self, joiner: int, broken: int | None) -> int | None:
        """The holder ``serving.fastest`` picks for ``joiner`` now, among the members that hold the
        state and still beat, but the one whose sending just broke off (it is likely gone before the
        others notice: the simulator sends again from another) while another is there."""
        membership = self.membership
        gone = set(membership.gone())
        holders = [
            h for h in sorted(set(membership.members) & membership.stateful) if h not in gone
        ]
        self.open = {
            number: holder
            for number, holder in self.open.items()
            if holder in holders and not self.is_over(number)
        }
        sending = Counter(self.open.values())
        if broken in holders and len(holders) > 1:
            holders.remove(broken)
        chosen = serving.fastest(
            (
                serving.Holder(
                    holder,
                    self.workers[holder].upload_bytes_per_s,
                    sending[holder],
                    self.workers[holder].latency_s + self.workers[joiner].latency_s,
                )
                for holder in holders
            ),
            self.workers[joiner].download_bytes_per_s,
        )
        return None if chosen is None else chosen.rank

    def is_over(self, number: int) -> bool:
        return self.membership.store.check([self.membership.key("download", number, "over")])

    def serve_mine(self, total: int, snapshot: Callable[[], bytes]) -> None:
        """Serve the requests up to ``total`` that name this holder and are not over (stops at the
        first without a holder yet: the leader picks them in order)."""
        membership = self.membership
        for number in range(self.served + 1, total + 1):
            named = membership.key("download", number, "server")
            if not membership.store.check([named]):
                return
            self.served = number
            if int(membership.store.get(named)) != membership.island or self.is_over(number):
                continue
            joiner = int(membership.get(membership.key("download", number, "joiner")))
            data = snapshot()
            threading.Thread(
                target=self.serve,
                args=(number, joiner, data),
                daemon=True,
                name=f"islands-serve-{number}",
            ).start()

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
            over(self.membership, number)
            if group is not None:
                group.close()


def over(membership: Membership, number: int) -> None:
    """Download ``number``'s attempt ended (in, or broken): no holder serves it again."""
    membership.store.set(membership.key("download", number, "over"), "1")


class Fetcher:
    """The joiner's side: asks for the state and receives it on a thread, asking again if the
    holder sending it dies mid-way."""

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
        broken = None
        while not self.membership.stopping.is_set():
            number = self.request(broken)
            started_s = self.now_s()
            group = None
            try:
                broken = self.server_of(number)
                group, paced = transfer_group(
                    self.membership, number, broken, self.membership.island, self.pacer
                )
                data = broadcast_bytes(paced, None, 0, self.membership.island)
            except RuntimeError:
                time.sleep(RETRY_PAUSE_S)
                continue
            finally:
                over(self.membership, number)
                if group is not None:
                    group.close()
            self.result = Download(data, started_s, self.now_s())
            self.done.set()
            return

    def request(self, broken: int | None) -> int:
        """A new request (``broken``: the holder whose sending broke off in the last attempt)."""
        membership = self.membership
        number = membership.store.add(membership.key("download", "requests"), 1)
        if broken is not None:
            membership.store.set(membership.key("download", number, "broken"), str(broken))
        membership.store.set(membership.key("download", number, "joiner"), str(membership.island))
        return number

    def server_of(self, number: int) -> int:
        """The holder the leader picked for request ``number`` (waits for it up to the store's timeout)."""
        return int(self.membership.get(self.membership.key("download", number, "server")))
