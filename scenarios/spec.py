"""The scenario format as plain data: every section's keys, their types, defaults and rules.

A key is described once here; the loader checks a parsed TOML document against these tables and the
key reference of the docs is generated from them (docs/gen_reference.py). Adding a key to the format
is adding one ``Key`` line.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from islands.numbers import is_whole_number
from islands.schedules import SCHEDULES
from islands.schedules.compression import (
    COMPRESSIONS,
    DEFAULT_CHUNK_VALUES,
    DEFAULT_TOPK,
    DENSE_BITS,
    TRANSFORMS,
    VALUE_BITS,
)
from islands.schedules.decoupled import ADAPTIVE
from islands.schedules.gather import GATHERS
from islands.schedules.serving import WEIGHTS_SOURCES
from islands.schedules.store_round import TCP_HANDSHAKE_ROUND_TRIPS

REQUIRED = object()

BARRIERS = ("wait", "deadline", "adaptive")
EVENT_KINDS = ("leave", "join")
WIRE_BITS = DENSE_BITS  # a dense payload's formats; a top-k payload's values also take 2 and 1
NETWORK_MODELS = ("auto", "alpha-beta", "flow")
RING_ORDERS = ("ranked", "optimised")
COLLECTIVE_SHAPES = ("ring", "hierarchical", "tree")
DEPARTURE_POLICIES = ("restart", "partial")
EXCHANGE_CALLS = ("flat", "buckets", "per_tensor")
EGRESS_QUEUES = ("fair", "fifo")  # scenarios/fifo.py prices the second
CONGESTION_CONTROLS = ("cubic", "bbr")
# how a ring all-reduce's first pass moves: each member straight to each other (islands train's quantised
# exchange) or to its right neighbour only (NCCL's and gloo's own ring); scenarios/fifo.py prices the first
REDUCE_SCATTERS = ("all_to_all", "ring")


# Bounds beyond which a value is physically absurd or would defeat float64 time; docs/limits.md
# gives the reason for each. Sizes of a run (outer steps, workers x syncs) are bounded by the
# simulator's resource guard (``simulator/budget.py``) instead.
MIN_PARAMETERS, MAX_PARAMETERS = 1.0, 1e14
MIN_BYTES_PER_PARAM, MAX_BYTES_PER_PARAM = 0.125, 8.0
MIN_TOKENS_PER_STEP, MAX_TOKENS_PER_STEP = 1.0, 1e10
MAX_INNER_STEPS = 10_000_000
MAX_LAYERS = 100_000
MAX_FRAGMENTS = 10_000
MAX_CHUNK_VALUES = 2**31  # a place in a chunk fits the 31 bits of a non-negative int32 index
MAX_DEADLINE_SLACK = 100.0
MIN_TCP_WINDOW_BYTES, MAX_TCP_WINDOW_BYTES = 1024.0, 2.0**30
MAX_STREAMS = 1024
MAX_HANDSHAKE_ROUND_TRIPS = 10  # a store's connection set-up: TCP 1, TLS 1.2 on top 3
MAX_STORE_REQUEST_MS = 60_000.0  # a store's answer to one request: an S3 client gives up at 60 s
MAX_LOSS_RATE = (
    0.1  # beyond 10% loss TCP mostly waits out timeouts, which Mathis's formula does not model
)
MAX_DETECTION_TIMEOUT_S = 86400.0
MAX_EXCHANGE_CPU_S_PER_VALUE = 1e-6
MAX_EXCHANGE_END_SPREAD_S = 60.0
MAX_FIFO_QUEUE_MS = 10_000.0
MAX_FIFO_K = 10.0
MIN_BUCKET_CAP_MB, MAX_BUCKET_CAP_MB = (
    1.0 / 1024,
    1e6,
)  # 1 KiB to a terabyte: beyond, one bucket holds any model
MAX_TENSORS = 10_000_000
MAX_TENSOR_LIST = 100_000  # tensor_values listed in a scenario: a 1000-layer model's tensors
MAX_CALL_OVERHEAD_S = 60.0
MAX_FIRST_CALL_S = 3600.0
MAX_OUTER_STEP_S = 3600.0
MAX_SLOWDOWN_WHILE_EXCHANGING = 10.0  # compute at 1/11 of its speed: an exchange that starves it
MAX_COST_PER_HOUR = 1e6  # per worker: a rack of accelerators is thousands an hour, not millions
MAX_REPLICAS = 100_000  # also the bound on the scenario's workers together
MIN_STEP_TIME_S, MAX_STEP_TIME_S = 1e-6, 86400.0
MAX_GPUS = 1_000_000
MIN_MEMORY_GB, MAX_MEMORY_GB = (
    1e-3,
    1e5,
)  # 1 MB to 100 TB: an accelerator holds neither less nor more
OFFLOADS = ("none", "optimizer")
MAX_HOST_MEMORY_GB = 1e9  # a worker of MAX_GPUS accelerators, 125,000 hosts of 8 TB each
MIN_HOST_LINK_GB_PER_S, MAX_HOST_LINK_GB_PER_S = 1e-3, 1e4  # 1 MB/s to 10 TB/s, above HBM's own
MIN_HOST_PARAMS_PER_S, MAX_HOST_PARAMS_PER_S = 1e3, 1e16  # an interpreted loop; 1e6 hosts at 1e10
MAX_CHIPS = 100_000_000  # a learner of a 2.4M-chip fleet split in two holds 1.2M
MAX_JITTER_CV = 10.0
MIN_GBPS, MAX_GBPS = 1e-6, 1e6
MAX_LATENCY_MS = 60_000.0
MAX_BURST_BYTES = 1e9
MIN_CHURN_S = 1.0
MAX_GRACE_WINDOW_S = 86400.0
MAX_EVENT_S = 1e12


def positive(value: float) -> str | None:
    return None if value > 0 else "must be > 0"


def non_negative(value: float) -> str | None:
    return None if value >= 0 else "must be >= 0"


def non_empty(value: str) -> str | None:
    """A name that tables, events and ``--set island.NAME.key`` can show and reach: not blank."""
    return None if value.strip() else "must not be empty"


def at_least_one(value: int) -> str | None:
    return None if value >= 1 else "must be >= 1"


def fraction_below_one(value: float) -> str | None:
    return None if 0 <= value < 1 else "must be in [0, 1)"


def fraction_up_to_one(value: float) -> str | None:
    return None if 0 < value <= 1 else "must be in (0, 1]"


MIN_RING_EFFICIENCY = 0.001  # below, a ring that stalls, not a measured share (1e-320 gave NaN)

LIMITS_NOTE = " (see docs/limits.md)"
NATURAL_LOWER_BOUNDS = (0, 1)  # "must be >= 0" and "must be >= 1" need no reference


def between(low: float, high: float, unit: str = "") -> Callable[[float], str | None]:
    """A bound from docs/limits.md: ``low <= value <= high``; the message names the bound broken."""

    def check(value: float) -> str | None:
        if value < low:
            return f"must be >= {low:g}{unit}" + (
                "" if low in NATURAL_LOWER_BOUNDS else LIMITS_NOTE
            )
        if value > high:
            return f"must be <= {high:g}{unit}{LIMITS_NOTE}"
        return None

    return check


def at_least(low: float, unit: str = "") -> Callable[[float], str | None]:
    """A lower bound from docs/limits.md."""

    def check(value: float) -> str | None:
        return None if value >= low else f"must be >= {low:g}{unit}{LIMITS_NOTE}"

    return check


def positive_up_to(high: float, unit: str = "") -> Callable[[float], str | None]:
    """``0 < value <= high`` (the upper bound is in docs/limits.md)."""
    upper = between(0, high, unit)

    def check(value: float) -> str | None:
        return "must be > 0" if value <= 0 else upper(value)

    return check


def zero_or_between(low: float, high: float, unit: str = "") -> Callable[[float], str | None]:
    """0 (the feature is off) or a value in [low, high]."""

    def check(value: float) -> str | None:
        if value == 0 or low <= value <= high:
            return None
        return f"must be 0 or in [{low:g}, {high:g}]{unit}{LIMITS_NOTE}"

    return check


def tensor_list(values: tuple[float, ...]) -> str | None:
    """A list of tensor sizes: not empty, not longer than ``MAX_TENSOR_LIST``, each in [1,
    MAX_PARAMETERS] values."""
    if not values:
        return "must list at least one tensor"
    if len(values) > MAX_TENSOR_LIST:
        return f"must list at most {MAX_TENSOR_LIST} tensors{LIMITS_NOTE}"
    for index, value in enumerate(values):
        problem = between(1, MAX_PARAMETERS)(value)
        if problem:
            return f"tensor {index}: {problem}"
    return None


def grace_window(value: Any) -> str | None:
    """``"adaptive"`` or a number of seconds in [0, MAX_GRACE_WINDOW_S]."""
    if isinstance(value, str):
        return None if value == ADAPTIVE else f'must be "{ADAPTIVE}" or seconds'
    return between(0, MAX_GRACE_WINDOW_S, " s")(value)


def registered_schedule(value: str) -> str | None:
    """A name in the schedule registry (read at check time, so a schedule registered later counts)."""
    return None if value in SCHEDULES else one_of(*SCHEDULES)(value)


def one_of(*choices: Any) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        if value in choices:
            return None
        return "must be one of " + ", ".join(repr(c) for c in choices)

    return check


@dataclass(frozen=True)
class Key:
    """One key of a section: its type ('int', 'float', 'str', 'bool'), default, rule and meaning."""

    kind: str
    default: Any = REQUIRED
    check: Callable[[Any], str | None] | None = None
    doc: str = ""


TOP_KEYS = {
    "name": Key("str", doc="scenario name, used in tables and file names"),
    "description": Key(
        "str", "", doc="free text: what the scenario stands for and where its numbers come from"
    ),
    "seed": Key(
        "int", 0, non_negative, doc="seed for everything random in a run (same seed, same output)"
    ),
}

MODEL_KEYS = {
    "parameters": Key(
        "float", check=between(MIN_PARAMETERS, MAX_PARAMETERS), doc="parameter count"
    ),
    "layers": Key(
        "int",
        None,
        between(1, MAX_LAYERS),
        "blocks of the model: fragments are strided layer groups of it (default: P equal parts)",
    ),
    "embedding_parameters": Key(
        "float",
        0.0,
        between(0, MAX_PARAMETERS),
        "parameters outside the blocks (embeddings), in the first layer's fragment",
    ),
    "bytes_per_param": Key(
        "float",
        2,
        between(MIN_BYTES_PER_PARAM, MAX_BYTES_PER_PARAM),
        "bytes per value of a gradient / pseudo-gradient before compression",
    ),
    "tokens_per_step": Key(
        "float",
        None,
        between(MIN_TOKENS_PER_STEP, MAX_TOKENS_PER_STEP),
        "tokens one worker processes per inner step (for derived step times and token counts)",
    ),
}

SCHEDULE_KEYS = {
    "algorithm": Key(
        "str", check=registered_schedule, doc=" | ".join(f'"{name}"' for name in SCHEDULES)
    ),
    "inner_steps": Key(
        "int", 1, between(1, MAX_INNER_STEPS), "H, inner steps between syncs (ddp ignores it)"
    ),
    "outer_steps": Key("int", check=at_least_one, doc="syncs to simulate (ddp: steps)"),
    "fragments": Key(
        "int", 1, between(1, MAX_FRAGMENTS), "streaming: P, fragments synced at staggered offsets"
    ),
    "overlap_steps": Key(
        "int",
        0,
        between(0, MAX_INNER_STEPS),
        "streaming: tau, inner steps a fragment's all-reduce may overlap",
    ),
    "bits": Key(
        "int",
        None,
        one_of(*VALUE_BITS),
        "bits per exchanged value on the wire; default bytes_per_param * 8. Dense: 32 (fp32), 16 "
        '(bf16), 8, 4 (int8, int4 with a scale per 128 values); compression = "topk": 32, 16, or 8, '
        "4, 2, 1 (a bin of 2^bits, decoded by the side table of bin means)",
    ),
    "compression": Key(
        "str",
        "none",
        one_of(*COMPRESSIONS),
        '"none" (every value, dense) or "topk" (of every chunk_values values the topk of largest '
        "magnitude, with their places: SparseLoCo, DeMo); diloco and streaming; gathered, not summed",
    ),
    "chunk_values": Key(
        "int",
        DEFAULT_CHUNK_VALUES,
        between(1, MAX_CHUNK_VALUES),
        'compression = "topk": values per chunk (SparseLoCo: 4096, 64 x 64); each kept value\'s '
        "place costs ceil(log2 chunk_values) bits, or the chunk a bitmap where that is smaller",
    ),
    "topk": Key(
        "int",
        DEFAULT_TOPK,
        between(1, MAX_CHUNK_VALUES),
        'compression = "topk": values kept per chunk, at most chunk_values (SparseLoCo: 64 of '
        "4096, 1.56%)",
    ),
    "error_feedback": Key(
        "float",
        0.0,
        fraction_below_one,
        'compression = "topk": beta, the decay of each worker\'s error-feedback buffer e <- beta e + '
        "delta, of which the top-k is sent and the rest kept (SparseLoCo: 0.95; 0: none, what is not "
        "sent is lost); it stands in for the outer momentum (trainer.outer_momentum defaults to 0)",
    ),
    "transform": Key(
        "str",
        "none",
        one_of(*TRANSFORMS),
        'compression = "topk": "none" (the top-k of the values) or "dct" (DeMo: the top-k of each '
        "chunk's orthonormal 2-D DCT-II coefficients, the chunk seen as a block as square as its size "
        "allows, 64 x 64 at 4096); the same bytes on the wire",
    ),
    "gather_peers": Key(
        "int",
        None,
        between(1, MAX_REPLICAS),
        'network.gather = "direct" or "store": K, the workers whose payloads each round averages, '
        "drawn from the seed per outer step, the same for every worker (default: every worker; "
        "Covenant-72B: about 20 of 20+ peers)",
    ),
    "backward_overlap": Key(
        "float",
        0.0,
        fraction_below_one,
        "fraction of a step's compute (its backward pass) that the exchange it produces may overlap: "
        "DDP's gradient, the DiLoCo family's pseudo-gradient after the last inner step",
    ),
    "barrier": Key(
        "str",
        "wait",
        one_of(*BARRIERS),
        'diloco outer step: "wait" for all, "deadline" (drop late deltas) or "adaptive" H',
    ),
    "deadline_slack": Key(
        "float",
        0.1,
        between(0, MAX_DEADLINE_SLACK),
        "deadline barrier: the sync starts at (1 + slack) x the median worker's interval",
    ),
    "quorum": Key(
        "int",
        1,
        between(1, MAX_REPLICAS),
        "decoupled: K, reports of a fragment the syncer waits for before it merges (the other "
        "schedules sync every worker: above 1 there, it is refused)",
    ),
    "grace_window": Key(
        "float|str",
        ADAPTIVE,
        grace_window,
        'decoupled: after the quorum, how long the syncer waits for more reports: "adaptive" '
        "(the slack before the first reporter needs the fragment back) or seconds",
    ),
    "elastic": Key(
        "bool",
        False,
        doc="on a chip failure (island.chip_mtbf_s): false stops every worker until "
        "the failed one recovers and restarts all from the last checkpoint; true: "
        "the survivors shrink and go on, the failed worker rejoins",
    ),
}

NETWORK_KEYS = {
    "model": Key(
        "str",
        "auto",
        one_of(*NETWORK_MODELS),
        '"alpha-beta" (closed form), "flow" (max-min fair sharing) or "auto"',
    ),
    "tcp_window_bytes": Key(
        "float",
        0.0,
        zero_or_between(MIN_TCP_WINDOW_BYTES, MAX_TCP_WINDOW_BYTES, " bytes"),
        "TCP window per stream; caps a transfer at streams * window / RTT (0: no cap)",
    ),
    "streams": Key(
        "int",
        1,
        between(1, MAX_STREAMS),
        'parallel TCP streams per transfer; under egress_queue = "fifo" also the flows each island '
        "sends through its FIFO at once (gloo: 1; NCCL: channels x NCCL_NSOCKS_PERTHREAD x "
        "NCCL_SOCKET_NTHREADS)",
    ),
    "loss_rate": Key(
        "float",
        0.0,
        between(0, MAX_LOSS_RATE),
        "fraction of packets the WAN path loses: caps each TCP stream at sqrt(3/2) x MSS / (RTT x "
        "sqrt(loss_rate)) (Mathis et al. 1997; 0: no loss)",
    ),
    "detection_timeout_s": Key(
        "float",
        30.0,
        between(0, MAX_DETECTION_TIMEOUT_S, " s"),
        "how long the others take to notice a departed worker and re-form the ring",
    ),
    "exchange_cpu_s_per_value": Key(
        "float",
        0.0,
        between(0, MAX_EXCHANGE_CPU_S_PER_VALUE, " s"),
        "CPU seconds per value of the exchanged tensor that each member spends "
        "before a collective's bytes move (screening: finite check, norm)",
    ),
    "exchange_end_spread_s": Key(
        "float",
        0.0,
        between(0, MAX_EXCHANGE_END_SPREAD_S, " s"),
        "seconds between the first and the last member finishing a collective, "
        "the members spread evenly over them (0: all finish together)",
    ),
    "rtt_csv": Key(
        "str",
        "",
        doc="a CSV of measured round trips (columns a, b, rtt_ms: two island names and "
        "milliseconds), read as [[latency]] entries; relative to the scenario's folder",
    ),
    "collective": Key(
        "str",
        "ring",
        one_of(*COLLECTIVE_SHAPES),
        '"ring" (one ring over every worker), "hierarchical" (each region reduces into its '
        'first worker, the leaders ring all-reduce, each leader broadcasts back) or "tree" '
        "(a binary tree's reduce and broadcast); the simulator's choice: islands train runs a ring",
    ),
    "on_departure": Key(
        "str",
        "restart",
        one_of(*DEPARTURE_POLICIES),
        '"restart" (a departure breaks a collective in flight: the survivors restart it from '
        'scratch once they notice) or "partial" (it goes on without the departed member, whose '
        "contribution is dropped; the others wait detection_timeout_s for its part); the "
        "simulator's choice: islands train restarts",
    ),
    "reduce_scatter": Key(
        "str",
        "all_to_all",
        one_of(*REDUCE_SCATTERS),
        'how the stack\'s all-reduce makes its first pass: "all_to_all" (in M - 1 steps each member '
        "sends to a different member, each over a connection it uses once per exchange: islands "
        'train\'s quantised exchange) or "ring" (each member sends every step to its right '
        "neighbour: NCCL's and gloo's ring all-reduce); under egress_queue = \"fifo\" with unequal "
        "links and three or more members each member is charged for the upload feeding its "
        "download where that is faster: in the first the fastest other member's, in the second "
        "its left neighbour's (scenarios/fifo.py)",
    ),
    "ring_efficiency": Key(
        "float",
        1.0,
        between(MIN_RING_EFFICIENCY, 1),
        "the fraction of its slowest link's rate a ring collective achieves (1: all of it), as "
        "measured at one rate (nccl-tests' bus bandwidth over iperf3's rate: 0.79 at 50 Mbit/s, "
        "0.90 at 200 in real runs through tc tbf); islands calibrate measures it; "
        'egress_queue = "fifo" prices such a loss at every rate instead, and refuses it',
    ),
    "egress_queue": Key(
        "str",
        "fair",
        one_of(*EGRESS_QUEUES),
        '"fair" (the islands\' links queue per flow, ACKs first: fq_codel, cake, htb; a ring gets its '
        'slowest link) or "fifo" (one FIFO queue per island\'s egress: tc tbf on a host, a cloud '
        "shaper; every worker of a ring sends and receives at once, so the ACKs of its downloads "
        "wait behind its uploads: the ring's rate falls at low rates and with many streams, and "
        "each connection's round trip grows by that wait; scenarios/fifo.py, docs/emulation.md)",
    ),
    "fifo_queue_ms": Key(
        "float",
        200.0,
        positive_up_to(MAX_FIFO_QUEUE_MS, " ms"),
        "egress_queue = \"fifo\": the FIFO's depth in milliseconds of its rate (tc tbf's latency; "
        "islands validate --shaper fifo's --queue-ms)",
    ),
    "tcp_congestion_control": Key(
        "str",
        "cubic",
        one_of(*CONGESTION_CONTROLS),
        'egress_queue = "fifo": the hosts\' TCP ("cubic", Linux\'s default, or "bbr"), which picks '
        "the FIFO's fitted fifo_k_s and fifo_k_so",
    ),
    "fifo_k_s": Key(
        "float",
        None,
        between(0, MAX_FIFO_K),
        'egress_queue = "fifo": the FIFO\'s cost per unit of sqrt(streams x 10 Mbit/s / rate) '
        "(default: the fit for tcp_congestion_control; islands calibrate --egress-queue fifo fits it "
        "from nccl-tests and iperf3 files)",
    ),
    "fifo_k_so": Key(
        "float",
        None,
        between(0, MAX_FIFO_K),
        'egress_queue = "fifo": its further cost where the streams\' standing packets overflow the '
        "FIFO (default: the fit for tcp_congestion_control)",
    ),
    "fifo_k_u": Key(
        "float",
        None,
        between(0, MAX_FIFO_K),
        'egress_queue = "fifo", unequal links, three or more in a ring collective: a member keeps '
        "1 / (1 + fifo_k_u x u) of its link, u = ln rho / ln 2 up to 1, rho the upload feeding it "
        "(around a ring its predecessor's, in an all-to-all the fastest other's) over its download "
        "(default: the emulation's fit over a long run, 0.175, CUBIC's)",
    ),
    "ring_order": Key(
        "str",
        "ranked",
        one_of(*RING_ORDERS),
        '"ranked" (workers in rank order: the islands by name, then replicas, whatever the order of '
        'the tables) or "optimised" (the members of a region together, the regions in the order '
        "whose slowest backbone is widest); the simulator's choice: islands train runs the ring in "
        "rank order",
    ),
    "gather": Key(
        "str",
        "ring",
        one_of(*GATHERS),
        'how top-k payloads travel: "ring" (every payload to every worker around the ring: M - 1 '
        'up and down), "direct" (the K peers of schedule.gather_peers each send theirs to the M - 1 '
        'others at once: M - 1 up for them, K - 1 or K down) or "store" (every worker PUTs its '
        "payload into the [store] once, then GETs the K: 1 up, K down)",
    ),
    "weights_from": Key(
        "str",
        "fastest",
        one_of(*WEIGHTS_SOURCES),
        'who sends a joining or returning worker the global state: "fastest" (the whole state from '
        "the holder that gives it the highest rate when the download starts: min(holder's uplink / "
        "(downloads it sends + 1), joiner's downlink), ties to the lower latency, then the lower "
        'rank; joiners that start together spread over the holders) or "striped" (an equal part '
        "from every holder at once; in once the last part is); a holder that leaves mid-way: what "
        "it was sending starts again from another (docs/explanation/model.md); islands train "
        'downloads from the fastest holder, "striped" is simulated only',
    ),
}

EXCHANGE_KEYS = {
    "calls": Key(
        "str",
        "flat",
        one_of(*EXCHANGE_CALLS),
        'how the stack splits one exchange into collective calls: "flat" (one call on one buffer, as '
        'islands train does), "buckets" (calls of bucket_cap_mb, as PyTorch DDP) or "per_tensor" (one '
        "call per parameter tensor, issued back to back); each call pays call_overhead_s and the "
        "ring's 2(M-1) hop latencies",
    ),
    "bucket_cap_mb": Key(
        "float",
        None,
        between(MIN_BUCKET_CAP_MB, MAX_BUCKET_CAP_MB, " MiB"),
        'calls = "buckets": MiB of unencoded values per call (PyTorch DDP\'s bucket_cap_mb; '
        "default 25)",
    ),
    "first_bucket_mb": Key(
        "float",
        None,
        between(MIN_BUCKET_CAP_MB, MAX_BUCKET_CAP_MB, " MiB"),
        'calls = "buckets": MiB of unencoded values in the first bucket the backward pass fills (its '
        "last layers); default 1 MiB where bucket_cap_mb is left out, else bucket_cap_mb, as PyTorch "
        "DDP does (torch.distributed._DEFAULT_FIRST_BUCKET_BYTES)",
    ),
    "tensor_values": Key(
        "values",
        None,
        tensor_list,
        'calls = "buckets" or "per_tensor": the values of each parameter tensor in registration order '
        "([p.numel() for p in model.parameters()]), adding up to model.parameters: buckets take them "
        "in reverse, each whole (a GPT's embedding, registered first, fills the last bucket), and "
        "per_tensor calls carry them; default: values a bucket may cut anywhere, tensors of equal size",
    ),
    "tensors": Key(
        "int",
        None,
        between(1, MAX_TENSORS),
        'calls = "per_tensor": the parameter tensors of the model (len(list(model.parameters()))), '
        "each fragment taking its share",
    ),
    "call_overhead_s": Key(
        "float",
        0.0,
        between(0, MAX_CALL_OVERHEAD_S, " s"),
        "fixed seconds each collective call costs beyond its ring's hop latencies (launch, "
        "synchronisation); islands calibrate measures it",
    ),
    "sync_overhead_s": Key(
        "float",
        0.0,
        between(0, MAX_CALL_OVERHEAD_S, " s"),
        "fixed seconds of each exchange besides its calls (a quorum or screening round, the "
        "hand-off to the exchange thread); islands validate measures the trainer's",
    ),
    "first_call_s": Key(
        "float",
        0.0,
        between(0, MAX_FIRST_CALL_S, " s"),
        "extra seconds of the run's first collective: the communicator set up at the first call "
        "(NCCL: 0.4-0.8 s)",
    ),
    "outer_step_s": Key(
        "float",
        0.0,
        between(0, MAX_OUTER_STEP_S, " s"),
        "the DiLoCo family's outer step (and merge) on the critical path after each sync, for the "
        "whole model; a fragment takes its share",
    ),
}

COMPUTE_KEYS = {
    "slowdown_while_exchanging": Key(
        "float",
        0.0,
        between(0, MAX_SLOWDOWN_WHILE_EXCHANGING),
        "s: while a worker's own exchange moves its bytes (a collective or gather it takes part in, "
        "a learner's round trip to the syncer), the compute it overlaps runs at 1 / (1 + s) of its "
        "speed (NCCL's kernels and copies, the proxy's CPU threads, PCIe and host memory: 0.03-0.04 "
        "on real GPU runs); a blocking sync overlaps nothing (0: no slowdown)",
    ),
}

ISLAND_KEYS = {
    "name": Key(
        "str",
        check=non_empty,
        doc="island name, unique among the islands and their replicas' "
        "names (an island `a` of 2 replicas names them `a-0`, `a-1`); workers are ranked by it "
        "(then replica), so the order of the tables changes no figure",
    ),
    "replicas": Key(
        "int",
        1,
        between(1, MAX_REPLICAS),
        "this island repeated N times, each a worker with its own link",
    ),
    "step_time_s": Key(
        "float",
        None,
        between(MIN_STEP_TIME_S, MAX_STEP_TIME_S, " s"),
        "one inner step's compute on this island, seconds",
    ),
    "gpus": Key(
        "int",
        1,
        between(1, MAX_GPUS),
        "accelerators per worker (with gpu and mfu, instead of step_time_s)",
    ),
    "gpu": Key("str", None, doc="accelerator name from the built-in table or [accelerators]"),
    "memory_gb": Key(
        "float",
        None,
        between(MIN_MEMORY_GB, MAX_MEMORY_GB, " GB"),
        "memory of one accelerator, GB of 1e9 bytes (default: the table's for gpu): a replica's "
        'weights, gradients and optimizer state (its weights alone with offload = "optimizer"), '
        "sharded over gpus, must fit in it",
    ),
    "offload": Key(
        "str",
        "none",
        one_of(*OFFLOADS),
        '"none" (every byte of training state on the accelerators) or "optimizer" (as ZeRO-Offload: '
        "the weights stay on the accelerators; the gradients, the fp32 master copy, the optimizer's "
        "moments, its step and the DiLoCo family's outer state go to host memory). A given "
        "step_time_s is measured and already holds the offload's time; a derived one adds it",
    ),
    "host_memory_gb": Key(
        "float",
        None,
        between(MIN_MEMORY_GB, MAX_HOST_MEMORY_GB, " GB"),
        'offload = "optimizer": the host memory of one worker (all its hosts together), GB of 1e9 '
        "bytes: the replica's offloaded state must fit in it (not given: not checked)",
    ),
    "host_link_gb_per_s": Key(
        "float",
        None,
        between(MIN_HOST_LINK_GB_PER_S, MAX_HOST_LINK_GB_PER_S, " GB/s"),
        'offload = "optimizer" with a derived step time: one accelerator\'s link to its host, GB/s '
        "each way (default: the table's for gpu, from its datasheet)",
    ),
    "host_optimizer_params_per_s": Key(
        "float",
        None,
        between(MIN_HOST_PARAMS_PER_S, MAX_HOST_PARAMS_PER_S),
        'offload = "optimizer" with a derived step time: parameters the worker\'s host CPUs step per '
        "second with the inner optimizer (required: time optimizer.step() on the host)",
    ),
    "mfu": Key("float", None, fraction_up_to_one, "model FLOPs utilisation of the inner step"),
    "jitter_cv": Key(
        "float",
        0.0,
        between(0, MAX_JITTER_CV),
        "coefficient of variation of one step's time (lognormal)",
    ),
    "bandwidth_gbps": Key(
        "float",
        None,
        between(MIN_GBPS, MAX_GBPS, " Gbit/s"),
        "WAN access link, each direction, 1 Gbps = 1e9 bit/s",
    ),
    "upload_gbps": Key(
        "float", None, between(MIN_GBPS, MAX_GBPS, " Gbit/s"), "uplink, overrides bandwidth_gbps"
    ),
    "download_gbps": Key(
        "float", None, between(MIN_GBPS, MAX_GBPS, " Gbit/s"), "downlink, overrides bandwidth_gbps"
    ),
    "latency_ms": Key(
        "float",
        0.0,
        between(0, MAX_LATENCY_MS, " ms"),
        "one-way latency to the WAN core, milliseconds",
    ),
    "burst_bytes": Key(
        "float",
        0.0,
        between(0, MAX_BURST_BYTES, " B"),
        "the access link's token bucket, each direction: bytes a transfer sends at once after the "
        "link idled (tc tbf's burst, a provider's burst allowance); refills at the spare rate",
    ),
    "upload_burst_bytes": Key(
        "float", None, between(0, MAX_BURST_BYTES, " B"), "uplink, overrides burst_bytes"
    ),
    "download_burst_bytes": Key(
        "float", None, between(0, MAX_BURST_BYTES, " B"), "downlink, overrides burst_bytes"
    ),
    "region": Key(
        "str",
        None,
        doc="the [[region]] whose core the access link joins (required once regions are declared)",
    ),
    "present": Key("bool", True, doc="present at the start (false: enters with a join event)"),
    "mtbf_s": Key(
        "float",
        None,
        at_least(MIN_CHURN_S, " s"),
        "random churn: mean time between departures (exponential)",
    ),
    "mttr_s": Key(
        "float",
        None,
        at_least(MIN_CHURN_S, " s"),
        "random churn: mean time until a departed worker returns",
    ),
    "chips": Key(
        "int",
        None,
        between(1, MAX_CHIPS),
        "accelerator chips per worker, where failures strike (default: gpus)",
    ),
    "chip_mtbf_s": Key(
        "float",
        None,
        at_least(MIN_CHURN_S, " s"),
        "mean time between interruptions of one chip: a worker of n chips fails at n / "
        "chip_mtbf_s per second it computes (exponential gaps)",
    ),
    "recovery_s": Key(
        "float",
        None,
        between(0, MAX_EVENT_S, " s"),
        "time until a failed worker computes again (required with chip_mtbf_s)",
    ),
    "cost_per_hour": Key(
        "float",
        0.0,
        between(0, MAX_COST_PER_HOUR),
        "what one worker of this island costs per hour of wall-clock time, its link included, "
        "in any currency (plan --objective cost)",
    ),
}

EVENT_KEYS = {
    "at_s": Key(
        "float", check=between(0, MAX_EVENT_S, " s"), doc="simulated time of the event, seconds"
    ),
    "island": Key("str", doc="an island name (all its replicas) or one replica's name, e.g. eu-1"),
    "kind": Key("str", check=one_of(*EVENT_KINDS), doc='"leave" or "join"'),
}

SYNCER_KEYS = {
    "bandwidth_gbps": Key(
        "float",
        None,
        between(MIN_GBPS, MAX_GBPS, " Gbit/s"),
        "decoupled: the syncer's access link, each direction (default: a non-blocking core)",
    ),
    "latency_ms": Key(
        "float", 0.0, between(0, MAX_LATENCY_MS, " ms"), "decoupled: the syncer's one-way latency"
    ),
    "region": Key(
        "str",
        None,
        doc="decoupled: the [[region]] the syncer sits in (required once regions are declared)",
    ),
}

STORE_KEYS = {
    "bandwidth_gbps": Key(
        "float",
        None,
        between(MIN_GBPS, MAX_GBPS, " Gbit/s"),
        'network.gather = "store": the object store\'s own link, each way, shared by every PUT '
        "(ingress) and every GET (egress) (default: none, a store that never binds)",
    ),
    "ingress_gbps": Key(
        "float",
        None,
        between(MIN_GBPS, MAX_GBPS, " Gbit/s"),
        "what the store takes in (every worker's PUT), overrides bandwidth_gbps",
    ),
    "egress_gbps": Key(
        "float",
        None,
        between(MIN_GBPS, MAX_GBPS, " Gbit/s"),
        "what the store sends out (every worker's GETs), overrides bandwidth_gbps",
    ),
    "latency_ms": Key(
        "float",
        0.0,
        between(0, MAX_LATENCY_MS, " ms"),
        "the store's one-way latency, added to a worker's own on the way there and back",
    ),
    "request_ms": Key(
        "float",
        0.0,
        between(0, MAX_STORE_REQUEST_MS, " ms"),
        "the store's own time to answer each request (its time to first byte less the round trip: "
        "tens of ms for an S3 PUT or GET), paid once per request, never per handshake round trip: "
        "a round's PUT, its LIST and its K GETs at once",
    ),
    "region": Key(
        "str",
        None,
        doc="the [[region]] the store sits in (required once regions are declared)",
    ),
    "handshake_round_trips": Key(
        "int",
        TCP_HANDSHAKE_ROUND_TRIPS,
        between(1, MAX_HANDSHAKE_ROUND_TRIPS),
        "round trips a new connection to the store takes before its first request: a worker's "
        "first round opens its PUT's and then its K GETs' (1: TCP, the trainer's plain HTTP; 2: "
        "HTTPS over TLS 1.3; 3: TLS 1.2, as S3 or R2 may be reached)",
    ),
}

REGION_KEYS = {
    "name": Key(
        "str",
        check=non_empty,
        doc="region name (unique): islands join its core with their access links",
    ),
}

BACKBONE_KEYS = {
    "between": Key("pair", doc='the two regions it joins, e.g. ["us", "eu"]'),
    "bandwidth_gbps": Key(
        "float",
        check=between(MIN_GBPS, MAX_GBPS, " Gbit/s"),
        doc="each way; every flow between the two regions shares it",
    ),
    "latency_ms": Key(
        "float", 0.0, between(0, MAX_LATENCY_MS, " ms"), "one-way, between the two cores"
    ),
}

LATENCY_KEYS = {
    "between": Key(
        "pair",
        doc='two islands, e.g. ["us-dc", "eu-dc"] (the same one twice: between its replicas)',
    ),
    "rtt_ms": Key(
        "float",
        check=between(0, 2 * MAX_LATENCY_MS, " ms"),
        doc="measured round trip between their workers; half of it is the one-way latency, in place "
        "of the access (and backbone) latencies",
    ),
}

ARRAYS = {  # arrays of tables: --set and --grid reach an entry by index, name or * (every entry)
    "island": ISLAND_KEYS,
    "region": REGION_KEYS,
    "backbone": BACKBONE_KEYS,
    "latency": LATENCY_KEYS,
}

SECTIONS = {
    "model": MODEL_KEYS,
    "schedule": SCHEDULE_KEYS,
    "network": NETWORK_KEYS,
    "exchange": EXCHANGE_KEYS,
    "compute": COMPUTE_KEYS,
    "syncer": SYNCER_KEYS,
    "store": STORE_KEYS,
}


MAX_INTEGER = 2**53  # every integer up to here is exact as a float; larger integer keys are refused
MAX_SHOWN_CHARACTERS = 40
LOG10_2 = math.log10(2)


def shown_value(value: Any) -> str:
    """``value`` as a message shows it: its repr, shortened; a huge integer by its digit count (one of
    5,000 digits cannot even be turned into text by default)."""
    if is_whole_number(value) and abs(value) >= 10**MAX_SHOWN_CHARACTERS:
        try:
            return f"an integer of {len(str(abs(value)))} digits"
        except ValueError:  # past Python's int-to-text limit (4,300 digits)
            return f"an integer of about {int(abs(value).bit_length() * LOG10_2) + 1} digits"
    if isinstance(value, list | tuple):  # its first items, each shown as above
        items = [shown_value(item) for item in value[:4]]
        text = "[" + ", ".join(items + (["..."] if len(value) > 4 else [])) + "]"
    else:
        text = repr(value)
    return text if len(text) <= MAX_SHOWN_CHARACTERS else text[: MAX_SHOWN_CHARACTERS - 3] + "..."
