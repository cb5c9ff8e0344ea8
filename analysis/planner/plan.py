"""The planner: the questions users bring, each answered by a search over the simulator.

For a target compute utilisation it finds

* the least bandwidth per island (every island's access link at the same rate) that reaches it under
  every schedule at the scenario's H, P and tau, for a row of targets;
* the smallest H that reaches it at the scenario's own bandwidth (DiLoCo, Streaming);
* the fragment count P and wire precision that need the least peak bandwidth at the scenario's H
  and tau. In the simulator a link runs at its full rate whenever a transfer is on it, so the peak
  bandwidth a schedule needs is the link rate it needs: the same search, over (P, bits);
* for a top-k scenario (``schedule.compression = "topk"``), at each density (``schedule.topk`` of
  ``schedule.chunk_values``) the least bandwidth at the scenario's H and the smallest H at its
  bandwidth, under its own schedule; and where gathering its payloads stops beating a dense ring as
  the workers grow (``crossover``, a closed form priced at every M, not a search).

    >>> from islands.analysis.planner.plan import make_utilisation_plan
    >>> plan = make_utilisation_plan("worked-example", target=0.95)
    >>> plan.bandwidth["diloco"][0.95].value      # Gbit/s per island, about 7.09
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from islands.errors import UserError
from islands.scenarios import Scenario, ScenarioSource, as_source
from islands.scenarios.source import syncer_placement, syncer_region
from islands.scenarios.spec import WIRE_BITS
from islands.schedules import SCHEDULES, Streaming, switch_to
from islands.schedules.compression import VALUE_BITS, TopK, whole_values
from islands.simulator import DEFAULT_MAX_EVENTS, guard

from ..parallel import Progress, run_tasks
from .crossover import Crossover, crossover_to_dict, gather_crossover
from .search import (
    RELATIVE_TOLERANCE,
    Answer,
    Measurement,
    bandwidth_curve,
    least_bandwidth,
    least_inner_steps,
    measure,
    remembering,
    rises,
)

DEFAULT_TARGETS = (0.5, 0.75, 0.9, 0.95, 0.99)
H_SCHEDULES = tuple(name for name, schedule in SCHEDULES.items() if "inner_steps" in schedule.reads)
MAX_FRAGMENTS = 64
MAX_SEEDS = (
    100  # seeds per point of every search: beyond, a plan takes hours for a mean already steady
)
# The densities a top-k plan searches by default: k = chunk_values / 4 down to chunk_values / 256 (25%
# to 0.39%: SparseLoCo's 1-3% among them), and the scenario's own k.
DEFAULT_DENSITY_DIVISORS = (4, 8, 16, 32, 64, 128, 256)


@dataclass(frozen=True)
class Question:
    """One task of the pool, and the keys its results are filed under. ``schedule`` (``subject``: its
    name): its utilisation as the scenario stands (``now``), the least bandwidth for each of
    ``targets`` on its curve, which the targets' searches share, and, with ``inner_steps``, the
    smallest H for ``target``; ``fragments`` (``subject``: P): the least bandwidth Streaming DiLoCo
    needs for ``target`` at each wire precision of ``bits``."""

    kind: str
    subject: str | int
    target: float
    targets: tuple[float, ...] = ()
    seeds: tuple[int, ...] = ()
    inner_steps: bool = False
    bits: tuple[int, ...] = ()

    @property
    def overrides(self) -> tuple[str, ...]:
        if self.kind == "fragments":
            return (*switch_to(Streaming.name), f"schedule.fragments={self.subject}")
        if self.kind == "density":
            return (f"schedule.topk={self.subject}",)
        assert isinstance(self.subject, str), (
            "a schedule's question is about its algorithm, by name"
        )
        return switch_to(self.subject)

    @property
    def keys(self) -> list[tuple]:
        if self.kind == "fragments":
            return [("fragments", self.subject, width) for width in self.bits]
        if self.kind == "density":
            return [("density_bandwidth", self.subject), ("density_inner_steps", self.subject)]
        keys = [
            ("now", self.subject),
            *(("bandwidth", self.subject, goal) for goal in self.targets),
        ]
        return keys + [("inner_steps", self.subject)] if self.inner_steps else keys


def answer(
    source: ScenarioSource, question: Question
) -> tuple[Sequence[Answer | Measurement], int]:
    """Run one task's searches: results in the order of its ``keys``, and the runs simulated. The task
    remembers its runs by scenario (``search.remembering``), so a search's run at the scenario as it
    stands costs nothing after ``now``."""
    with remembering() as runs:
        return searches(source, question), len(runs)


def searches(source: ScenarioSource, question: Question) -> Sequence[Answer | Measurement]:
    overrides, seeds = (*question.overrides, *placement(source, question)), question.seeds
    if question.kind == "fragments":
        return precision_row(source, question.target, overrides, question.bits, seeds)
    if question.kind == "density":
        return [
            least_bandwidth(source, question.target, *overrides, seeds=seeds),
            least_inner_steps(source, question.target, *overrides, seeds=seeds),
        ]
    curve = bandwidth_curve(source, *overrides, seeds=seeds)
    found: list[Answer | Measurement] = [measure(source, *overrides, seeds=seeds)]
    row = [
        least_bandwidth(source, goal, *overrides, seeds=seeds, curve=curve)
        for goal in question.targets
    ]
    found += [
        replace(answer, monotone=rises(curve.seen)) for answer in row
    ]  # judged on every run of the curve
    if question.inner_steps:
        found.append(least_inner_steps(source, question.target, *overrides, seeds=seeds))
    return found


def precision_row(
    source: ScenarioSource,
    target: float,
    overrides: tuple[str, ...],
    bits: tuple[int, ...],
    seeds: tuple[int, ...],
) -> list[Answer]:
    """The least bandwidth at each wire precision, widest first, each search warm-started from the
    previous answer scaled by the payload: where transfers bound the run, the bandwidth needed is in
    proportion to the bytes moved."""
    answers: list[Answer] = []
    for width in bits:
        previous = answers[-1] if answers else None
        guess = (
            previous.value * width / bits[len(answers) - 1] if previous and previous.value else None
        )
        answers.append(
            least_bandwidth(
                source, target, *overrides, f"schedule.bits={width}", seeds=seeds, guess=guess
            )
        )
    return answers


@dataclass
class Plan:
    scenario: Scenario
    target: float
    targets: tuple[float, ...]
    seeds: int  # utilisations are means over this many seeds
    now: dict[str, float | None]  # utilisation per schedule as the scenario stands
    bandwidth: dict[str, dict[float, Answer]]  # schedule -> target -> least Gbit/s per island
    inner_steps: dict[str, Answer]  # schedule -> smallest H at the scenario's bandwidth
    fragments: dict[tuple[int, int], Answer] = field(
        default_factory=dict
    )  # (P, bits) -> least Gbit/s
    now_cut_short: dict[str, str] = field(
        default_factory=dict
    )  # schedule -> why its run has no utilisation
    left_out: list[str] = field(
        default_factory=list
    )  # one line per schedule the scenario cannot run
    runs: int = 0  # runs simulated (each seed's; none remembered twice)
    density_bandwidth: dict[int, Answer] = field(
        default_factory=dict
    )  # k -> least Gbit/s at the scenario's H
    density_inner_steps: dict[int, Answer] = field(
        default_factory=dict
    )  # k -> smallest H at the scenario's bandwidth
    crossover: Crossover | None = None  # where gathering stops beating a dense ring (top-k only)

    def best_fragments(self) -> tuple[int, int] | None:
        """(P, bits) needing the least bandwidth; among near-ties (within the search's precision) the
        one with more bits, then fewer fragments: the least lossy, least fragmented choice."""
        reached = {key: a.value for key, a in self.fragments.items() if a.value is not None}
        if not reached:
            return None
        least = min(reached.values())
        close = [
            key for key, value in reached.items() if value <= least * (1 + 2 * RELATIVE_TOLERANCE)
        ]
        return min(close, key=lambda key: (-key[1], key[0]))


def seed_range(scenario: Scenario, seeds: int) -> tuple[int, ...]:
    """``seeds`` seeds from the scenario's own; none (its own seed alone) for one."""
    return tuple(range(scenario.seed, scenario.seed + seeds)) if seeds > 1 else ()


def check_target(target: float) -> float:
    if not 0 < target <= 1:
        raise UserError(f"target utilisation must be in (0, 1], e.g. 0.95 for 95% (got {target:g})")
    return target


def fragment_candidates(scenario: Scenario) -> list[tuple[int, int]]:
    """(P, bits) pairs a streaming schedule at the scenario's H and tau can take: P divides H with
    tau < H / P (P <= ``MAX_FRAGMENTS``, and at most ``model.layers``: fragments are layer groups),
    bits no wider than the model's own values (a top-k payload's values also at 2 and 1 bits)."""
    h, tau = scenario.schedule.inner_steps, scenario.schedule.overlap_steps
    native_bits = scenario.model.bytes_per_param * 8
    formats = WIRE_BITS if TopK.of(scenario.schedule) is None else VALUE_BITS
    bits = [b for b in formats if b <= max(native_bits, min(WIRE_BITS))]
    most = min(h, MAX_FRAGMENTS, scenario.model.layers or MAX_FRAGMENTS)
    counts = [p for p in range(1, most + 1) if h % p == 0 and tau < h // p]
    return [(p, b) for p in counts for b in bits]


def check_density(density: float) -> float:
    if not 0 < density <= 1:
        raise UserError(
            f"--densities: each must be in (0, 1], e.g. 0.0156 for 64 of 4096 values (got {density:g})"
        )
    return density


def density_candidates(scenario: Scenario, densities: Sequence[float] | None) -> list[int]:
    """The k (values kept of each chunk) a top-k plan searches: each density of ``densities`` times
    chunk_values, rounded, at least 1 (default: chunk_values / ``DEFAULT_DENSITY_DIVISORS``), and the
    scenario's own k; none for a dense scenario (``densities`` given for one is refused)."""
    schedule = scenario.schedule
    if TopK.of(schedule) is None:
        if densities is not None:
            raise UserError(
                f"--densities searches the top-k density: {scenario.name} exchanges dense payloads "
                '(schedule.compression = "none"; --set schedule.compression=topk)'
            )
        return []
    chunk = schedule.chunk_values
    fractions = (
        [1 / divisor for divisor in DEFAULT_DENSITY_DIVISORS]
        if densities is None
        else [check_density(density) for density in densities]
    )
    return sorted({max(1, round(fraction * chunk)) for fraction in fractions} | {schedule.topk})


def placement(source: ScenarioSource, question: Question) -> tuple[str, ...]:
    """Where a schedule's syncer goes when the scenario has regions but gives it no place: where the
    comparisons place it (``syncer_region``), so the plan's runs are the ones its notes describe."""
    if question.kind != "schedule" or not isinstance(question.subject, str):
        return ()
    return syncer_placement(syncer_region(source.scenario, question.subject))


def questions(
    scenario: Scenario,
    algorithms: Sequence[str],
    target: float,
    targets: Sequence[float],
    fragments: bool,
    seeds: tuple[int, ...],
    densities: Sequence[int] = (),
) -> list[Question]:
    """Every task the plan needs for ``algorithms`` (and for each k of ``densities``)."""
    found = [
        Question(
            "schedule",
            algorithm,
            target,
            tuple(targets),
            seeds,
            inner_steps=algorithm in H_SCHEDULES,
        )
        for algorithm in algorithms
    ]
    if fragments:
        candidates = fragment_candidates(scenario)
        for p in dict.fromkeys(p for p, _ in candidates):
            widths = tuple(sorted((b for q, b in candidates if q == p), reverse=True))
            found.append(Question("fragments", p, target, seeds=seeds, bits=widths))
    return found + [Question("density", k, target, seeds=seeds) for k in densities]


def make_utilisation_plan(
    scenario: str | Path | ScenarioSource,
    target: float = 0.95,
    targets: Sequence[float] = DEFAULT_TARGETS,
    overrides: Sequence[str] = (),
    fragments: bool = True,
    seeds: int = 1,
    executor: Executor | None = None,
    jobs: int | None = None,
    progress: Progress | None = None,
    max_events: float = DEFAULT_MAX_EVENTS,
    densities: Sequence[float] | None = None,
) -> Plan:
    """Answer the planning questions for ``target`` (and the bandwidth row for each of ``targets``).

    The searches are independent and run on ``executor`` or a local pool of ``jobs`` processes;
    ``progress(done, total)`` counts searches. ``fragments=False`` skips the (P, bits) table.
    ``seeds`` > 1 averages every utilisation over that many seeds from the scenario's own (for
    scenarios with jitter or churn, where one seed's answer is one draw). ``max_events`` is the
    simulator's resource guard for every run. A run cut short by churn never counts as reaching a
    target; the schedules whose own run was cut short have no utilisation "now" (``now_cut_short``).
    A top-k scenario's plan also searches its densities (fractions of chunk_values, ``densities``;
    default ``DEFAULT_DENSITY_DIVISORS``) and prices where gathering stops beating a dense ring.
    """
    source = replace(as_source(scenario, overrides), max_events=max_events)
    check_target(target)
    goals = tuple(sorted({check_target(t) for t in targets} | {target}))
    if not 1 <= seeds <= MAX_SEEDS:
        raise UserError(
            f"--seeds must be in [1, {MAX_SEEDS}] (got {seeds}): every search runs each point that "
            "many times"
        )
    variants = source.schedules()
    for variant in variants.scenarios.values():  # fail here, in one line, not in a worker
        guard(variant, max_events)
    base, algorithms = source.scenario, tuple(variants.scenarios)
    kept = density_candidates(base, densities)
    seed_list = seed_range(base, seeds)
    asked = questions(
        base,
        algorithms,
        target,
        goals,
        fragments and Streaming.name in algorithms,
        seed_list,
        kept,
    )
    answers = run_tasks(
        answer, [(source, q) for q in asked], executor=executor, jobs=jobs, progress=progress
    )
    found = {
        key: result
        for question, (row, _) in zip(asked, answers)
        for key, result in zip(question.keys, row)
    }
    now = {a: found[("now", a)] for a in algorithms}
    plan = Plan(
        scenario=base,
        target=target,
        targets=goals,
        seeds=seeds,
        now={a: measured.utilisation for a, measured in now.items()},
        now_cut_short={
            a: measured.incomplete_reason
            for a, measured in now.items()
            if measured.incomplete_reason
        },
        bandwidth={a: {} for a in algorithms},
        inner_steps={},
        left_out=variants.notes(),
        runs=sum(simulated for _, simulated in answers),
        crossover=gather_crossover(base),
    )
    for (kind, *key), result in found.items():
        if kind == "bandwidth":
            plan.bandwidth[key[0]][key[1]] = result
        elif kind == "inner_steps":
            plan.inner_steps[key[0]] = result
        elif kind == "fragments":
            plan.fragments[(key[0], key[1])] = result
        elif kind == "density_bandwidth":
            plan.density_bandwidth[key[0]] = result
        elif kind == "density_inner_steps":
            plan.density_inner_steps[key[0]] = result
    return plan


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    """The plan as plain data (for ``islands plan --json``)."""

    def entry(found: Answer) -> dict[str, Any]:
        return {
            "value": found.value,
            "utilisation": found.utilisation,
            "tried": found.tried,
            "runs": found.runs,
            "cut_short_runs": found.cut_short,
            "monotone": found.monotone,
        }

    best = plan.best_fragments()
    return {
        "scenario": plan.scenario.name,
        "target_utilisation": plan.target,
        "seeds": plan.seeds,
        "utilisation_now": plan.now,
        "utilisation_now_cut_short": plan.now_cut_short,
        "bandwidth_gbps": {
            a: {f"{t:g}": entry(found) for t, found in row.items()}
            for a, row in plan.bandwidth.items()
        },
        "inner_steps": {a: entry(found) for a, found in plan.inner_steps.items()},
        "fragments_bits_gbps": [
            {"fragments": p, "bits": b, **entry(found)} for (p, b), found in plan.fragments.items()
        ],
        "best_fragments_bits": None if best is None else {"fragments": best[0], "bits": best[1]},
        "density": [
            {
                "topk": k,
                "chunk_values": plan.scenario.schedule.chunk_values,
                "density": k / plan.scenario.schedule.chunk_values,
                "payload_bytes": payload_of(plan.scenario, k),
                "bandwidth_gbps": entry(found),
                "inner_steps": entry(plan.density_inner_steps[k]),
            }
            for k, found in plan.density_bandwidth.items()
        ],
        "gather_crossover": None if plan.crossover is None else crossover_to_dict(plan.crossover),
        "runs": plan.runs,
        "schedules_left_out": plan.left_out,
    }


def payload_of(scenario: Scenario, topk: int) -> int:
    """Bytes of one top-k payload of the whole model at ``topk`` kept of each chunk."""
    schedule = scenario.schedule
    layout = TopK(schedule.chunk_values, topk, schedule.bits)
    return layout.payload_bytes(whole_values(scenario.model.parameters))
