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

import contextlib
import math
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from islands.numbers import is_finite_number
from islands.scenarios import Scenario, ScenarioSource
from islands.scenarios.spec import MAX_GBPS, MIN_GBPS
from islands.schedules import schedule_of
from islands.simulator import BudgetExceeded, simulate

# Every island's access link at one rate, both ways (upload_gbps / download_gbps override bandwidth_gbps).
# The search spans every rate a scenario may have: MIN_GBPS (1 kbit/s) to MAX_GBPS (1 Pbit/s); a
# target not reached at MAX_GBPS is unreachable by bandwidth alone.
LINK_KEYS = ("island.*.bandwidth_gbps", "island.*.upload_gbps", "island.*.download_gbps")
MAX_INNER_STEPS = 2**17  # 131072 steps: far beyond any H in use (the DiLoCo paper swept 50 to 2000)
BRACKET_FACTOR = 10.0
RELATIVE_TOLERANCE = 1e-3
REMEMBERED = threading.local()  # the runs a thread remembers by scenario (``remembering``)
# Utilisation is a ratio of float sums; a run that hides every transfer may land a hair below 1.
UTILISATION_SLACK = 1e-9
Value = TypeVar(
    "Value", int, float
)  # a bracket's ends: whole numbers (H / P), or any (a bandwidth)


@dataclass(frozen=True)
class Answer:
    """The least value that reaches the target (``None``: not reached), the utilisation simulated at
    ``tried`` (the answer itself, or where the best utilisation was seen when not reached; ``None``
    when every run was cut short), the runs it took, how many of them churn cut short, and whether the
    runs on its curve rose with the value (``rises``): where they did not, the premise of the search
    failed (one seed's draw of jitter or churn moves with the rate) and the value is where a run
    reached the target, not a threshold."""

    value: float | None
    utilisation: float | None
    runs: int
    tried: float
    cut_short: int = 0
    monotone: bool = True

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
        found = measure_scenario(source.variant(*run), source.max_events)
        if found.utilisation is None:
            return found
        values.append(found.utilisation)
    return Measurement(sum(values) / len(values))


@contextlib.contextmanager
def remembering() -> Iterator[dict]:
    """Within, this thread remembers its runs by scenario (a frozen, hashable description of everything
    the simulator reads, seed included: the same scenario gives the same run), so each is simulated
    once; yields them. Searches meet the same scenario again: a schedule's run as it stands opens its
    bandwidth curve and its H search."""
    REMEMBERED.runs = {}
    try:
        yield REMEMBERED.runs
    finally:
        del REMEMBERED.runs


def measure_scenario(scenario: Scenario, max_events: float) -> Measurement:
    """One run's utilisation, or the reason it has none; remembered where ``remembering``."""
    remembered = getattr(REMEMBERED, "runs", None)
    key = (scenario, max_events)
    if remembered is not None and key in remembered:
        return remembered[key]
    try:
        summary = simulate(scenario, max_events).summary
        found = (
            Measurement(float(summary["compute_utilisation"]))
            if summary["complete"]
            else Measurement(None, summary["incomplete_reason"])
        )
    except BudgetExceeded as exc:
        found = Measurement(None, str(exc))
    if remembered is not None:
        remembered[key] = found
    return found


def utilisation(source: ScenarioSource, *overrides: str, seeds: Sequence[int] = ()) -> float | None:
    """Compute utilisation of one run, or the mean over ``seeds``; None when a run was cut short."""
    return measure(source, *overrides, seeds=seeds).utilisation


def score(found: float | None) -> float:
    """A utilisation for comparisons: a run cut short ranks below every finished one."""
    return -1.0 if found is None else found


class Curve:
    """Utilisation as a function of one value (bandwidth or H), each value simulated once: the searches
    for several targets on one curve share what it has seen."""

    def __init__(self, evaluate: Callable[[float], float | None]):
        self.evaluate = evaluate
        self.seen: dict[float, float | None] = {}


class Probe:
    """A search for one target on a curve, counting the runs it makes."""

    def __init__(self, curve: Curve, target: float):
        self.curve = curve
        self.target = target
        self.made: list[float] = []

    @property
    def seen(self) -> dict[float, float | None]:
        return self.curve.seen

    def reached(self, value: float) -> bool:
        return score(self.seen[value]) >= self.target - UTILISATION_SLACK

    def reaches(self, value: float) -> bool:
        if value not in self.seen:
            self.seen[value] = self.curve.evaluate(value)
            self.made.append(value)
        return self.reached(value)

    def bracket(self) -> tuple[float | None, float | None]:
        """The tightest bracket the curve has seen: the greatest value short of the target and the
        least one reaching it (either None where none is)."""
        short = [value for value in self.seen if not self.reached(value)]
        reaching = [value for value in self.seen if self.reached(value)]
        return max(short, default=None), min(reaching, default=None)

    @property
    def cut_short(self) -> int:
        return sum(1 for value in self.made if self.seen[value] is None)

    def answer(self, value: float) -> Answer:
        """The target is reached at ``value``."""
        return Answer(
            value, self.seen[value], len(self.made), value, self.cut_short, rises(self.seen)
        )

    def unreachable(self) -> Answer:
        best = max(self.seen, key=lambda value: score(self.seen[value]))
        return Answer(None, self.seen[best], len(self.made), best, self.cut_short, rises(self.seen))


# Utilisation falling by less than this between two runs is rounding, not a fall.
FALL_SLACK = 1e-6


def rises(seen: dict[float, float | None]) -> bool:
    """Whether utilisation never falls as the value grows, over every run seen (a run cut short
    ranks below every finished one)."""
    scores = [score(seen[value]) for value in sorted(seen)]
    return all(later >= earlier - FALL_SLACK for earlier, later in zip(scores, scores[1:]))


def link_overrides(gbps: float) -> list[str]:
    """Overrides that put every island's access link at ``gbps`` in both directions."""
    return [f"{key}={gbps!r}" for key in LINK_KEYS]


def bandwidth_curve(source: ScenarioSource, *overrides: str, seeds: Sequence[int] = ()) -> Curve:
    """Utilisation against the bandwidth of every island's access link (Gbit/s)."""
    return Curve(lambda gbps: utilisation(source, *overrides, *link_overrides(gbps), seeds=seeds))


def least_bandwidth(
    source: ScenarioSource,
    target: float,
    *overrides: str,
    seeds: Sequence[int] = (),
    curve: Curve | None = None,
    guess: float | None = None,
) -> Answer:
    """The least bandwidth (Gbit/s, the same on every island's access link) whose utilisation reaches
    ``target``, to a relative precision of ``RELATIVE_TOLERANCE``.

    The bracket [low, high] always has ``high`` reaching the target and ``low`` not; the answer is
    ``high``, a bandwidth known to reach it. It is found by ``bracket_bandwidth`` and narrowed by
    ``narrow`` in log(bandwidth). ``curve``: one already searched for other targets (of
    ``bandwidth_curve(source, *overrides, seeds=seeds)``), whose runs this search starts from;
    ``guess``: where the answer is expected (a warm start), else the search starts from what the
    curve has seen, or from the scenario's own bandwidth.
    """
    probe = Probe(curve or bandwidth_curve(source, *overrides, seeds=seeds), target)
    start = max(island.bandwidth_gbps for island in source.variant(*overrides).islands)
    found = bracket_bandwidth(probe, start, guess)
    if found is None:
        return probe.unreachable()
    low, high = found
    return probe.answer(
        high if low is None else narrow(probe, low, high, math.log1p(RELATIVE_TOLERANCE))
    )


def expected_at(probe: Probe) -> float | None:
    """Where the target should be reached, from the two runs nearest to it in overhead (or the one
    there is): the overhead as a line in 1 / value through them, k / value - hidden seconds
    (``narrow``), or k / value through one. So it is for bandwidth, and for H: a blocking sync's
    overhead is sync seconds / (H x step seconds). None where no run has an overhead to go by
    (every one hid every transfer or was cut short)."""
    goal = overhead(probe.target)
    known = [(value, overhead(found)) for value, found in probe.seen.items()]
    known = sorted(
        ((value, cost) for value, cost in known if 0 < cost < math.inf),
        key=lambda pair: abs(math.log(pair[1] / goal)) if goal > 0 else 0.0,
    )
    if goal <= 0 or not known:
        return None
    (value, cost), *others = known
    expected = value * cost / goal
    if others:
        other, other_cost = others[0]
        slope = (cost - other_cost) / (1 / value - 1 / other)
        if slope > 0 and goal > cost - slope / value:
            expected = slope / (goal - (cost - slope / value))
    return expected


def expected_gbps(probe: Probe) -> float | None:
    expected = expected_at(probe)
    return None if expected is None else min(max(expected, MIN_GBPS), MAX_GBPS)


def bracket_bandwidth(
    probe: Probe, start: float, guess: float | None
) -> tuple[float | None, float] | None:
    """A bracket (low, high) of the answer, ``low`` None when ``high`` is the least bandwidth there is;
    None when even ``MAX_GBPS`` falls short.

    The first run is at ``guess`` (a warm start), else where the curve's runs put the answer
    (``expected_gbps``), else at the scenario's own bandwidth. Each next run is at the expected
    bandwidth, but at least a step beyond the side already known; the steps start at the search's
    precision and grow tenfold, so a good guess costs two runs, and they are factors of
    ``BRACKET_FACTOR`` where nothing is expected (every run so far hid every transfer or was cut short).
    """
    near, far = math.log1p(RELATIVE_TOLERANCE), math.log(BRACKET_FACTOR)
    value = guess if guess is not None else expected_gbps(probe) or start
    step = near
    while True:
        probe.reaches(value)
        low, high = probe.bracket()
        if low is not None and high is not None:
            return low, high
        if high is not None and high <= MIN_GBPS * (
            1 + RELATIVE_TOLERANCE
        ):  # at the bound, give or take rounding
            return None, high
        if low is not None and low >= MAX_GBPS * (1 - RELATIVE_TOLERANCE):
            return None
        expected = expected_gbps(probe)
        reach = step if expected is not None else far
        if high is None:
            assert low is not None, (
                "every run made fell short of the target, so the least one is low"
            )
            value = min(max(expected or 0.0, low * math.exp(reach)), MAX_GBPS)
        else:
            value = max(min(expected or math.inf, high / math.exp(reach)), MIN_GBPS)
        step = min(step * 10, far)


def overhead(fraction: float | None) -> float:
    """1 / utilisation - 1: seconds not computing per second computing (unbounded for a run cut short)."""
    return 1 / fraction - 1 if fraction is not None and fraction > 0 else math.inf


def narrow(probe: Probe, low: float, high: float, tolerance: float) -> float:
    """Shrink a bracket [low, high] of bandwidths until log(high / low) <= ``tolerance``; return high.

    Each step puts the overhead 1/U - 1 on a line in 1/bandwidth (``interpolate``). That is exact for
    a blocking sync (overhead = sync seconds / compute seconds = k / bandwidth) and for fragments
    overlapped with compute while they do not share a link (k / bandwidth - hidden seconds), so a
    step lands on the answer and the next run, ``tolerance`` across it on the other side, closes the
    bracket: two runs. That twin run is made only where the step landed near the target (its
    overhead within ``TWIN_RANGE`` of the target's). Probes stay ``tolerance`` / 2 inside the
    bracket, and after ``STALLS_BEFORE_BISECTING`` steps in a row that fail to halve it the next
    one bisects in log(bandwidth), so the search is never much slower than plain bisection where the
    curve bends. (A step that fails may still add the second run the line needs: the first steps
    often span the bend where every transfer becomes hidden.)
    """
    stalls = 0
    while math.log(high / low) > tolerance:
        width = math.log(high / low)
        interpolated = (
            None if stalls >= STALLS_BEFORE_BISECTING else interpolate(probe, low, high, tolerance)
        )
        middle = low * math.exp(width / 2) if interpolated is None else interpolated
        low, high = split(probe, low, high, middle)
        if (
            interpolated is not None
            and near_target(probe, middle)
            and math.log(high / low) > tolerance
        ):
            twin = middle / math.exp(tolerance) if high == middle else middle * math.exp(tolerance)
            if low < twin < high:
                low, high = split(probe, low, high, twin)
        stalls = stalls + 1 if interpolated is not None and math.log(high / low) > width / 2 else 0
    return high


# A step whose run has an overhead within this factor of the target's landed near the answer.
TWIN_RANGE = 0.1
STALLS_BEFORE_BISECTING = 2


def near_target(probe: Probe, value: float) -> bool:
    cost, goal = overhead(probe.seen[value]), overhead(probe.target)
    return 0 < cost < math.inf and goal > 0 and abs(math.log(cost / goal)) < TWIN_RANGE


def split(probe: Probe, low: Value, high: Value, middle: Value) -> tuple[Value, Value]:
    """The half of the bracket the answer is in, after a run at ``middle``."""
    return (low, middle) if probe.reaches(middle) else (middle, high)


def interpolate(probe: Probe, low: float, high: float, tolerance: float) -> float | None:
    """The next bandwidth to run, kept ``tolerance`` / 2 inside the bracket: where the line through
    the two runs nearest the target meets it (``expected_gbps``) if that is inside, else where the
    overhead, linear in 1 / bandwidth between the bracket's ends, meets it; None where neither
    gives a line (a run cut short, or no fall in overhead between the ends)."""
    width = math.log(high / low)
    expected = expected_gbps(probe)
    if expected is None or not low < expected < high:
        goal = overhead(probe.target)
        at_low, at_high = overhead(probe.seen[low]), overhead(probe.seen[high])
        if not is_finite_number(at_low) or at_low <= at_high or at_high == 0:
            return None
        share = (at_low - goal) / (at_low - at_high)
        expected = 1 / (1 / low - share * (1 / low - 1 / high))
    return low * math.exp(min(max(math.log(expected / low), tolerance / 2), width - tolerance / 2))


def least_inner_steps(
    source: ScenarioSource, target: float, *overrides: str, seeds: Sequence[int] = ()
) -> Answer:
    """The smallest H whose utilisation reaches ``target`` at the scenario's bandwidth.

    Streaming needs H divisible by P and tau < H / P, so H runs over multiples of P above P * tau
    (for DiLoCo P is 1 and tau 0, and every H >= 1 is a candidate). It grows from the scenario's H
    to where the runs put the answer (``expected_at``), at most doubling each time, then narrows the
    bracket as ``narrow`` does, in whole multiples of P: exact.
    Churn breaks the premise that utilisation grows with H (a longer interval loses more work to each
    departure), so growing stops as unreachable as soon as utilisation falls.
    """
    scenario = source.variant(*overrides)
    declared = schedule_of(scenario)
    step = declared.fragments(scenario.schedule)
    first = scenario.schedule.overlap_steps + 1 if "overlap_steps" in declared.reads else 1
    probe = Probe(
        Curve(
            lambda k: utilisation(
                source, *overrides, f"schedule.inner_steps={int(k) * step}", seeds=seeds
            )
        ),
        target,
    )
    limit = MAX_INNER_STEPS // step
    high, previous = max(scenario.schedule.inner_steps // step, first), None
    while not probe.reaches(high):
        if high >= limit or (
            previous is not None and score(probe.seen[high]) < score(probe.seen[previous])
        ):
            return scaled(probe.unreachable(), step)
        expected = expected_at(probe)
        grown = 2 * high if expected is None else min(max(math.ceil(expected), high + 1), 2 * high)
        high, previous = min(grown, limit), high
    low = max(
        (int(k) for k in probe.seen if k < high and not probe.reached(k)), default=first - 1
    )  # k: an H / P
    return scaled(probe.answer(narrow_steps(probe, low, high)), step)


def narrow_steps(probe: Probe, low: int, high: int) -> int:
    """``narrow`` over whole numbers: shrink [low, high] until they are neighbours; return high."""
    stalls = 0
    while high - low > 1:
        width = high - low
        expected = None if stalls >= STALLS_BEFORE_BISECTING else expected_at(probe)
        if expected is not None and low < expected < high:
            interpolated, middle = True, min(max(math.ceil(expected), low + 1), high - 1)
        else:
            interpolated, middle = False, (low + high) // 2
        low, high = split(probe, low, high, middle)
        if interpolated and near_target(probe, middle) and high - low > 1:
            twin = middle - 1 if high == middle else middle + 1
            low, high = split(probe, low, high, twin)
        stalls = stalls + 1 if interpolated and high - low > width / 2 else 0
    return high


def scaled(answer: Answer, step: int) -> Answer:
    """An answer in multiples of P, as H."""
    value = None if answer.value is None else int(answer.value) * step
    return replace(answer, value=value, tried=int(answer.tried) * step)
