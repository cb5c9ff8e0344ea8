"""The scenario's keys as the live page's controls, read from the format's own tables
(``scenarios/spec.py``): a slider with a typed box for a number, a menu for a choice, a box for a
flag or a name, and one editable row per ``[[island]]`` (and per backbone, region and latency entry).

A control edits one key by a ``--set`` override (``island.0.replicas=4``), so the page's scenario is
always the file plus the overrides it lists: the same door ``islands simulate --set`` goes through.
A slider spans a tenth to ten times the value in force, in log steps (a typed value re-centres it),
or for the keys listed in ``LINEAR_SPANS`` (whose value is often 0) a fixed linear span; a key whose
value is 0 or unset and has no span gets the typed box alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from islands.numbers import is_number
from islands.scenarios import Scenario, ScenarioSource
from islands.scenarios.accelerators import MEMORY_GB
from islands.scenarios.spec import (
    ARRAYS,
    BARRIERS,
    COLLECTIVE_SHAPES,
    CONGESTION_CONTROLS,
    DEPARTURE_POLICIES,
    EGRESS_QUEUES,
    EXCHANGE_CALLS,
    NETWORK_MODELS,
    OFFLOADS,
    REDUCE_SCATTERS,
    REQUIRED,
    RING_ORDERS,
    SECTIONS,
    Key,
)
from islands.schedules import SCHEDULES
from islands.schedules.compression import COMPRESSIONS, TRANSFORMS, VALUE_BITS
from islands.schedules.gather import GATHERS
from islands.schedules.serving import WEIGHTS_SOURCES

# Keys whose rule accepts a few values only: a menu each (tests/test_serve_api.py checks that every
# key whose rule says "must be one of" is here).
CHOICES: dict[str, tuple[Any, ...]] = {
    "schedule.algorithm": tuple(SCHEDULES),
    "schedule.bits": VALUE_BITS,  # 2 and 1 with compression = "topk" (the loader says so otherwise)
    "schedule.barrier": BARRIERS,
    "schedule.compression": COMPRESSIONS,
    "schedule.transform": TRANSFORMS,  # "dct" with compression = "topk" (the loader says so otherwise)
    "network.model": NETWORK_MODELS,
    "network.collective": COLLECTIVE_SHAPES,
    "network.on_departure": DEPARTURE_POLICIES,
    "network.ring_order": RING_ORDERS,
    "network.weights_from": WEIGHTS_SOURCES,
    "network.gather": GATHERS,
    "network.egress_queue": EGRESS_QUEUES,
    "network.tcp_congestion_control": CONGESTION_CONTROLS,
    "network.reduce_scatter": REDUCE_SCATTERS,
    "exchange.calls": EXCHANGE_CALLS,
    "island.offload": OFFLOADS,
}
# Text keys with known values to suggest (any other is still accepted)
SUGGESTIONS: dict[str, tuple[str, ...]] = {"island.gpu": tuple(MEMORY_GB)}
# Keys often 0 (off): a linear slider over a fixed span instead of a tenth to ten times the value
LINEAR_SPANS: dict[str, tuple[float, float]] = {
    "latency_ms": (0.0, 300.0),
    "request_ms": (0.0, 300.0),  # the store's time to answer: tens of ms (S3), a LIST more
    "jitter_cv": (0.0, 1.0),
    "backward_overlap": (0.0, 0.95),
    "loss_rate": (0.0, 0.01),
    "deadline_slack": (0.0, 1.0),
    "ring_efficiency": (0.5, 1.0),
    "mfu": (0.05, 1.0),
    "slowdown_while_exchanging": (0.0, 0.2),
}
LOG_SPAN = 10.0  # a log slider spans value / LOG_SPAN to value x LOG_SPAN
# The keys shown first; every other key of the format is under "more keys"
MAIN_KEYS = {
    "model": ("parameters", "bytes_per_param"),
    "schedule": ("algorithm", "inner_steps", "outer_steps", "fragments", "overlap_steps", "bits"),
    "network": ("collective", "model"),
}
MAIN_ROW_KEYS = {
    "island": (
        "name",
        "replicas",
        "step_time_s",
        "bandwidth_gbps",
        "upload_gbps",
        "download_gbps",
        "latency_ms",
        "jitter_cv",
    ),
    "backbone": ("bandwidth_gbps", "latency_ms"),
    "latency": ("rtt_ms",),
    "region": ("name",),
}
SECTION_TITLES = {
    "model": "Model",
    "schedule": "Schedule",
    "network": "Network",
    "exchange": "Exchange calls",
    "compute": "Compute",
    "syncer": "Syncer (decoupled)",
    "store": "Object store (gathered payloads)",
}
EDITABLE_KINDS = ("int", "float", "str", "bool", "float|str")  # a "pair" (backbone ends) is not


@dataclass(frozen=True)
class Slider:
    low: float
    high: float
    log: bool


@dataclass(frozen=True)
class Control:
    """One key's control: ``key`` as ``--set`` names it, ``value`` as the file gives it (None: not
    given), ``in_force`` the value the scenario runs with (the default or a derived one)."""

    key: str
    name: str
    kind: str
    doc: str
    value: Any
    in_force: Any
    main: bool
    choices: tuple[Any, ...] = ()
    suggestions: tuple[str, ...] = ()
    slider: Slider | None = None


@dataclass(frozen=True)
class Row:
    """One entry of an array of tables (an island): its index, title and controls."""

    index: int
    title: str
    controls: tuple[Control, ...]


@dataclass(frozen=True)
class Panel:
    """Every control of a scenario, for the page: its sections and its arrays' rows."""

    name: str
    description: str
    sections: dict[str, tuple[Control, ...]]
    arrays: dict[str, tuple[Row, ...]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "sections": [
                {
                    "id": name,
                    "title": SECTION_TITLES[name],
                    "controls": [asdict(c) for c in controls],
                }
                for name, controls in self.sections.items()
            ],
            "arrays": [
                {
                    "id": name,
                    "main": list(MAIN_ROW_KEYS.get(name, ())),
                    "rows": [asdict(row) for row in rows],
                }
                for name, rows in self.arrays.items()
            ],
        }


def slider_for(name: str, kind: str, in_force: Any) -> Slider | None:
    """A number's slider: a fixed linear span for the keys often 0, else log around the value."""
    if kind not in ("int", "float") or isinstance(in_force, bool):
        return None
    if name in LINEAR_SPANS:
        low, high = LINEAR_SPANS[name]
        return Slider(low, max(high, in_force or 0.0), log=False)
    if not is_number(in_force) or in_force <= 0:
        return None
    low, high = in_force / LOG_SPAN, in_force * LOG_SPAN
    return Slider(max(1, round(low)) if kind == "int" else low, high, log=True)


def control(
    key: str, name: str, spec: Key, table: Mapping[str, Any], in_force: Any, main: bool
) -> Control:
    """The control of one key of a table of the document; ``in_force``: the scenario's value."""
    general = key.split(".", 1)[0] + "." + name  # island.0.offload -> island.offload
    shown = (
        in_force if in_force is not None else (None if spec.default is REQUIRED else spec.default)
    )
    return Control(
        key=key,
        name=name,
        kind=spec.kind,
        doc=spec.doc,
        value=table.get(name),
        in_force=shown,
        main=main,
        choices=CHOICES.get(general, ()),
        suggestions=SUGGESTIONS.get(general, ()),
        slider=None if general in CHOICES else slider_for(name, spec.kind, shown),
    )


def section_controls(
    document: Mapping[str, Any], scenario: Scenario, section: str
) -> tuple[Control, ...]:
    resolved = getattr(scenario, section, None)  # the section's keys as resolved
    return table_controls(
        section, SECTIONS[section], document.get(section, {}), resolved, MAIN_KEYS.get(section, ())
    )


def table_controls(
    prefix: str,
    specs: Mapping[str, Key],
    table: Mapping[str, Any],
    resolved: Any,
    main: tuple[str, ...],
) -> tuple[Control, ...]:
    """The editable keys of one table (``prefix``: its dotted path), each with the value in force:
    ``resolved``'s where the scenario resolved the table, else the file's."""
    return tuple(
        control(
            f"{prefix}.{name}",
            name,
            spec,
            table,
            getattr(resolved, name, table.get(name)),
            name in main,
        )
        for name, spec in specs.items()
        if spec.kind in EDITABLE_KINDS
    )


def array_rows(document: Mapping[str, Any], scenario: Scenario, array: str) -> tuple[Row, ...]:
    """One row per entry of ``[[array]]``; an island's values in force are the scenario's island of
    that name (the scenario ranks its islands by name, the rows keep the file's order)."""
    islands = {island.name: island for island in scenario.islands}
    rows = []
    for index, entry in enumerate(document.get(array, [])):
        resolved = islands.get(entry.get("name")) if array == "island" else None
        main = MAIN_ROW_KEYS.get(array, ())
        controls = table_controls(f"{array}.{index}", ARRAYS[array], entry, resolved, main)
        title = str(entry.get("name") or " - ".join(map(str, entry.get("between", ()))) or index)
        rows.append(Row(index, title, controls))
    return tuple(rows)


def panel(source: ScenarioSource) -> Panel:
    """The controls of a scenario as read (its own ``--set`` overrides applied)."""
    scenario = source.scenario
    document = source.document
    return Panel(
        scenario.name,
        scenario.description,
        {section: section_controls(document, scenario, section) for section in SECTIONS},
        {array: array_rows(document, scenario, array) for array in ARRAYS if document.get(array)},
    )
