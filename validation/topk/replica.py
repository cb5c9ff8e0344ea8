"""The scaled replica of a compressed exchange: the trainer's GPT's real top-k payload, gathered as the
original gathers it (``network.gather``: around the ring, peer to peer, or through the object store).

A top-k payload (``schedules/compression.py``) is the trainer's own: each fragment of the scaled
model's values (``scaling.trainer_model_values``, split by layer as the trainer splits it) keeps
``topk`` of every ``chunk_values`` values at ``bits`` each with its place, plus the side table, so
the scaled ``[model]`` is the trainer's GPT itself (its values, its layers, its embeddings) and the
simulator sizes the payload with the same function the trainer's encoder writes.

Kept as in the dense cases (``scaling``'s docstring): the ratio of transfer to compute per interval.
A gather's transfer time is not one volume over one rate (a store round is a PUT on the uplinks and
the store's ingress, then K GETs on the downlinks and its egress), so the rates scale by the ratio
of the gather's time, not of a volume: with T(rates) the seconds the simulator gives a round alone on
its links (``gather_s``, the bandwidth part of ``simulator/network/gather_rounds.py``'s closed
forms), homogeneous of degree -1 in the rates, every rate of the scaled run is c x the original's,
c = T_scaled(original rates) / (k x T_original(original rates)), so that T_scaled(c x rates) = k x
T_original exactly, whichever link binds. The store's links are first scaled by M' / M: each worker's
share of them (1 / M of the ingress, 1 / M of the egress) stays what it was, so a store that bound
the original binds the scaled run too. K (``schedule.gather_peers``) shrinks with M: K' = K M' / M,
rounded, at least 1, and below M' where K was below M (a sample stays a sample).
"""

from __future__ import annotations

import math
from typing import Any

from islands.scenarios import Scenario, Worker
from islands.schedules import Schedule
from islands.schedules.compression import TopK, whole_values
from islands.schedules.gather import DIRECT, RING, STORE, downloads, peers_of
from islands.schedules.layout import split_by_layer
from islands.units import BITS_PER_BYTE, BITS_PER_GBIT


def topk_payload_bytes(
    layer_values: list[int], schedule: Schedule, fragments: int, layout: TopK
) -> float:
    """Bytes of one whole exchange of the trainer's GPT as its top-k encoder writes them: each
    fragment's payload (``TopK.payload_bytes``, ``trainer/exchange/sparse.py``), summed."""
    return float(
        sum(
            layout.payload_bytes(whole_values(values))
            for values in split_by_layer(layer_values, fragments, schedule.fragment_of_layer)
        )
    )


def topk_model_entry(layer_values: list[int], embedding_values: int) -> dict[str, Any]:
    """The scaled ``[model]`` of a top-k exchange: the trainer's GPT as it is (its values, layers and
    embeddings; ``schedules/layout.py``), which the simulator's top-k payload is sized from."""
    return {
        "parameters": float(sum(layer_values)),
        "bytes_per_param": 4,
        "layers": len(layer_values),
        "embedding_parameters": float(embedding_values),
    }


def scaled_peers(peers: int | None, workers: int, scaled_workers: int) -> int | None:
    """K' of the scaled run (the module's docstring); None (every worker) stays None."""
    if peers is None or scaled_workers == workers:
        return peers
    if peers >= workers:
        return scaled_workers
    return min(scaled_workers - 1, max(1, round(peers * scaled_workers / workers)))


def store_bytes_per_s(gbps: float | None) -> float:
    """A store link's rate in bytes/s (None: it never binds)."""
    return math.inf if gbps is None else gbps * BITS_PER_GBIT / BITS_PER_BYTE


def gather_s(
    way: str,
    workers: list[Worker],
    peers: int,
    payload_bytes: float,
    store_in_bytes_per_s: float = math.inf,
    store_out_bytes_per_s: float = math.inf,
) -> float:
    """Seconds of a round's bytes alone on the links, latency apart, at the slowest worker's links
    (whichever workers a round draws): around the ring (M - 1) S at the slowest link; direct, the
    busiest of a sender's uplink ((M - 1) S) and a receiver's downlink (K S, K - 1 where every worker
    sends); through the store, a PUT of S at min(uplink, ingress / M), then K GETs at min(downlink,
    egress / M)."""
    m = len(workers)
    up = min(w.upload_bytes_per_s for w in workers)
    down = min(w.download_bytes_per_s for w in workers)
    if way == RING:
        return (m - 1) * payload_bytes / min(up, down)
    if way == DIRECT:
        received = max(downloads(DIRECT, m, peers, chosen) for chosen in {peers == m, True})
        return max((m - 1) * payload_bytes / up, received * payload_bytes / down)
    assert way == STORE, way
    return payload_bytes / min(up, store_in_bytes_per_s / m) + peers * payload_bytes / min(
        down, store_out_bytes_per_s / m
    )


def gather_ratio(
    scenario: Scenario,
    workers: list[Worker],
    scaled_payload_bytes: float,
    original_payload_bytes: float,
) -> float:
    """T_scaled / T_original at the original's rates (the module's docstring), the store's links
    scaled by M' / M."""
    way, store = scenario.network.gather, scenario.store
    m, scaled_m = scenario.worker_count, len(workers)
    peers = peers_of(scenario)
    share = scaled_m / m
    ingress, egress = store_bytes_per_s(store.ingress), store_bytes_per_s(store.egress)
    original_s = gather_s(way, scenario.workers(), peers, original_payload_bytes, ingress, egress)
    scaled_peer_count = scaled_peers(peers, m, scaled_m)
    assert scaled_peer_count is not None
    scaled_s = gather_s(
        way, workers, scaled_peer_count, scaled_payload_bytes, ingress * share, egress * share
    )
    return scaled_s / original_s


def gather_notes(scenario: Scenario, scaled_workers: int) -> list[str]:
    """What changed of the gather: K with M."""
    peers = scenario.schedule.gather_peers
    scaled = scaled_peers(peers, scenario.worker_count, scaled_workers)
    if peers is None or scaled == peers:
        return []
    return [f"K {peers} of {scenario.worker_count} -> {scaled} of {scaled_workers}"]


def schedule_keys(scenario: Scenario, scaled_workers: int) -> dict[str, Any]:
    """The scaled ``[schedule]``'s top-k keys (``bits`` is set with the others)."""
    schedule = scenario.schedule
    keys: dict[str, Any] = {
        "compression": schedule.compression,
        "chunk_values": schedule.chunk_values,
        "topk": schedule.topk,
        "error_feedback": schedule.error_feedback,
    }
    peers = scaled_peers(schedule.gather_peers, scenario.worker_count, scaled_workers)
    if peers is not None:
        keys["gather_peers"] = peers
    return keys


def store_entry(
    scenario: Scenario, scaled_workers: int, rate_factor: float, time_factor: float
) -> dict[str, Any]:
    """The scaled ``[store]``: each link at its per-worker share times the islands' rate factor (none
    stays none: a store that never binds), the latency and its time to answer a request (where it
    takes any) by k."""
    store, share = scenario.store, scaled_workers / scenario.worker_count
    entry: dict[str, Any] = {"latency_ms": store.latency_ms * time_factor}
    if store.request_ms > 0:
        entry["request_ms"] = store.request_ms * time_factor
    for key, gbps in (("ingress_gbps", store.ingress), ("egress_gbps", store.egress)):
        if gbps is not None:
            entry[key] = gbps * share * rate_factor
    return entry
