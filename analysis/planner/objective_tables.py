"""The loss-aware plan as text: the best candidate of each schedule beside the utilisation plan's
answer, and one sentence on why they differ."""

from __future__ import annotations

from islands.numbers import is_finite_number
from islands.schedules import SCHEDULES
from islands.tables import CUT_SHORT, duration

from ..display_units import percent_text as percent
from .objective import ObjectivePlan, Outcome
from .plan_tables import Table

OBJECTIVE_WORDS = {"time-to-loss": "soonest", "cost": "most cheaply"}


def label(outcome: Outcome) -> str:
    return f"{SCHEDULES[outcome.candidate.algorithm].label} {outcome.candidate.settings()}"


def tokens_text(factor: float) -> str:
    return "never" if not is_finite_number(factor) else f"x{factor:.3f}"


def time_text(outcome: Outcome) -> str:
    if outcome.cut_short is not None:
        return CUT_SHORT
    return "never" if outcome.time_s is None else duration(outcome.time_s)


def cost_text(outcome: Outcome) -> str:
    """Whole units from 100 up (12,345), else three significant digits (12.3, 0.00125): never 0 for a
    cost that is not."""
    if outcome.cost is None:
        return "-"
    return f"{outcome.cost:,.0f}" if outcome.cost >= 100 else f"{outcome.cost:.3g}"


def planned(plan: ObjectivePlan, utilisation_h: dict[str, int]) -> list[Outcome]:
    """Each schedule's answer of the utilisation plan (its smallest H for the target) at the scenario's
    own precision and fragments, where it was priced."""
    found = [plan.at(a, h, plan.scenario.schedule.bits) for a, h in utilisation_h.items()]
    return [o for o in found if o is not None]


def shown(plan: ObjectivePlan, utilisation_h: dict[str, int]) -> list[Outcome]:
    """The best candidate of each schedule, and the utilisation plan's answers, in the objective's order."""
    picked = [plan.best(a) for a in dict.fromkeys(o.candidate.algorithm for o in plan.outcomes)]
    picked += planned(plan, utilisation_h)
    unique = list(dict.fromkeys(o for o in picked if o is not None))
    order = {o: i for i, o in enumerate(plan.ranked())}
    return sorted(unique, key=order.__getitem__)


def objective_table(plan: ObjectivePlan, utilisation_h: dict[str, int]) -> Table:
    header = [
        "candidate",
        "utilisation",
        "loss vs DDP",
        "tokens to DDP's loss",
        "time to DDP's loss",
    ]
    if plan.fleet_cost_per_hour > 0:
        header.append("cost")
    rows, answers = [], planned(plan, utilisation_h)
    for outcome in shown(plan, utilisation_h):
        mark = " (utilisation plan)" if outcome in answers else ""
        row = [
            label(outcome) + mark,
            percent(outcome.utilisation) if outcome.cut_short is None else CUT_SHORT,
            f"{100 * outcome.relative_to_dp:+.2f}%",
            tokens_text(outcome.tokens_factor),
            time_text(outcome),
        ]
        if plan.fleet_cost_per_hour > 0:
            row.append(cost_text(outcome))
        rows.append(row)
    notes = [
        f"DDP's loss: what DDP reaches in the scenario's {plan.budget_steps:,} inner steps; each candidate "
        "was simulated for as many, and needs its tokens factor times as many to get there."
    ]
    if plan.profile_scenario is not None:
        measured = sorted({o.candidate.algorithm for o in plan.outcomes if o.measured})
        notes.append(
            f"Loss from the profile measured on {plan.profile_scenario}'s model for "
            f"{', '.join(measured) or 'no schedule here'} (its bits and fragments only); "
            "from the published tables for the others."
        )
    if plan.fleet_cost_per_hour > 0:
        notes.append(
            f"cost: time x the fleet's {plan.fleet_cost_per_hour:,.4g} per hour "
            "(island.cost_per_hour x replicas)."
        )
    best = plan.best()
    if best is not None:
        notes += [f"{label(best)}: {note}" for note in best.notes]
    notes += plan.left_out
    word = OBJECTIVE_WORDS.get(plan.objective, "")
    return Table(
        f"Reaching DDP's loss {word}: {len(plan.outcomes)} candidates (schedule x H x wire precision x P) "
        "priced by the simulator and the loss model",
        header,
        rows,
        notes,
    )


def why(plan: ObjectivePlan, utilisation_h: dict[str, int]) -> str:
    """Why the objective's answer differs from the utilisation plan's (or that it does not)."""
    best = plan.best()
    if best is None:
        return "No candidate reaches DDP's loss: every run was cut short or needs unbounded tokens."
    c = best.candidate
    said = (
        f"{plan.objective}: {label(best)} reaches DDP's loss {OBJECTIVE_WORDS[plan.objective]}, in "
        f"{time_text(best)} ({percent(best.utilisation)} utilisation, {tokens_text(best.tokens_factor)} tokens)"
    )
    if best.cost is not None:
        said += f" for {cost_text(best)}"
    target_h = utilisation_h.get(c.algorithm)
    other = (
        plan.at(c.algorithm, target_h, plan.scenario.schedule.bits)
        if target_h is not None
        else None
    )
    if other is None or other is best:
        return said + "."
    return (
        f"{said}. The utilisation plan's {label(other)} computes {percent(other.utilisation)} of the time but "
        f"needs {tokens_text(other.tokens_factor)} tokens ({100 * other.relative_to_dp:+.2f}% loss at equal "
        f"tokens): {time_text(other)}."
    )
