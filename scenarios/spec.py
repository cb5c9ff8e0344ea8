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
}

NETWORK_KEYS = {
    "model": Key("str", "auto", one_of(*NETWORK_MODELS),
                 '"alpha-beta" (closed form), "flow" (max-min fair sharing) or "auto"'),
}

ISLAND_KEYS = {
    "name": Key("str", doc="island name (unique)"),
    "replicas": Key("int", 1, at_least_one, "this island repeated N times, each a worker with its own link"),
    "step_time_s": Key("float", check=positive, doc="one inner step's compute on this island, seconds"),
    "bandwidth_gbps": Key("float", check=positive, doc="WAN access link, each direction, 1 Gbps = 1e9 bit/s"),
    "latency_ms": Key("float", 0.0, non_negative, "one-way latency to the WAN core, milliseconds"),
}

SECTIONS = {
    "model": MODEL_KEYS,
    "schedule": SCHEDULE_KEYS,
    "network": NETWORK_KEYS,
}


def is_finite_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
