"""A prediction beside a run made anywhere (``islands compare``), without running anything.

A run directory is what ``islands train --out DIR`` writes, wherever it ran (under torchrun on a GPU
cluster, over a real WAN, or ``islands validate``'s own ``run/``): ``summary.json``, ``run.json`` and
``trace.csv``. The scenario is simulated as given, or with each island's step time set to the run's
measured compute seconds per inner step (``measured_steps``), so that what is compared is the network
and the schedule rather than a guess of the accelerators' speed. The comparison is ``islands
validate``'s: every figure and every sync, predicted beside measured (``compare.compare``).

Work compared unequally is refused, one line naming the file and the mismatch: another algorithm,
another number of workers, of inner or outer steps, of wire bits or of fragments, and a run that
stopped short. The bytes each worker moved are a figure of their own: a scenario whose payload is not
the run's model shows it there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from islands.errors import UserError
from islands.numbers import is_non_negative_number, is_number
from islands.scenarios import Scenario
from islands.scenarios.spec import WIRE_BITS, shown_value
from islands.simulator import SimResult, simulate

from .compare import Comparison, compare
from .run_folder import RunRecord, read_run, required

COMPARED_COUNTS = (
    ("algorithm", "schedule.algorithm"),
    ("workers", "workers"),
    ("outer_steps", "schedule.outer_steps"),
    ("inner_steps", "inner steps per worker"),
)


def measured_step_overrides(
    summary: dict[str, Any], scenario: Scenario, source: str = "summary.json"
) -> list[str]:
    """Each island of the scenario given the run's mean compute seconds per inner step on the island of
    that name (``summary["islands"]``, as ``islands train`` and the simulator both write it)."""
    unlisted = UserError(
        f"{source}: 'islands' must list each island's name, compute_s and inner_steps"
    )
    try:
        measured = {
            island["name"]: (island["compute_s"], island["inner_steps"])
            for island in summary["islands"]
        }
    except (KeyError, TypeError):
        raise unlisted from None
    if not all(is_number(value) for pair in measured.values() for value in pair):
        raise unlisted
    for name, (compute_s, inner_steps) in measured.items():
        if not (is_non_negative_number(compute_s) and is_non_negative_number(inner_steps)):
            raise UserError(
                f"{source}: island '{name}': compute_s and inner_steps must be finite and 0 or more "
                f"(got {shown_value(compute_s)} and {shown_value(inner_steps)})"
            )
    overrides = []
    for index, island in enumerate(scenario.islands):
        if island.name not in measured:
            raise UserError(
                f"{source}: no island '{island.name}' in the run (it has "
                f"{', '.join(sorted(measured))}): --measured-steps needs the scenario's islands"
            )
        compute_s, inner_steps = measured[island.name]
        if inner_steps == 0 or compute_s == 0:
            raise UserError(
                f"{source}: island '{island.name}' ran {inner_steps:g} inner steps in {compute_s:g} s: "
                "no step time to measure; compare without --measured-steps"
            )
        overrides.append(f"island.{index}.step_time_s={compute_s / inner_steps!r}")
    return overrides


def fragments(trace: pd.DataFrame) -> list[int]:
    return sorted(int(f) for f in trace.loc[trace["kind"] == "comm", "fragment"].unique())


def check_comparable(scenario: Scenario, predicted: SimResult, run: RunRecord) -> None:
    """Refuse, in one line, a run that did other work than the scenario prices, or stopped short."""
    summary_path = run.directory / "summary.json"
    if not required(run.summary, "complete", summary_path):
        reason = run.summary.get("incomplete_reason") or "no reason recorded"
        shown = reason if isinstance(reason, str) and reason.isprintable() else shown_value(reason)
        raise UserError(f"{summary_path}: the run stopped short ({shown}): compare a finished run")
    if not predicted.summary["complete"]:
        raise UserError(
            f"{scenario.source}: the prediction stopped short ({predicted.summary['incomplete_reason']}): "
            "nothing to compare a finished run with"
        )
    for key, name in COMPARED_COUNTS:
        ran, priced = required(run.summary, key, summary_path), predicted.summary[key]
        if ran != priced:
            raise UserError(
                f"{summary_path}: {key} is {shown_value(ran)}, the scenario's {name} gives {priced}: "
                "compare a run of the same work (--set the scenario's keys to the run's)"
            )
    run_path = run.directory / "run.json"
    bits = required(run.run_info, "bits", run_path)
    if bits != scenario.schedule.bits:
        hint = f": --set schedule.bits={bits}" if bits in WIRE_BITS else ""
        raise UserError(
            f"{run_path}: bits is {shown_value(bits)}, the scenario's schedule.bits is "
            f"{scenario.schedule.bits}{hint}"
        )
    ran_fragments, priced_fragments = fragments(run.trace), fragments(predicted.trace)
    if ran_fragments != priced_fragments:
        raise UserError(
            f"{run.directory / 'trace.csv'}: the run exchanged fragments {ran_fragments}, the "
            f"scenario {priced_fragments}: --set schedule.fragments={len(ran_fragments)}"
        )


@dataclass(frozen=True)
class RunComparison:
    comparison: Comparison
    predicted: SimResult
    run: RunRecord
    overrides: list[str]  # what --measured-steps added to the scenario


def compare_run(
    load_scenario: Callable[[list[str]], Scenario], run_dir: Path, measured_steps: bool
) -> RunComparison:
    """Simulate the scenario (``load_scenario(extra overrides)``) and compare it with the run in
    ``run_dir``; refuse a run of other work."""
    run = read_run(run_dir)
    scenario = load_scenario([])
    overrides = []
    if measured_steps:
        summary_path = run_dir / "summary.json"
        required(run.summary, "islands", summary_path)
        overrides = measured_step_overrides(run.summary, scenario, str(summary_path))
        scenario = load_scenario(overrides)
    predicted = simulate(scenario)
    check_comparable(scenario, predicted, run)
    compute = (
        "the run's measured seconds per inner step"
        if measured_steps
        else "the scenario's step times (--measured-steps gives each island the run's)"
    )
    notes = [
        f"run: {run_dir}, scenario '{run.run_info.get('scenario', 'not recorded')}' on "
        f"{run.run_info.get('device', 'a device not recorded')}",
        f"compute: {compute}",
    ]
    comparison = compare(
        scenario.name, predicted.summary, predicted.trace, run.summary, run.trace, None, notes
    )
    return RunComparison(comparison, predicted, run, overrides)
