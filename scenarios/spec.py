"""The scenario format as plain data: every section's keys, their types, defaults and rules.

A key is described once here; the loader checks a parsed TOML document against these tables and the
README's key reference is written from them. Adding a key to the format is adding one ``Key`` line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

REQUIRED = object()

ALGORITHMS = ("ddp", "diloco", "streaming")
BARRIERS = ("wait", "deadline", "adaptive")
EVENT_KINDS = ("leave", "join")
WIRE_BITS = (32, 16, 8, 4)
NETWORK_MODELS = ("auto", "alpha-beta", "flow")


def positive(value: float) -> str | None:
    return None if value > 0 else "must be > 0"


def non_negative(value: float) -> str | None:
    return None if value >= 0 else "must be >= 0"


def at_least_one(value: int) -> str | None:
    return None if value >= 1 else "must be >= 1"


def fraction_below_one(value: float) -> str | None:
    return None if 0 <= value < 1 else "must be in [0, 1)"


def fraction_up_to_one(value: float) -> str | None:
    return None if 0 < value <= 1 else "must be in (0, 1]"


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
    "description": Key("str", "", doc="free text: what the scenario stands for and where its numbers come from"),
    "seed": Key("int", 0, doc="seed for everything random in a run (same seed, same output)"),
}

MODEL_KEYS = {
    "parameters": Key("float", check=positive, doc="parameter count"),
    "bytes_per_param": Key("float", 2, positive, "bytes per value of a gradient / pseudo-gradient before compression"),
    "tokens_per_step": Key("float", None, positive,
                           "tokens one worker processes per inner step (for derived step times and token counts)"),
}

SCHEDULE_KEYS = {
    "algorithm": Key("str", check=one_of(*ALGORITHMS), doc='"ddp" | "diloco" | "streaming"'),
    "inner_steps": Key("int", 1, at_least_one, "H, inner steps between syncs (ddp ignores it)"),
    "outer_steps": Key("int", check=at_least_one, doc="syncs to simulate (ddp: steps)"),
    "fragments": Key("int", 1, at_least_one, "streaming: P, fragments synced at staggered offsets"),
    "overlap_steps": Key("int", 0, non_negative, "streaming: tau, inner steps a fragment's all-reduce may overlap"),
    "bits": Key("int", None, one_of(*WIRE_BITS), "bits per exchanged value on the wire; default bytes_per_param * 8"),
    "backward_overlap": Key("float", 0.0, fraction_below_one,
                            "ddp: fraction of a step's compute that the gradient all-reduce may overlap"),
    "barrier": Key("str", "wait", one_of(*BARRIERS),
                   'diloco outer step: "wait" for all, "deadline" (drop late deltas) or "adaptive" H'),
    "deadline_slack": Key("float", 0.1, non_negative,
                          "deadline barrier: the sync starts at (1 + slack) x the median worker's interval"),
}

NETWORK_KEYS = {
    "model": Key("str", "auto", one_of(*NETWORK_MODELS),
                 '"alpha-beta" (closed form), "flow" (max-min fair sharing) or "auto"'),
    "tcp_window_bytes": Key("float", 0.0, non_negative,
                            "TCP window per stream; caps a transfer at streams * window / RTT (0: no cap)"),
    "streams": Key("int", 1, at_least_one, "parallel TCP streams per transfer"),
    "detection_timeout_s": Key("float", 30.0, non_negative,
                               "how long the others take to notice a departed worker and re-form the ring"),
}

ISLAND_KEYS = {
    "name": Key("str", doc="island name (unique)"),
    "replicas": Key("int", 1, at_least_one, "this island repeated N times, each a worker with its own link"),
    "step_time_s": Key("float", None, positive, "one inner step's compute on this island, seconds"),
    "gpus": Key("int", 1, at_least_one, "accelerators per worker (with gpu and mfu, instead of step_time_s)"),
    "gpu": Key("str", None, doc="accelerator name from the built-in table or [accelerators]"),
    "mfu": Key("float", None, fraction_up_to_one, "model FLOPs utilisation of the inner step"),
    "jitter_cv": Key("float", 0.0, non_negative, "coefficient of variation of one step's time (lognormal)"),
    "bandwidth_gbps": Key("float", None, positive, "WAN access link, each direction, 1 Gbps = 1e9 bit/s"),
    "upload_gbps": Key("float", None, positive, "uplink, overrides bandwidth_gbps"),
    "download_gbps": Key("float", None, positive, "downlink, overrides bandwidth_gbps"),
    "latency_ms": Key("float", 0.0, non_negative, "one-way latency to the WAN core, milliseconds"),
    "present": Key("bool", True, doc="present at the start (false: enters with a join event)"),
    "mtbf_s": Key("float", None, positive, "random churn: mean time between departures (exponential)"),
    "mttr_s": Key("float", None, positive, "random churn: mean time until a departed worker returns"),
}

EVENT_KEYS = {
    "at_s": Key("float", check=non_negative, doc="simulated time of the event, seconds"),
    "island": Key("str", doc="an island name (all its replicas) or one replica's name, e.g. eu-1"),
    "kind": Key("str", check=one_of(*EVENT_KINDS), doc='"leave" or "join"'),
}

SECTIONS = {
    "model": MODEL_KEYS,
    "schedule": SCHEDULE_KEYS,
    "network": NETWORK_KEYS,
}


def is_finite_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
