"""The report's what-if grid: the scenario simulated at every combination of a few values of H, the
fragments P, the wire bits, the top-k density (a compressed scenario's), a bandwidth scale and the
workers M, for a page whose sliders look the answers up (``whatif_page``). Every combination the page
offers is one simulator run, or the reason the scenario format refuses it.

    >>> from islands.analysis.report.whatif import whatif_axes, run_whatif
    >>> grid = run_whatif(source, whatif_axes(source.scenario))   # doctest: +SKIP

The H slider keeps the work equal: each stop H runs the scenario's own inner steps per worker, in
(total inner steps / H) outer steps, its stops the divisors of those steps nearest half, once and
twice the scenario's H (a stop that would be the scenario's own, or above the whole run, is dropped).
The density slider (``schedule.compression = "topk"`` only) keeps a quarter to four times the
scenario's values of each chunk (``schedule.topk``, at least one, at most the chunk), shown as the
fraction of the chunk kept; the bits slider of a top-k scenario also offers 2 and 1 bits a value.
The bandwidth scale multiplies every island's access link, each direction (``upload_gbps`` and
``download_gbps``), so asymmetric and mixed fleets keep their shape; M multiplies every island's
replicas (at least one each). An axis a schedule ignores (P outside the fragmented schedules, H under
DDP) keeps the scenario's one value and gets no slider.

The grid's cost is estimated before anything runs, from the simulator's own estimate of each run's
events (``simulator.budget``). Above ``WHATIF_MAX_EVENTS`` together, the axis with the most stops
loses the stop farthest from the scenario's own value, again until the grid fits (an axis left with
one stop loses its slider): the page still answers every combination it offers from a run of its own.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, replace
from typing import Any

from islands.numbers import is_finite_number
from islands.scenarios import Scenario, ScenarioError, ScenarioSource
from islands.scenarios.spec import WIRE_BITS
from islands.schedules import GRADIENT, SCHEDULES, schedule_of
from islands.schedules.compression import VALUE_BITS, TopK
from islands.simulator import guard, simulate

from ..link_rates import rate_steps
from ..parallel import Progress, default_jobs, run_tasks
from ..sweep.runner import chunked

H_FACTORS = (0.5, 1, 2)
BANDWIDTH_SCALES = (0.1, 0.3, 1, 3, 10)
WORKER_SCALES = (0.5, 1, 2)
DENSITY_SCALES = (0.25, 0.5, 1, 2, 4)
MIN_WORKERS = 2
FIGURES = (
    "compute_utilisation",
    "stall_s",
    "bytes_per_worker",
    "wall_time_s",
    "avg_bandwidth_gbps",
)
PLOT_INTERVALS = 3  # the bandwidth plot spans the first few outer intervals of a run
SIGNIFICANT_DIGITS = 5  # of the plot's times and rates (the figures above are kept exact)
# The grid's simulator events together, estimated before it runs: at the 6-75 microseconds of one
# core an estimated event took here (home-lab; decoupled-fleet), half a minute to six minutes. The
# full grid of every bundled scenario but the two with churn (chaos, decoupled-fleet) fits.
WHATIF_MAX_EVENTS = 5e6


@dataclass(frozen=True)
class WhatIfAxis:
    """One slider: its key (a summary-style name), label, the value shown at each stop and the
    overrides that set it; ``start`` is the stop of the scenario as written."""

    key: str
    label: str
    values: tuple[Any, ...]  # numbers; a marked axis's values as typed (``marked_axes``)
    overrides: tuple[tuple[str, ...], ...]
    start: int

    def subset(self, stops: Sequence[int]) -> WhatIfAxis:
        """The axis at these of its stops only (``start`` among them)."""
        return WhatIfAxis(
            self.key,
            self.label,
            tuple(self.values[i] for i in stops),
            tuple(self.overrides[i] for i in stops),
            list(stops).index(self.start),
        )


@dataclass(frozen=True)
class WhatIfGrid:
    """Every combination of the axes (the first axis varying slowest), each one run's figures and
    the first intervals of worker 0's uplink, or ``error``: why the combination is not a scenario.
    ``fixed``: the axes the budget left at the scenario's value; ``full_runs``: the combinations
    before it; ``events``: the estimated simulator events of the runs made, within ``max_events``."""

    axes: tuple[WhatIfAxis, ...]
    points: tuple[dict[str, Any], ...]
    fixed: tuple[WhatIfAxis, ...] = ()
    full_runs: int = 0
    events: float = 0.0
    max_events: float = WHATIF_MAX_EVENTS

    def point(self, indices: Sequence[int]) -> dict[str, Any]:
        """The point at one stop of each axis."""
        flat = 0
        for axis, index in zip(self.axes, indices):
            flat = flat * len(axis.values) + index
        return self.points[flat]

    def overrides(self, indices: Sequence[int]) -> list[str]:
        """The ``--set`` overrides of one combination (on top of the report's scenario)."""
        return [o for axis, index in zip(self.axes, indices) for o in axis.overrides[index]]


def axis_of(key: str, label: str, values: Iterable[Any], current: Any, overrides_of) -> WhatIfAxis:
    """An axis over the distinct ``values``, sorted, with the scenario's ``current`` among them (which
    needs no override)."""
    stops = sorted(set(values) | {current})
    overrides = tuple(() if v == current else tuple(overrides_of(v)) for v in stops)
    return WhatIfAxis(key, label, tuple(stops), overrides, stops.index(current))


def splits_model(scenario: Scenario) -> bool:
    """Whether the schedule sends the model in fragments (then P is an axis)."""
    return (
        SCHEDULES[scenario.schedule.algorithm].fragments(replace(scenario.schedule, fragments=2))
        == 2
    )


def whatif_axes(scenario: Scenario) -> list[WhatIfAxis]:
    """The sliders for this scenario: H, P where the schedule fragments, bits, the top-k density where
    it compresses, bandwidth, M (the user's own, ``--axis``, are added by
    ``marked_axes.report_axes``)."""
    schedule = scenario.schedule
    axes = []
    if SCHEDULES[schedule.algorithm].exchanged != GRADIENT:
        axes.append(inner_steps_axis(scenario))
    if splits_model(scenario):
        p = schedule.fragments
        axes.append(
            axis_of(
                "fragments",
                "P, fragments",
                [1, max(1, p // 2), 2 * p],
                p,
                lambda v: [f"schedule.fragments={v}"],
            )
        )
    compressed = TopK.of(schedule) is not None
    axes.append(
        axis_of(
            "bits",
            "bits per value on the wire",
            [b for b in (VALUE_BITS if compressed else WIRE_BITS) if b <= 16],
            schedule.bits,
            lambda v: [f"schedule.bits={v}"],
        )
    )
    if compressed:
        axes.append(density_axis(scenario))
    axes.append(
        axis_of(
            "bandwidth_scale",
            "bandwidth, times each island's link",
            BANDWIDTH_SCALES,
            1,
            lambda f: bandwidth_overrides(scenario, f),
        )
    )
    # a sync needs two workers: fewer is no scenario
    workers = {
        worker_count(scenario, f): f
        for f in WORKER_SCALES
        if worker_count(scenario, f) >= min(MIN_WORKERS, scenario.worker_count)
    }
    axes.append(
        axis_of(
            "workers",
            "M, workers (each island's replicas scaled)",
            workers,
            scenario.worker_count,
            lambda m: replica_overrides(scenario, workers[m]),
        )
    )
    return axes


def inner_steps_axis(scenario: Scenario) -> WhatIfAxis:
    """H at equal work: the divisors of the run's inner steps per worker nearest ``H_FACTORS`` x H, each
    with the outer steps that make the same inner steps (module docstring)."""
    h, total_steps = (
        scenario.schedule.inner_steps,
        schedule_of(scenario).total_steps(scenario.schedule),
    )
    return axis_of(
        "inner_steps",
        "H, inner steps between syncs (at equal work: outer steps = inner steps / H)",
        [divisor_near(total_steps, h * f) for f in H_FACTORS],
        h,
        lambda v: [f"schedule.inner_steps={v}", f"schedule.outer_steps={total_steps // v}"],
    )


def density_axis(scenario: Scenario) -> WhatIfAxis:
    """The top-k density: ``DENSITY_SCALES`` x the scenario's k of each chunk, each at least one value
    and at most the chunk, as the fraction of the chunk kept."""
    chunk, topk = scenario.schedule.chunk_values, scenario.schedule.topk
    kept = {min(chunk, max(1, round(topk * scale))) for scale in DENSITY_SCALES}
    return axis_of(
        "density",
        f"top-k density, values kept of every {chunk}",
        [k / chunk for k in kept],
        topk / chunk,
        lambda fraction: [f"schedule.topk={round(fraction * chunk)}"],
    )


def divisor_near(number: int, target: float) -> int:
    """The divisor of ``number`` nearest ``target`` (the smaller of two as near)."""
    small = [d for d in range(1, math.isqrt(number) + 1) if number % d == 0]
    return min({*small, *(number // d for d in small)}, key=lambda d: (abs(d - target), d))


def bandwidth_overrides(scenario: Scenario, scale: float) -> list[str]:
    """Every island's uplink and downlink times ``scale``."""
    return [
        f"island.{index}.{key}={getattr(island, key) * scale!r}"
        for index, island in enumerate(scenario.islands)
        for key in ("upload_gbps", "download_gbps")
    ]


def scaled_replicas(replicas: int, scale: float) -> int:
    return max(1, round(replicas * scale))


def worker_count(scenario: Scenario, scale: float) -> int:
    return sum(scaled_replicas(island.replicas, scale) for island in scenario.islands)


def replica_overrides(scenario: Scenario, scale: float) -> list[str]:
    return [
        f"island.{index}.replicas={scaled_replicas(island.replicas, scale)}"
        for index, island in enumerate(scenario.islands)
    ]


def grid_runs(axes: Sequence[WhatIfAxis]) -> int:
    """Combinations in the full product of the axes (each one simulator run at most)."""
    return math.prod(len(axis.values) for axis in axes)


def rounded(value: float) -> float:
    return float(f"{value:.{SIGNIFICANT_DIGITS}g}")


def json_number(value: Any) -> Any:
    """A figure as JSON takes it: a finite float or int, else None (a run churn cut short)."""
    if value is None or isinstance(value, bool):
        return value
    return value if is_finite_number(value) else None


def whatif_point(scenario: Scenario, max_events: float) -> dict[str, Any]:
    """One combination's figures and worker 0's uplink rate over its first intervals."""
    result = simulate(scenario, max_events)
    summary = result.summary
    window_s = summary["wall_time_s"] * min(
        1.0, PLOT_INTERVALS / max(1, scenario.schedule.outer_steps)
    )
    times, levels = rate_steps(result.links, 0, "up")
    inside = times <= window_s
    return {
        **{key: json_number(summary[key]) for key in FIGURES},
        "window_s": window_s,
        "times_s": [rounded(t) for t in times[inside]],
        "rates_gbps": [rounded(r) for r in levels[inside]],
    }


def whatif_chunk(scenarios: Sequence[Scenario], max_events: float) -> list[dict[str, Any]]:
    return [whatif_point(scenario, max_events) for scenario in scenarios]


Plans = dict[tuple[int, ...], "Scenario | str"]


def planned(
    source: ScenarioSource, axes: Sequence[WhatIfAxis]
) -> tuple[Plans, dict[tuple[int, ...], float]]:
    """Each combination's scenario, or the loader's (or the resource guard's) reason it is not one,
    and its estimated simulator events (0 for one that does not run), by the stops it takes."""
    plans: Plans = {}
    events: dict[tuple[int, ...], float] = {}
    for stops in itertools.product(*(range(len(axis.values)) for axis in axes)):
        try:
            scenario = source.variant(
                *(o for axis, i in zip(axes, stops) for o in axis.overrides[i])
            )
            plans[stops], events[stops] = scenario, guard(scenario, source.max_events).events
        except ScenarioError as error:
            plans[stops], events[stops] = f"{error.key}: {error.rule}", 0.0
    return plans, events


def kept_events(kept: Sequence[Sequence[int]], events: dict[tuple[int, ...], float]) -> float:
    return sum(events[stops] for stops in itertools.product(*kept))


def fit_budget(
    axes: Sequence[WhatIfAxis], events: dict[tuple[int, ...], float], max_events: float
) -> list[list[int]]:
    """The stops of each axis to keep: all of them if the grid's events fit ``max_events``, else
    fewer, the stop farthest from the scenario's own dropped from the axis with the most first. The
    scenario's own combination always stays."""
    kept = [list(range(len(axis.values))) for axis in axes]
    while kept_events(kept, events) > max_events and any(len(stops) > 1 for stops in kept):
        widest = max(range(len(kept)), key=lambda a: (len(kept[a]), a))
        start = axes[widest].start
        kept[widest].remove(max(kept[widest], key=lambda i: (abs(i - start), i)))
    return kept


def run_whatif(
    source: ScenarioSource,
    axes: Sequence[WhatIfAxis],
    executor: Executor | None = None,
    jobs: int | None = None,
    progress: Progress | None = None,
    max_events: float = WHATIF_MAX_EVENTS,
) -> WhatIfGrid:
    """Simulate every valid combination of the axes, or of as many stops as ``max_events`` allows
    (``fit_budget``), in parallel as ``run_tasks`` does; ``progress`` counts runs."""
    plans, events = planned(source, axes)
    kept = fit_budget(axes, events, max_events)
    combinations = list(itertools.product(*kept))
    valid = [plans[stops] for stops in combinations if not isinstance(plans[stops], str)]
    batches = chunked(valid, jobs or default_jobs())
    results = run_tasks(
        whatif_chunk,
        [(batch, source.max_events) for batch in batches],
        [len(b) for b in batches],
        executor=executor,
        jobs=jobs,
        progress=progress,
    )
    found = iter(point for batch in results for point in batch)
    points = tuple(
        {"error": plans[stops]} if isinstance(plans[stops], str) else next(found)
        for stops in combinations
    )
    shrunk = [axis.subset(stops) for axis, stops in zip(axes, kept)]
    # a single stop is the scenario's own value: no override, no slider
    return WhatIfGrid(
        tuple(a for a in shrunk if len(a.values) > 1),
        points,
        tuple(a for a in shrunk if len(a.values) == 1),
        grid_runs(axes),
        kept_events(kept, events),
        max_events,
    )
