"""Where gathering top-k payloads stops beating a dense ring all-reduce as the workers M grow.

A dense ring all-reduce of S bytes moves 2 (M - 1) / M x S per worker, which tends to 2 S; a gather
of top-k payloads of s bytes cannot sum on the wire (``schedules/compression.py``), so what it moves
grows with the payloads fetched (``schedules/gather.py``). On every worker's links at the scenario's
slowest rates, u up and d down, the ring's hops at r = min(u, d), bandwidth terms only, one payload of
the whole model (docs/how-to/compression.md derives the closed forms):

* dense ring: 2 (M - 1) / M x S / r;
* ``"ring"`` gather: (M - 1) s / r. Equal to the dense ring at **M = 2 S / s**;
* ``"direct"``: max((M - 1) s / u, K' s / d): the K senders' uplinks carry M - 1 copies, a receiver's
  downlink K' payloads (K of the M, K - 1 where every worker is chosen). Its uplink term meets the
  dense ring at M = 2 S u / (s r), 2 S / s on equal links;
* ``"store"``: s / min(u, I / M) + K s / min(d, E / M), I and E the store's ingress and egress where
  given: constant in M where they are not and K is fixed, so it beats the ring at every M from
  2 S / (2 S - r (s / u + K s / d)) on; growing with M where they bind or K is every worker.

Latency is left out: it favours the gather, whose rounds take fewer hops (M - 1, one, or three
one-way trips) than the dense ring's 2 (M - 1). Every integer M from 2 to ``MAX_REPLICAS`` (the most
workers a scenario holds) is priced exactly, so the answer is the set of M where the gather is
faster, as intervals.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from islands.scenarios import Scenario
from islands.scenarios.spec import MAX_REPLICAS
from islands.schedules.compression import DENSE_BITS, TopK, whole_values
from islands.schedules.gather import DIRECT, GATHERS, RING
from islands.units import BITS_PER_BYTE

GIGA = 1e9
Intervals = tuple[tuple[int, int], ...]  # inclusive runs of M


@dataclass(frozen=True)
class Links:
    """The rates every worker is priced on (Gbit/s): the slowest uplink and downlink, and the store's
    ingress and egress (None: never binds)."""

    up_gbps: float
    down_gbps: float
    ingress_gbps: float | None
    egress_gbps: float | None

    @property
    def ring_gbps(self) -> float:
        return min(self.up_gbps, self.down_gbps)

    @classmethod
    def of(cls, scenario: Scenario) -> Links:
        return cls(
            min(island.upload_gbps for island in scenario.islands),
            min(island.download_gbps for island in scenario.islands),
            scenario.store.ingress,
            scenario.store.egress,
        )


@dataclass(frozen=True)
class CrossoverRow:
    """Against a dense ring at ``dense_bits``: the M where each gather is faster (inclusive runs)."""

    dense_bits: int
    dense_bytes: float
    beats: dict[str, Intervals]  # network.gather -> runs of M


@dataclass(frozen=True)
class Crossover:
    payload_bytes: int
    peers: int | None  # K; None: every worker's payload
    links: Links
    gather: str  # the scenario's own
    rows: tuple[CrossoverRow, ...]


def dense_ring_s(workers: np.ndarray, dense_bytes: float, links: Links) -> np.ndarray:
    return 2 * (workers - 1) / workers * gigabits(dense_bytes) / links.ring_gbps


def gigabits(byte_count: float) -> float:
    return byte_count * BITS_PER_BYTE / GIGA


def peers_at(workers: np.ndarray, peers: int | None) -> np.ndarray:
    """K at each M: at most the M workers; every one where ``peers`` is None."""
    return workers if peers is None else np.minimum(workers, peers)


def gather_s(
    gather: str, workers: np.ndarray, payload_bytes: int, peers: int | None, links: Links
) -> np.ndarray:
    """Seconds of one gathered round at each M (module docstring)."""
    payload = gigabits(payload_bytes)
    chosen = peers_at(workers, peers)
    if gather == RING:
        return (workers - 1) * payload / links.ring_gbps
    if gather == DIRECT:
        received = np.where(chosen == workers, workers - 1, chosen)
        return np.maximum(
            (workers - 1) * payload / links.up_gbps, received * payload / links.down_gbps
        )
    put = payload / share(links.up_gbps, links.ingress_gbps, workers)
    return put + chosen * payload / share(links.down_gbps, links.egress_gbps, workers)


def share(link_gbps: float, store_gbps: float | None, workers: np.ndarray) -> np.ndarray:
    """A worker's rate to or from the store: its link, or its share of the store's, the smaller."""
    if store_gbps is None:
        return np.full(workers.shape, link_gbps)
    return np.minimum(link_gbps, store_gbps / workers)


def runs_of(mask: np.ndarray, workers: np.ndarray) -> Intervals:
    """The runs of consecutive M where ``mask`` holds, as (first, last)."""
    edges = np.flatnonzero(np.diff(np.concatenate(([0], mask.astype(np.int8), [0]))))
    return tuple(
        (int(workers[start]), int(workers[end - 1])) for start, end in zip(edges[::2], edges[1::2])
    )


def dense_formats(scenario: Scenario) -> list[int]:
    """The dense wire formats a ring of the scenario's model could use: its own width and below."""
    native = scenario.model.bytes_per_param * BITS_PER_BYTE
    return [bits for bits in DENSE_BITS if bits <= max(native, min(DENSE_BITS))]


def gather_crossover(scenario: Scenario) -> Crossover | None:
    """For a top-k scenario, the M where each gather beats a dense ring at each dense format; None for
    a dense one."""
    layout = TopK.of(scenario.schedule)
    if layout is None:
        return None
    values = whole_values(scenario.model.parameters)
    payload, peers, links = (
        layout.payload_bytes(values),
        scenario.schedule.gather_peers,
        Links.of(scenario),
    )
    workers = np.arange(2, MAX_REPLICAS + 1, dtype=np.float64)
    rows = []
    for bits in dense_formats(scenario):
        dense_bytes = values * bits / BITS_PER_BYTE
        ring = dense_ring_s(workers, dense_bytes, links)
        rows.append(
            CrossoverRow(
                bits,
                dense_bytes,
                {
                    gather: runs_of(
                        gather_s(gather, workers, payload, peers, links) < ring, workers
                    )
                    for gather in GATHERS
                },
            )
        )
    return Crossover(payload, peers, links, scenario.network.gather, tuple(rows))


def stops_beating(runs: Intervals) -> int | None:
    """The last M at which the gather still beats the ring (None: never beats, or at every M up to
    ``MAX_REPLICAS``, see ``beats_to_the_end``)."""
    return runs[-1][1] if runs and runs[-1][1] < MAX_REPLICAS else None


def beats_to_the_end(runs: Intervals) -> bool:
    return bool(runs) and runs[-1][1] == MAX_REPLICAS


def crossover_to_dict(found: Crossover) -> dict:
    """As plain data (``islands plan --json``)."""
    return {
        "payload_bytes": found.payload_bytes,
        "gather_peers": found.peers,
        "upload_gbps": found.links.up_gbps,
        "download_gbps": found.links.down_gbps,
        "store_ingress_gbps": found.links.ingress_gbps,
        "store_egress_gbps": found.links.egress_gbps,
        "gather": found.gather,
        "max_workers": MAX_REPLICAS,
        "dense": [
            {
                "bits": row.dense_bits,
                "bytes": row.dense_bytes,
                "gather_faster_at_workers": {
                    gather: [list(run) for run in runs] for gather, runs in row.beats.items()
                },
            }
            for row in found.rows
        ],
    }
