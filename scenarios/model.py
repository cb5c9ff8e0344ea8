"""Validated scenarios as frozen dataclasses: what every other part of islands reads."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

from islands.schedules.buckets import layout_of
from islands.schedules.compression import DEFAULT_CHUNK_VALUES, DEFAULT_TOPK, NONE, payload_bytes
from islands.schedules.store_round import TCP_HANDSHAKE_ROUND_TRIPS
from islands.units import BITS_PER_BYTE, BITS_PER_GBIT, MS_PER_S

from .trainer_keys import TrainerSpec, trainer_spec

MSS_BYTES = 1448  # TCP payload per segment at MTU 1500, timestamps on
MATHIS_C = math.sqrt(1.5)  # Mathis et al.'s constant: periodic loss, an ACK per segment


@dataclass(frozen=True)
class ModelSpec:
    """The model as the scenario gives it; ``layers`` and ``embedding_parameters`` say how it splits
    into fragments (``schedules/layout.py``)."""

    parameters: float
    bytes_per_param: float
    tokens_per_step: float | None = None
    layers: int | None = None
    embedding_parameters: float = 0.0


@dataclass(frozen=True)
class ScheduleSpec:
    algorithm: str
    inner_steps: int
    outer_steps: int
    fragments: int
    overlap_steps: int
    bits: int
    backward_overlap: float
    barrier: str = "wait"
    deadline_slack: float = 0.1
    quorum: int = 1
    grace_window: float | str = "adaptive"
    elastic: bool = False
    compression: str = NONE
    chunk_values: int = DEFAULT_CHUNK_VALUES
    topk: int = DEFAULT_TOPK
    error_feedback: float = 0.0
    transform: str = NONE
    gather_peers: int | None = None


@dataclass(frozen=True)
class NetworkSpec:
    model: str
    tcp_window_bytes: float = 0.0
    streams: int = 1
    loss_rate: float = 0.0
    detection_timeout_s: float = 30.0
    exchange_cpu_s_per_value: float = 0.0
    exchange_end_spread_s: float = 0.0
    rtt_csv: str = ""
    ring_order: str = "ranked"
    collective: str = "ring"
    on_departure: str = "restart"
    ring_efficiency: float = 1.0
    reduce_scatter: str = "all_to_all"
    egress_queue: str = "fair"
    fifo_queue_ms: float = 200.0
    tcp_congestion_control: str = "cubic"
    fifo_k_s: float | None = None
    fifo_k_so: float | None = None
    fifo_k_u: float | None = None
    weights_from: str = "fastest"
    gather: str = "ring"

    def tcp_cap_bytes_per_s(self, one_way_latency_s: float, ack_wait_s: float = 0.0) -> float:
        """``streams`` times one stream's rate at RTT = 2 x ``one_way_latency_s`` + ``ack_wait_s`` (the
        ACKs' wait behind the receiver's uploads in one FIFO, ``scenarios/fifo.py``): the window over
        the RTT, and with ``loss_rate`` = p at most MATHIS_C x MSS / (RTT x sqrt(p)) (Mathis, Semke,
        Mahdavi and Ott 1997, eq. 3); no cap (inf) without a round trip, or without a window and loss."""
        rtt_s = 2 * one_way_latency_s + ack_wait_s
        if rtt_s <= 0:
            return math.inf
        stream_bytes_per_s = (
            self.tcp_window_bytes / rtt_s if self.tcp_window_bytes > 0 else math.inf
        )
        loss_rtt_s = rtt_s * math.sqrt(self.loss_rate)
        if loss_rtt_s > 0:  # 0 without loss, or where a round trip of a few ulps underflows: no cap
            stream_bytes_per_s = min(stream_bytes_per_s, MATHIS_C * MSS_BYTES / loss_rtt_s)
        return self.streams * stream_bytes_per_s


@dataclass(frozen=True)
class ExchangeSpec:
    """How the training stack makes one exchange: its collective calls and their fixed costs
    (``[exchange]``). An exchange of C calls over a ring of M pays ``sync_overhead_s`` + C x
    (``call_overhead_s`` + 2(M-1) x the slowest hop's latency) besides its bytes; the run's first call
    also pays ``first_call_s``. Buckets are laid out as PyTorch DDP lays them (``schedules.buckets``)."""

    calls: str = "flat"
    bucket_cap_mb: float | None = None
    first_bucket_mb: float | None = None
    tensors: int | None = None
    tensor_values: tuple[float, ...] | None = None
    call_overhead_s: float = 0.0
    sync_overhead_s: float = 0.0
    first_call_s: float = 0.0
    outer_step_s: float = 0.0

    def calls_of(self, values: float, total_values: float, bytes_per_value: float) -> int:
        """Collective calls of an exchange of ``values`` (of the model's ``total_values``): one flat
        buffer; its buckets (``schedules.buckets.layout_of``); or the fragment's share of the model's
        tensors, at least one."""
        if self.calls == "buckets":
            return layout_of(self, values, bytes_per_value).calls
        tensors = self.tensor_count
        if self.calls == "per_tensor" and tensors is not None:
            return max(1, round(tensors * values / total_values))
        return 1

    @property
    def tensor_count(self) -> int | None:
        """The model's parameter tensors: ``tensors``, or as many as ``tensor_values`` lists."""
        if self.tensors is None and self.tensor_values is not None:
            return len(self.tensor_values)
        return self.tensors

    @property
    def is_default(self) -> bool:
        """One flat call at no fixed cost: what a scenario without ``[exchange]`` prices."""
        return self == ExchangeSpec()


@dataclass(frozen=True)
class ComputeSpec:
    """How a worker's compute behaves besides its step time (``[compute]``): it runs at 1 / (1 +
    ``slowdown_while_exchanging``) of its speed while its own exchange moves bytes
    (``simulator.compute.slowed_end_s``)."""

    slowdown_while_exchanging: float = 0.0


@dataclass(frozen=True)
class SyncerSpec:
    """Decoupled DiLoCo's syncer: its access link (None: a non-blocking core), latency and region."""

    bandwidth_gbps: float | None = None
    latency_ms: float = 0.0
    region: str | None = None


@dataclass(frozen=True)
class StoreSpec:
    """The object store of ``network.gather = "store"``: its link each way (None: never binds), its
    one-way latency, its own time to answer a request, its region, and the round trips a new
    connection to it takes (``schedules/store_round.py``). ``bandwidth_gbps`` is both ways where
    ``ingress_gbps`` (every PUT) or ``egress_gbps`` (every GET) is not given."""

    bandwidth_gbps: float | None = None
    ingress_gbps: float | None = None
    egress_gbps: float | None = None
    latency_ms: float = 0.0
    request_ms: float = 0.0  # the store's own time to answer each request, past its bytes
    region: str | None = None
    handshake_round_trips: int = TCP_HANDSHAKE_ROUND_TRIPS  # a new connection's

    @property
    def ingress(self) -> float | None:
        """Gbit/s into the store (None: it never binds)."""
        return self.bandwidth_gbps if self.ingress_gbps is None else self.ingress_gbps

    @property
    def egress(self) -> float | None:
        """Gbit/s out of the store (None: it never binds)."""
        return self.bandwidth_gbps if self.egress_gbps is None else self.egress_gbps

    def given(self) -> list[str]:
        """The keys given away from their defaults, in declaration order."""
        return [key.name for key in fields(self) if getattr(self, key.name) != key.default]


@dataclass(frozen=True)
class PairLatency:
    """A measured round trip between the workers of two islands (or between one island's replicas)."""

    between: tuple[str, str]
    rtt_ms: float


@dataclass(frozen=True)
class BackboneSpec:
    """The link between two regions' cores: ``bandwidth_gbps`` each way, ``latency_ms`` one way."""

    between: tuple[str, str]
    bandwidth_gbps: float
    latency_ms: float = 0.0


@dataclass(frozen=True)
class IslandSpec:
    """An island as written in the file; ``step_time_s`` and both directions' bandwidths are resolved
    by the loader (derived from gpus/gpu/mfu, or from bandwidth_gbps)."""

    name: str
    replicas: int
    step_time_s: float
    upload_gbps: float
    download_gbps: float
    latency_ms: float
    jitter_cv: float = 0.0
    present: bool = True
    mtbf_s: float | None = None
    mttr_s: float | None = None
    chips: int = 1
    chip_mtbf_s: float | None = None
    recovery_s: float | None = None
    cost_per_hour: float = 0.0
    upload_burst_bytes: float = 0.0
    download_burst_bytes: float = 0.0
    region: str | None = None

    @property
    def bandwidth_gbps(self) -> float:
        """The slower direction: what a ring all-reduce through this island can use."""
        return min(self.upload_gbps, self.download_gbps)


@dataclass(frozen=True)
class ChurnEvent:
    at_s: float
    island: str  # an island name or one replica's worker name
    kind: str  # "leave" | "join"


@dataclass(frozen=True)
class Worker:
    """One replica of an island: it computes, holds a full model copy and owns one access link."""

    rank: int
    name: str
    island: str
    step_time_s: float
    upload_bytes_per_s: float
    download_bytes_per_s: float
    latency_s: float
    jitter_cv: float = 0.0
    present: bool = True
    mtbf_s: float | None = None
    mttr_s: float | None = None
    chips: int = 1
    chip_mtbf_s: float | None = None
    recovery_s: float | None = None
    upload_burst_bytes: float = 0.0
    download_burst_bytes: float = 0.0
    region: str | None = None

    @property
    def failure_rate_per_compute_s(self) -> float:
        """Interruptions per second of compute: chips / chip_mtbf_s (0 without chip failures)."""
        return self.chips / self.chip_mtbf_s if self.chip_mtbf_s is not None else 0.0


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    seed: int
    model: ModelSpec
    schedule: ScheduleSpec
    network: NetworkSpec
    islands: tuple[IslandSpec, ...]
    source: str
    exchange: ExchangeSpec = field(default_factory=ExchangeSpec)
    compute: ComputeSpec = field(default_factory=ComputeSpec)
    trainer: TrainerSpec = field(default_factory=trainer_spec)
    events: tuple[ChurnEvent, ...] = ()
    syncer: SyncerSpec = field(default_factory=SyncerSpec)
    store: StoreSpec = field(default_factory=StoreSpec)
    regions: tuple[str, ...] = ()
    backbones: tuple[BackboneSpec, ...] = ()
    latencies: tuple[PairLatency, ...] = ()

    @property
    def payload_bytes(self) -> float:
        """Bytes of one full gradient / pseudo-gradient on the wire: parameters * bits / 8, or its
        top-k payload (``schedules.compression.payload_bytes``)."""
        return payload_bytes(self.model.parameters, self.schedule)

    @property
    def weights_bytes(self) -> float:
        """Bytes of the global weights a joiner downloads: parameters * bytes_per_param."""
        return self.model.parameters * self.model.bytes_per_param

    def workers(self) -> list[Worker]:
        """Expand islands and their replicas into workers, numbered in the order of the islands' names
        (then replicas): the order the tables are written in changes no rank, so no draw, ring or
        tie-break depends on it."""
        workers: list[Worker] = []
        for island in sorted(self.islands, key=lambda island: island.name):
            for replica in range(island.replicas):
                workers.append(
                    Worker(
                        rank=len(workers),
                        name=island.name if island.replicas == 1 else f"{island.name}-{replica}",
                        island=island.name,
                        step_time_s=island.step_time_s,
                        upload_bytes_per_s=island.upload_gbps * BITS_PER_GBIT / BITS_PER_BYTE,
                        download_bytes_per_s=island.download_gbps * BITS_PER_GBIT / BITS_PER_BYTE,
                        latency_s=island.latency_ms / MS_PER_S,
                        jitter_cv=island.jitter_cv,
                        present=island.present,
                        mtbf_s=island.mtbf_s,
                        mttr_s=island.mttr_s,
                        chips=island.chips,
                        chip_mtbf_s=island.chip_mtbf_s,
                        recovery_s=island.recovery_s,
                        upload_burst_bytes=island.upload_burst_bytes,
                        download_burst_bytes=island.download_burst_bytes,
                        region=island.region,
                    )
                )
        return workers

    @property
    def farthest_hop_latency_s(self) -> float:
        """An upper bound on one ring hop's one-way latency: the two largest access latencies (an
        island with replicas counts twice) plus the longest backbone, or half the longest measured
        round trip (``[[latency]]``, ``network.rtt_csv``) where that is longer."""
        access_ms = sorted(
            (island.latency_ms for island in self.islands for _ in range(min(island.replicas, 2))),
            reverse=True,
        )
        additive_ms = sum(access_ms[:2]) + max(
            (backbone.latency_ms for backbone in self.backbones), default=0.0
        )
        measured_ms = max((pair.rtt_ms / 2 for pair in self.latencies), default=0.0)
        return max(additive_ms, measured_ms) / MS_PER_S

    @property
    def worker_count(self) -> int:
        return sum(island.replicas for island in self.islands)

    @property
    def chips(self) -> int:
        """Chips of the whole fleet: every worker's, present or not (goodput's denominator)."""
        return sum(island.chips * island.replicas for island in self.islands)

    def has_failures(self) -> bool:
        return any(island.chip_mtbf_s is not None for island in self.islands)

    def has_churn(self) -> bool:
        return bool(self.events) or any(i.mtbf_s is not None or not i.present for i in self.islands)
