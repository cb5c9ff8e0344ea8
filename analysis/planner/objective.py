"""Plans that count loss: the schedule, H and wire precision that reach DDP's loss soonest, or cheapest.

A team does not pick H for utilisation alone: a larger H hides more of the network but loses more
loss per token, so it needs more tokens to reach the same loss. The candidates (``candidates``) are
each of the scenario's schedules that runs, at each H of ``H_GRID`` up to the run's steps plus the
scenario's own H and the utilisation plan's answer (where it fits in the run's steps; else said
so in the plan's notes), at each wire precision no wider than the model's
values, and at each P of ``FRAGMENTS_GRID`` for a schedule that splits the model; DDP has no H and
keeps the scenario's precision. For each, this module takes

* the wall-clock seconds per inner step, from simulating the candidate for the scenario's own number
  of inner steps (``budget_steps``: the scenario's H x outer steps; equal tokens for every candidate);
* its loss relative to DDP at equal tokens, p (``loss_prior.estimate``, or a measured quality profile);
* the tokens it needs to reach DDP's loss, f = ``extra_tokens_factor(N, p)`` (Chinchilla's L(N, D));

and predicts the time to DDP's loss as budget_steps x f x (seconds per inner step), and the cost as
that time x the fleet's price per hour (``island.cost_per_hour`` x replicas, summed). DDP is the
reference: p = 0, f = 1. A candidate whose run is cut short, or that no amount of tokens brings to
DDP's loss, has no time and ranks last.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field, replace
from typing import Any

from islands.errors import UserError
from islands.numbers import is_finite_number
from islands.scenarios import Scenario, ScenarioError, ScenarioSource
from islands.scenarios.spec import WIRE_BITS
from islands.schedules import GRADIENT, SCHEDULES, schedule_of, switch_to
from islands.simulator import BudgetExceeded, simulate
from islands.units import S_PER_HOUR

from ..parallel import Progress, run_tasks
from ..quality.loss_prior import estimate, extra_tokens_factor
from ..quality.quality_profile import QualityProfile

OBJECTIVES = ("utilisation", "time-to-loss", "cost")
H_GRID = (10, 20, 30, 50, 100, 200, 300, 500, 1000, 2000, 3000, 5000, 10000, 20000, 50000)
FRAGMENTS_GRID = (1, 2, 5, 10, 20)


@dataclass(frozen=True)
class Candidate:
    algorithm: str
    inner_steps: int | None  # None: DDP, which has no H
    bits: int
    fragments: int | None = None  # None: a schedule that does not split the model

    def settings(self) -> str:
        """ "H=500 P=10 16-bit", what sets it apart from the other candidates of its schedule."""
        h = "" if self.inner_steps is None else f"H={self.inner_steps} "
        p = "" if self.fragments is None else f"P={self.fragments} "
        return f"{h}{p}{self.bits}-bit"

    def overrides(self, budget_steps: int) -> tuple[str, ...]:
        """The candidate's keys, run for ``budget_steps`` inner steps (DDP: one outer step per step)."""
        steps = 1 if self.inner_steps is None else self.inner_steps
        keys = [
            *switch_to(self.algorithm),
            f"schedule.bits={self.bits}",
            f"schedule.outer_steps={math.ceil(budget_steps / steps)}",
        ]
        if self.inner_steps is not None:
            keys.append(f"schedule.inner_steps={self.inner_steps}")
        if self.fragments is not None:
            keys.append(f"schedule.fragments={self.fragments}")
        return tuple(keys)


@dataclass(frozen=True)
class Outcome:
    """One candidate priced: its simulated utilisation and seconds per inner step, its loss against
    DDP's, the tokens it needs to reach DDP's loss, and the predicted time and cost to get there."""

    candidate: Candidate
    utilisation: float | None
    s_per_step: float | None
    relative_to_dp: float
    tokens_factor: float
    time_s: float | None
    cost: float | None
    notes: tuple[str, ...] = ()
    cut_short: str | None = None
    measured: bool = False  # its loss from the quality profile


@dataclass
class ObjectivePlan:
    scenario: Scenario
    objective: str
    budget_steps: int
    fleet_cost_per_hour: float
    outcomes: list[Outcome]
    left_out: list[str] = field(default_factory=list)
    profile_scenario: str | None = (
        None  # the scenario a quality profile was measured on, if one was given
    )

    def ranked(self) -> list[Outcome]:
        """Best first by the objective; candidates with no time last."""
        key = "cost" if self.objective == "cost" else "time_s"
        return sorted(
            self.outcomes, key=lambda o: (getattr(o, key) is None, getattr(o, key) or 0.0)
        )

    def best(self, algorithm: str | None = None) -> Outcome | None:
        """The best candidate, or the best of one schedule; None where none reaches DDP's loss."""
        ranked = [o for o in self.ranked() if algorithm in (None, o.candidate.algorithm)]
        return ranked[0] if ranked and ranked[0].time_s is not None else None

    def at(self, algorithm: str, inner_steps: int | None, bits: int) -> Outcome | None:
        """The candidate at the scenario's own fragment count."""
        declared = SCHEDULES[algorithm]
        fragments = self.scenario.schedule.fragments if "fragments" in declared.reads else None
        wanted = Candidate(algorithm, inner_steps, bits, fragments)
        return next((o for o in self.outcomes if o.candidate == wanted), None)


def fleet_cost_per_hour(scenario: Scenario) -> float:
    return sum(island.cost_per_hour * island.replicas for island in scenario.islands)


def check_objective(objective: str, scenario: Scenario) -> None:
    if objective not in OBJECTIVES:
        raise UserError(f"--objective must be one of {', '.join(OBJECTIVES)} (got {objective!r})")
    if objective == "cost":
        free = [
            f"island.{i}.cost_per_hour"
            for i, island in enumerate(scenario.islands)
            if island.cost_per_hour <= 0
        ]
        if free:
            raise ScenarioError(
                scenario.source,
                free[0],
                "--objective cost needs every island's price per "
                f"worker-hour (> 0); {len(free)} of {len(scenario.islands)} islands have none",
            )


def candidates(
    scenario: Scenario,
    algorithms: Sequence[str],
    budget_steps: int,
    extra_h: dict[str, int],
    profile: QualityProfile | None = None,
) -> list[Candidate]:
    """Every (schedule, H, bits, P) to price: H from ``H_GRID`` below the budget plus the scenario's and
    ``extra_h[schedule]``; bits no wider than the model's values; P from ``FRAGMENTS_GRID`` and the
    scenario's, for a schedule that splits the model (the loader refuses what its rules do not
    allow: P dividing H, tau below H / P). A schedule that averages gradients
    (DDP) keeps the scenario's bits: the prior's reading of fewer bits as free is of outer gradients
    (Streaming DiLoCo's FP4 figure), not of every step's gradient. A schedule that ``profile`` measured
    keeps to the bits and fragment counts it was measured at, so that its candidates are priced alike."""
    native_bits = scenario.model.bytes_per_param * 8
    all_bits = [b for b in WIRE_BITS if b <= max(native_bits, min(WIRE_BITS))]
    found = []
    for algorithm in algorithms:
        if SCHEDULES[algorithm].exchanged == GRADIENT:
            found.append(Candidate(algorithm, None, scenario.schedule.bits))
            continue
        grid = {h for h in H_GRID if h <= budget_steps} | {scenario.schedule.inner_steps}
        grid |= {extra_h[algorithm]} if algorithm in extra_h else set()
        splits = "fragments" in SCHEDULES[algorithm].reads
        bits, counts = (
            all_bits,
            sorted(set(FRAGMENTS_GRID) | {scenario.schedule.fragments}) if splits else [None],
        )
        measured = (
            [p for p in profile.points if p.algorithm == algorithm] if profile is not None else []
        )
        if measured:
            bits = sorted({p.bits for p in measured}, reverse=True)
            counts = sorted({p.fragments for p in measured}) if splits else [None]
        found += [Candidate(algorithm, h, b, p) for h in sorted(grid) for b in bits for p in counts]
    return found


def price(
    source: ScenarioSource,
    candidate: Candidate,
    budget_steps: int,
    cost_per_hour: float,
    profile: QualityProfile | None,
    seeds: Sequence[int] = (),
) -> Outcome | str:
    """Simulate and price one candidate (its seconds per step and utilisation the means over
    ``seeds``, if given); the loader's one line where its rules refuse it."""
    try:
        scenario = source.variant(*candidate.overrides(budget_steps))
    except ScenarioError as error:
        return str(error)
    quality = estimate(scenario, candidate.algorithm, profile)
    factor = extra_tokens_factor(scenario.model.parameters, quality.relative_to_dp)
    unpriced = Outcome(
        candidate,
        None,
        None,
        quality.relative_to_dp,
        factor,
        None,
        None,
        quality.notes,
        measured=quality.measured,
    )
    steps = schedule_of(scenario).total_steps(scenario.schedule)
    runs = [scenario] if not seeds else [replace(scenario, seed=seed) for seed in seeds]
    s_per_step, utilisation = [], []
    for run in runs:
        try:
            summary = simulate(run, source.max_events).summary
        except BudgetExceeded as error:
            return replace(unpriced, cut_short=str(error))
        if not summary["complete"]:
            return replace(unpriced, cut_short=summary["incomplete_reason"])
        s_per_step.append(summary["wall_time_s"] / steps)
        utilisation.append(float(summary["compute_utilisation"]))
    mean_s = sum(s_per_step) / len(s_per_step)
    time_s = budget_steps * factor * mean_s if is_finite_number(factor) else None
    cost = time_s / S_PER_HOUR * cost_per_hour if time_s is not None and cost_per_hour > 0 else None
    return replace(
        unpriced,
        utilisation=sum(utilisation) / len(utilisation),
        s_per_step=mean_s,
        time_s=time_s,
        cost=cost,
    )


def same_shape(chosen: Sequence[Candidate]) -> list[tuple[Candidate, ...]]:
    """The candidates grouped by schedule, H and P (they differ in bits alone), in order of first
    appearance: a group is one task, whose runs place their exchanges alike and share that work
    (``simulator/fast/timeline.py``), and a process pool passes a third as many messages."""
    groups: dict[tuple, list[Candidate]] = {}
    for candidate in chosen:
        groups.setdefault(
            (candidate.algorithm, candidate.inner_steps, candidate.fragments), []
        ).append(candidate)
    return [tuple(group) for group in groups.values()]


def price_all(
    source: ScenarioSource,
    chosen: Sequence[Candidate],
    budget_steps: int,
    cost_per_hour: float,
    profile: QualityProfile | None,
    seeds: Sequence[int] = (),
) -> list[Outcome | str]:
    """``price`` of each of ``chosen``, in one task."""
    return [
        price(source, candidate, budget_steps, cost_per_hour, profile, seeds)
        for candidate in chosen
    ]


def make_objective_plan(
    source: ScenarioSource,
    objective: str,
    algorithms: Sequence[str],
    extra_h: dict[str, int] | None = None,
    profile: QualityProfile | None = None,
    seeds: Sequence[int] = (),
    executor: Executor | None = None,
    jobs: int | None = None,
    progress: Progress | None = None,
) -> ObjectivePlan:
    """Price every candidate (on ``executor``, or in parallel on ``jobs`` processes; each over ``seeds``
    if given) for ``objective``."""
    scenario = source.scenario
    check_objective(objective, scenario)
    budget_steps = schedule_of(scenario).total_steps(scenario.schedule)
    cost_per_hour = fleet_cost_per_hour(scenario)
    within, beyond = run_h(extra_h or {}, budget_steps)
    chosen = candidates(scenario, algorithms, budget_steps, within, profile)
    shapes = same_shape(chosen)
    priced = run_tasks(
        price_all,
        [(source, group, budget_steps, cost_per_hour, profile, tuple(seeds)) for group in shapes],
        weights=[len(group) for group in shapes],
        executor=executor,
        jobs=jobs,
        progress=progress,
    )
    found = {
        candidate: result
        for group, results in zip(shapes, priced)
        for candidate, result in zip(group, results)
    }
    results = [found[candidate] for candidate in chosen]
    plan = ObjectivePlan(
        scenario,
        objective,
        budget_steps,
        cost_per_hour,
        [],
        profile_scenario=profile.scenario if profile is not None else None,
    )
    refused: dict[str, list[str]] = {}
    for candidate, result in zip(chosen, results):
        if isinstance(result, Outcome):
            plan.outcomes.append(result)
        else:
            refused.setdefault(candidate.algorithm, []).append(f"{candidate.settings()}: {result}")
    plan.left_out = [
        *beyond,
        *(
            f"{len(lines)} {algorithm} candidates refused by its rules, e.g. at {lines[0]}"
            for algorithm, lines in refused.items()
        ),
    ]
    return plan


def run_h(extra_h: dict[str, int], budget_steps: int) -> tuple[dict[str, int], list[str]]:
    """The extra H that fit in the run's ``budget_steps`` inner steps, and a line for each one left
    out: an H above the run's steps would price more work than the run has (an interval never ended)."""
    within = {algorithm: h for algorithm, h in extra_h.items() if h <= budget_steps}
    beyond = [
        f"{algorithm} at H={h} (the utilisation plan's answer) not priced: above the run's "
        f"{budget_steps:,} inner steps"
        for algorithm, h in extra_h.items()
        if h > budget_steps
    ]
    return within, beyond


def outcome_to_dict(outcome: Outcome) -> dict[str, Any]:
    c = outcome.candidate
    return {
        "algorithm": c.algorithm,
        "inner_steps": c.inner_steps,
        "bits": c.bits,
        "fragments": c.fragments,
        "utilisation": outcome.utilisation,
        "s_per_inner_step": outcome.s_per_step,
        "loss_vs_ddp": outcome.relative_to_dp,
        "tokens_factor": outcome.tokens_factor if is_finite_number(outcome.tokens_factor) else None,
        "time_to_ddp_loss_s": outcome.time_s,
        "cost": outcome.cost,
        "loss_measured": outcome.measured,
        "notes": list(outcome.notes),
        "cut_short": outcome.cut_short,
    }


def objective_to_dict(plan: ObjectivePlan) -> dict[str, Any]:
    best = plan.best()
    return {
        "objective": plan.objective,
        "budget_inner_steps": plan.budget_steps,
        "fleet_cost_per_hour": plan.fleet_cost_per_hour,
        "best": None if best is None else outcome_to_dict(best),
        "candidates": [outcome_to_dict(o) for o in plan.ranked()],
        "left_out": plan.left_out,
    }
