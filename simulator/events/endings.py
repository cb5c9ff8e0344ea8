"""Why a run ended before its last outer step, in one line: the horizon, everyone gone, the event limit."""

from __future__ import annotations

from islands.scenarios import Scenario

from .. import budget
from ..fleet import Fleet
from .progress import Progress


def done_of(progress: Progress, scenario: Scenario) -> str:
    return budget.done_of(progress.completed_outer, scenario)


def everyone_gone_reason(
    progress: Progress, scenario: Scenario, fleet: Fleet, last_leave_s: float
) -> str:
    """Nothing is left to happen before the run's end: who left (a worker still waiting is a bug)."""
    waiting = [fleet.state_of[rank].worker.name for rank in sorted(fleet.running)]
    done = done_of(progress, scenario)
    if waiting:
        return (
            f"the run stalled at {progress.env.now:.4g} s after {done}: nothing was left to happen while "
            f"{', '.join(waiting)} still waited (a simulator bug: please report it)"
        )
    key = budget.churniest_key(scenario)
    advice = (
        f"raise {key} or give that island mttr_s" if key != "event" else "leave someone in the run"
    )
    gone = [state.worker.name for state in fleet.states if not state.present]
    if len(gone) < len(fleet.states):
        return (
            f"{', '.join(gone)} left by {last_leave_s:.4g} s and did not return, after {done} (a run counts "
            f"its laggard's): {advice}"
        )
    return f"every worker had left by {last_leave_s:.4g} s and none returns, after {done}: {advice}"


def event_limit_error(
    progress: Progress, scenario: Scenario, max_events: float, estimated_events: float
) -> budget.BudgetExceeded:
    return budget.BudgetExceeded(
        scenario.source,
        "--max-events",
        f"the run passed the limit of {max_events:g} simulator events at "
        f"{progress.env.now:.4g} s with {done_of(progress, scenario)} done (estimated "
        f"{estimated_events:.3g}): raise --max-events",
    )
