"""Searches over the simulator: the least bandwidth, or the smallest H, that reaches a utilisation.

Each answer comes from simulating candidates, not from a formula, so whatever the simulator models
(latency, link sharing between fragments, heterogeneous islands, stragglers) is in it. Both searches
rely on one property: compute utilisation never falls when bandwidth or H grows. Each first brackets
the answer (bandwidth by factors of ``BRACKET_FACTOR``, H by doubling), then narrows the bracket
(bandwidth by interpolation safeguarded with bisection, H by integer bisection).

A run that churn cut short has no utilisation, and neither has one that the simulator's resource
guard refuses (a probe far from the scenario, e.g. a huge H under churn): the searches count such a
run as not reaching the target (so every answer is a value at which a finished run reached it) and
report how many there were.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

from islands.scenarios.spec import MAX_GBPS, MIN_GBPS
from islands.schedules import schedule_of
from islands.simulator import BudgetExceeded, simulate

from .scenario_source import ScenarioSource

# Every island's access link at one rate, both ways (upload_gbps / download_gbps override bandwidth_gbps).
# The search spans every rate a scenario may have: MIN_GBPS (1 kbit/s) to MAX_GBPS (1 Pbit/s); a
# target not reached at MAX_GBPS is unreachable by bandwidth alone.
LINK_KEYS = ("island.*.bandwidth_gbps", "island.*.upload_gbps", "island.*.download_gbps")
MAX_INNER_STEPS = 2**17   # 131072 steps: far beyond any H in use (the DiLoCo paper swept 50 to 2000)
BRACKET_FACTOR = 10.0
RELATIVE_TOLERANCE = 1e-3
# Utilisation is a ratio of float sums; a run that hides every transfer may land a hair below 1.
UTILISATION_SLACK = 1e-9


@dataclass(frozen=True)
class Answer:
    """The least value that reaches the target (``None``: not reached), the utilisation simulated at
    ``tried`` (the answer itself, or where the best utilisation was seen when not reached; ``None``
    when every run was cut short), the runs it took and how many of them churn cut short."""

    value: float | None
    utilisation: float | None
    runs: int
    tried: float
    cut_short: int = 0

    @property
    def reached(self) -> bool:
        return self.value is not None


@dataclass(frozen=True)
class Measurement:
    """Compute utilisation of a run (or the mean over seeds), or None and the reason when one was cut
    short or refused by the resource guard."""

    utilisation: float | None
    incomplete_reason: str | None = None


def measure(source: ScenarioSource, *overrides: str, seeds: Sequence[int] = ()) -> Measurement:
    """Simulate one run, or one per seed (for jitter and churn), under the source's ``max_events``."""
    runs = [list(overrides)] if not seeds else [[*overrides, f"seed={seed}"] for seed in seeds]
    values = []
    for run in runs:
        try:
            summary = simulate(source.variant(*run), source.max_events).summary
        except BudgetExceeded as exc:
            return Measurement(None, str(exc))
        if not summary["complete"]:
            return Measurement(None, summary["incomplete_reason"])
        values.append(float(summary["compute_utilisation"]))
    return Measurement(sum(values) / len(values))


def utilisation(source: ScenarioSource, *overrides: str, seeds: Sequence[int] = ()) -> float | None:
    """Compute utilisation of one run, or the mean over ``seeds``; None when a run was cut short."""
    return measure(source, *overrides, seeds=seeds).utilisation


def score(found: float | None) -> float:
    """A utilisation for comparisons: a run cut short ranks below every finished one."""
    return -1.0 if found is None else found


class Probe:
    """Utilisation as a function of one value, counting runs and remembering each result."""

    def __init__(self, evaluate: Callable[[float], float | None], target: float):
        self.evaluate = evaluate
        self.target = target
        self.seen: dict[float, float | None] = {}

    def reaches(self, value: float) -> bool:
        if value not in self.seen:
            self.seen[value] = self.evaluate(value)
        return score(self.seen[value]) >= self.target - UTILISATION_SLACK

    @property
    def cut_short(self) -> int:
        return sum(1 for found in self.seen.values() if found is None)

    def answer(self, value: float) -> Answer:
        """The target is reached at ``value``."""
        return Answer(value, self.seen[value], len(self.seen), value, self.cut_short)

    def unreachable(self) -> Answer:
        best = max(self.seen, key=lambda value: score(self.seen[value]))
        return Answer(None, self.seen[best], len(self.seen), best, self.cut_short)


def link_overrides(gbps: float) -> list[str]:
    """Overrides that put every island's access link at ``gbps`` in both directions."""
    return [f"{key}={gbps!r}" for key in LINK_KEYS]


def least_bandwidth(source: ScenarioSource, target: float, *overrides: str, seeds: Sequence[int] = ()) -> Answer:
    """The least bandwidth (Gbit/s, the same on every island's access link) whose utilisation reaches
    ``target``, to a relative precision of ``RELATIVE_TOLERANCE``.

    The bracket [low, high] always has ``high`` reaching the target and ``low`` not; the answer is
    ``high``, a bandwidth known to reach it. It is narrowed by ``narrow`` in log(bandwidth).
    """
    probe = Probe(lambda gbps: utilisation(source, *overrides, *link_overrides(gbps), seeds=seeds), target)
    start = max(island.bandwidth_gbps for island in source.variant(*overrides).islands)
    if probe.reaches(start):
        high, low = start, max(start / BRACKET_FACTOR, MIN_GBPS)
        while probe.reaches(low):
            if low <= MIN_GBPS * (1 + RELATIVE_TOLERANCE):  # at the bound, give or take rounding
                return probe.answer(low)
            high, low = low, max(low / BRACKET_FACTOR, MIN_GBPS)
    else:
        low, high = start, min(start * BRACKET_FACTOR, MAX_GBPS)
        while not probe.reaches(high):
            if high >= MAX_GBPS * (1 - RELATIVE_TOLERANCE):
                return probe.unreachable()
            low, high = high, min(high * BRACKET_FACTOR, MAX_GBPS)
    return probe.answer(narrow(probe, low, high, math.log1p(RELATIVE_TOLERANCE)))


def overhead(fraction: float | None) -> float:
    """1 / utilisation - 1: seconds not computing per second computing (unbounded for a run cut short)."""
    return 1 / fraction - 1 if fraction is not None and fraction > 0 else math.inf


def narrow(probe: Probe, low: float, high: float, tolerance: float) -> float:
    """Shrink a bracket [low, high] of bandwidths until log(high / low) <= ``tolerance``; return high.

    Each step interpolates the overhead 1/U - 1 linearly in 1/bandwidth between the ends. That is
    exact for a blocking sync (overhead = sync seconds / compute seconds = k / bandwidth) and for
    fragments overlapped with compute while they do not share a link (k / bandwidth - hidden
    seconds), so two steps land on either side of the answer. Probes stay ``tolerance`` / 2 inside
    the bracket, and whenever an interpolation fails to halve it the next step bisects in
    log(bandwidth), so the search is never much slower than plain bisection where the curve bends.
    """
    goal = overhead(probe.target)
    bisect = False
    while math.log(high / low) > tolerance:
        width = math.log(high / low)
        at_low, at_high = overhead(probe.seen[low]), overhead(probe.seen[high])
        if bisect or not math.isfinite(at_low) or at_low <= at_high:
            offset = width / 2
        else:
            share = (at_low - goal) / (at_low - at_high)
            inverse = 1 / low - share * (1 / low - 1 / high)
            offset = min(max(math.log(1 / (inverse * low)), tolerance / 2), width - tolerance / 2)
        middle = low * math.exp(offset)
        if probe.reaches(middle):
            high = middle
        else:
            low = middle
        bisect = not bisect and math.log(high / low) > width / 2
    return high


def least_inner_steps(source: ScenarioSource, target: float, *overrides: str, seeds: Sequence[int] = ()) -> Answer:
    """The smallest H whose utilisation reaches ``target`` at the scenario's bandwidth.

    Streaming needs H divisible by P and tau < H / P, so H runs over multiples of P above P * tau
    (for DiLoCo P is 1 and tau 0, and every H >= 1 is a candidate). Exact: integer bisection.
    Churn breaks the premise that utilisation grows with H (a longer interval loses more work to each
    departure), so doubling stops as unreachable as soon as utilisation falls.
    """
    scenario = source.variant(*overrides)
    declared = schedule_of(scenario)
    step = declared.fragments(scenario.schedule)
    first = scenario.schedule.overlap_steps + 1 if "overlap_steps" in declared.reads else 1
    probe = Probe(lambda k: utilisation(source, *overrides, f"schedule.inner_steps={int(k) * step}", seeds=seeds),
                  target)
    limit = MAX_INNER_STEPS // step
    high, previous = max(scenario.schedule.inner_steps // step, first), None
    while not probe.reaches(high):
        if high >= limit or (previous is not None and score(probe.seen[high]) < score(probe.seen[previous])):
            return scaled(probe.unreachable(), step)
        high, previous = min(high * 2, limit), high
    low = first - 1
    while high - low > 1:
        middle = (low + high) // 2
        if probe.reaches(middle):
            high = middle
        else:
            low = middle
    return scaled(probe.answer(high), step)


def scaled(answer: Answer, step: int) -> Answer:
    """An answer in multiples of P, as H."""
    value = None if answer.value is None else int(answer.value) * step
    return Answer(value, answer.utilisation, answer.runs, int(answer.tried) * step, answer.cut_short)
