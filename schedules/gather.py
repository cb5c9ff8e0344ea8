"""How top-k payloads travel, declared once: around a ring, peer to peer, or through an object store.

Top-k payloads cannot be summed on the wire (``compression.py``), so every worker fetches the payloads
it averages. ``network.gather`` says how:

* ``"ring"`` (the default): every payload to every worker around the ring (``RingAllGather``):
  M - 1 payloads up and M - 1 down per worker, M - 1 hops of latency;
* ``"direct"``: the K peers of the round send their payload straight to each of the M - 1 others at
  once, one hop of latency: M - 1 payloads up for each of them, none for the others; K - 1 down for
  each of them (its own is at hand), K for the others. A unicast fan-out: without a relay a payload
  leaves its sender's uplink once per receiver;
* ``"store"``: every worker PUTs its payload into an object store once (its uplink, the store's
  ingress: one payload up), and once every PUT is in, GETs the K payloads of the round (the store's
  egress, its downlink: K down, its own among them where it is one of the K: every worker merges the
  store's copies). Covenant-72B's peers exchange this way (arXiv 2603.08163), the store's egress
  carrying M x K payloads.

The round's K peers (``schedule.gather_peers``; default: every worker) are the same for every worker,
so every worker takes the same mean and the replicas stay one model: ``chosen`` draws them from the
scenario's seed and the outer step (``random.Random("<seed>:gather:<outer step>")``, a SHA-512
seeded generator, the same in every process and on every platform), a sample of K of the M workers
by rank (the islands by name), in rank order. A worker outside the K computes and sends as the others
do (the store) or sends nothing (direct), its error-feedback buffer keeps all it did not get merged,
and it adopts the mean of the K.

``uploads`` and ``downloads`` count the payloads per worker: the simulator prices exactly these
(``simulator/network/gather_rounds.py``) and the trainer moves exactly these (``trainer/exchange/sparse.py``).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .compression import NONE

if TYPE_CHECKING:
    from islands.scenarios.model import Scenario

RING = "ring"
DIRECT = "direct"
STORE = "store"
GATHERS = (RING, DIRECT, STORE)


def chosen(
    seed: int, outer_step: int, members: Sequence[int], peers: int | None
) -> tuple[int, ...]:
    """The ranks, of ``members``, whose payloads the round of ``outer_step`` averages: ``peers`` of
    them (every one for None or more than there are) drawn from the seed and the outer step, in
    rank order."""
    ranked = sorted(members)
    if peers is None or peers >= len(ranked):
        return tuple(ranked)
    draw = random.Random(f"{seed}:gather:{outer_step}")
    return tuple(sorted(draw.sample(ranked, peers)))


def uploads(gather: str, members: int, is_chosen: bool) -> int:
    """Payloads one of ``members`` workers sends in a round (``is_chosen``: one of its K peers)."""
    if gather == STORE:
        return 1
    if gather == DIRECT and not is_chosen:
        return 0
    return members - 1


def downloads(gather: str, members: int, peers: int, is_chosen: bool) -> int:
    """Payloads one of ``members`` workers receives in a round of ``peers`` chosen peers."""
    if gather == RING:
        return members - 1
    if gather == STORE:
        return peers
    return peers - 1 if is_chosen else peers


def peers_of(scenario: Scenario) -> int:
    """K: the payloads a round averages (every worker's where ``gather_peers`` is not given)."""
    given = scenario.schedule.gather_peers
    return scenario.worker_count if given is None else given


def problem(scenario: Scenario) -> tuple[str, str] | None:
    """The first gather key that does nothing or cannot be run, as (key, rule)."""
    gather, schedule = scenario.network.gather, scenario.schedule
    if gather != RING and schedule.compression == NONE:
        return (
            "network.gather",
            f'"{gather}" gathers top-k payloads: set schedule.compression = "topk" (a dense '
            'payload is summed around the ring), or use "ring"',
        )
    if schedule.gather_peers is not None:
        if gather == RING:
            return (
                "schedule.gather_peers",
                'has no effect with network.gather = "ring", which gathers every payload: set '
                'network.gather = "direct" or "store", or remove it',
            )
        if schedule.gather_peers > scenario.worker_count:
            return (
                "schedule.gather_peers",
                f"must be at most the {scenario.worker_count} workers of the scenario (got "
                f"{schedule.gather_peers})",
            )
    unread = unread_store(scenario)
    if unread or gather == RING:
        return unread
    return ring_only(scenario)


def ring_only(scenario: Scenario) -> tuple[str, str] | None:
    """What is priced on a ring and not on a direct or store gather."""
    gather, network = scenario.network.gather, scenario.network
    if network.on_departure == "partial":
        return (
            "network.on_departure",
            f'"partial" goes on with a ring\'s other members; network.gather = "{gather}" is '
            'not priced without a departed member: use "restart"',
        )
    if network.exchange_end_spread_s > 0:
        return (
            "network.exchange_end_spread_s",
            f'is measured on a ring: set it to 0 with network.gather = "{gather}"',
        )
    if not scenario.exchange.is_default:
        return (
            "[exchange]",
            f'prices a ring\'s collective calls; network.gather = "{gather}" is not priced by it: '
            'remove the section, or use network.gather = "ring"',
        )
    return None


def unread_store(scenario: Scenario) -> tuple[str, str] | None:
    """A ``[store]`` key given where no payload goes through the store."""
    given = scenario.store.given()
    if given and scenario.network.gather != STORE:
        return (
            f"store.{given[0]}",
            f'has no effect with network.gather = "{scenario.network.gather}": only "store" '
            "sends payloads through the object store (set it, or remove [store])",
        )
    return None
