"""The report's what-if axes the user marks: ``islands report --axis KEY=V1,V2,...``, any scenario key
as ``--set`` names it (``island.0.latency_ms=0,50,100``, ``model.parameters=1e9,1e10``,
``schedule.algorithm=diloco,streaming``), each one more slider of the what-if panel.

A marked axis opens at the scenario as written (its first stop, "as written", sets nothing), then
one stop per value, in the order given, each the override ``KEY=VALUE``. It replaces the built-in
axis that sets the same key (``--axis schedule.bits=4,8`` takes the bits slider's place; H's slider,
which sets ``schedule.outer_steps`` too, goes for either key). Each value is checked alone against
the scenario before any run, so a value the format refuses is one line naming it; a combination of
several axes the format refuses is a grid point that shows the rule, as the built-in axes' do.

    >>> axes = report_axes(source.scenario, [parse_axis("island.0.latency_ms=0,50")])  # doctest: +SKIP
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from islands.errors import UserError
from islands.scenarios import Scenario, ScenarioError, ScenarioSource

from .whatif import WhatIfAxis, whatif_axes

AS_WRITTEN = "as written"
MAX_VALUES = 20  # per axis: a slider of more stops is not read, it is scrolled
MAX_COMBINATIONS = 5000  # of the whole grid, every one validated before the budget picks the runs


@dataclass(frozen=True)
class MarkedAxis:
    """One ``--axis``: the key as ``--set`` names it and its values as typed."""

    key: str
    values: tuple[str, ...]

    @property
    def slider_key(self) -> str:
        """The slider's name in the page (``island.0.latency_ms`` -> ``axis-island-0-latency-ms``)."""
        return "axis-" + re.sub(r"[^a-z0-9]+", "-", self.key.lower()).strip("-")

    def axis(self) -> WhatIfAxis:
        return WhatIfAxis(
            self.slider_key,
            f"{self.key} (--axis)",
            (AS_WRITTEN, *self.values),
            ((), *((f"{self.key}={value}",) for value in self.values)),
            0,
        )


def parse_axis(text: str) -> MarkedAxis:
    """``KEY=V1,V2,...`` as a ``MarkedAxis``, or one line saying what is wrong with it."""
    key, equals, values = text.partition("=")
    key = key.strip()
    if not equals or not key:
        raise UserError(f"--axis {text}: write KEY=V1,V2,..., e.g. island.0.latency_ms=0,50,100")
    stops = tuple(value.strip() for value in values.split(","))
    if "" in stops:
        raise UserError(f"--axis {text}: a value is empty (values are separated by commas)")
    if len(set(stops)) < len(stops):
        raise UserError(f"--axis {text}: a value is given twice")
    if len(stops) > MAX_VALUES:
        raise UserError(f"--axis {text}: at most {MAX_VALUES} values (got {len(stops)})")
    return MarkedAxis(key, stops)


def touches(axis: WhatIfAxis, key: str) -> bool:
    """Whether a built-in axis sets ``key`` (``island.*.x`` and ``island.0.x`` the same key)."""

    def general(dotted: str) -> tuple[str, str]:
        parts = dotted.split(".")
        return parts[0], parts[-1]

    return any(
        general(override.split("=", 1)[0]) == general(key)
        for stop in axis.overrides
        for override in stop
    )


def report_axes(scenario: Scenario, marked: Sequence[MarkedAxis] = ()) -> list[WhatIfAxis]:
    """The built-in sliders but those a marked axis replaces, then the marked ones, in order."""
    keys = [axis.key for axis in marked]
    return [
        *(axis for axis in whatif_axes(scenario) if not any(touches(axis, k) for k in keys)),
        *(axis.axis() for axis in marked),
    ]


def check_marked(source: ScenarioSource, marked: Sequence[MarkedAxis]) -> None:
    """Before any run: no key marked twice, each value a valid scenario alone, and a grid the page can
    hold."""
    keys = [axis.key for axis in marked]
    twice = sorted({key for key in keys if keys.count(key) > 1})
    if twice:
        raise UserError(f"--axis {twice[0]}: marked twice; give every value in one --axis")
    for axis in marked:
        for value in axis.values:
            try:
                source.variant(f"{axis.key}={value}")
            except ScenarioError as error:
                raise UserError(
                    f"--axis {axis.key}={','.join(axis.values)}: {value}: {error.key}: {error.rule}"
                ) from None
    combinations = math.prod(len(axis.values) for axis in report_axes(source.scenario, marked))
    if combinations > MAX_COMBINATIONS:
        raise UserError(
            f"--axis: the what-if grid would have {combinations:,} combinations, more than the "
            f"{MAX_COMBINATIONS:,} a report holds: give fewer values"
        )
