"""Predicted loss against wall-clock time, one curve per schedule: where a faster schedule that loses
a little per token overtakes a slower exact one, and how long each takes to DDP's final loss.

Each schedule's run consumes its tokens evenly over its wall time: the scenario's own,
``model.tokens_per_step`` x inner steps per worker x workers, or, where the scenario gives no
``tokens_per_step``, the Chinchilla-optimal D = 20 N, and the plot says it assumed so. Its loss at
the tokens D(t) seen by time t is (1 + p) L(N, D(t)), Hoffmann et al.'s L(N, D) and p the schedule's
loss against DDP at equal tokens (``loss_prior.estimate``). A schedule with p > 0 is drawn on past
its run, dashed, at the same pace, until it reaches DDP's final loss (its tokens factor at DDP's
tokens times its wall time) or ``MAX_EXTENSION`` times its run. Time is on a log axis: the schedules'
wall times differ by orders of magnitude.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from islands.numbers import is_finite_number
from islands.scenarios import Scenario
from islands.schedules import DDP

from ..display_units import time_unit
from ..quality.loss_prior import (
    CHINCHILLA_TOKENS_PER_PARAMETER,
    chinchilla_loss,
    estimate,
    extra_tokens_factor,
)
from .style import DEFAULT_SIZE_PX, new_figure, schedule_colour, schedule_label

FIRST_FRACTION = 0.1  # the curves start at a tenth of the run: L(N, D) has no meaning near D = 0
MAX_EXTENSION = 3.0
POINTS = 200


def run_tokens(scenario: Scenario, summary: Mapping[str, Any]) -> float | None:
    """The tokens a run consumes, ``tokens_per_step`` x inner steps per worker x workers; None
    where the scenario does not say (the plot then assumes 20 N)."""
    per_step = scenario.model.tokens_per_step
    return per_step * int(summary["inner_steps"]) * scenario.worker_count if per_step else None


def loss_curve(
    scenario: Scenario,
    relative_to_dp: float,
    wall_s: float,
    last_fraction: float,
    tokens: float | None = None,
    first_fraction: float = FIRST_FRACTION,
) -> tuple[np.ndarray, np.ndarray]:
    """(seconds, loss) from ``first_fraction`` of the run (default a tenth) to ``last_fraction`` of
    it, the run consuming ``tokens`` (default 20 N) evenly over ``wall_s``."""
    parameters = scenario.model.parameters
    run = tokens or CHINCHILLA_TOKENS_PER_PARAMETER * parameters
    fractions = np.geomspace(first_fraction, last_fraction, POINTS)
    losses = np.array(
        [(1 + relative_to_dp) * chinchilla_loss(parameters, d) for d in run * fractions]
    )
    return fractions * wall_s, losses


def tokens_title(scenario: Scenario, tokens: float | None) -> str:
    """What the curves assume each run consumes, for the title."""
    if tokens is None:
        return "each run assumed 20 N tokens: the scenario gives no model.tokens_per_step"
    return (
        f"each run {tokens:.3g} tokens: model.tokens_per_step x inner steps x "
        f"{scenario.worker_count} workers"
    )


def loss_time_figure(
    summaries: Mapping[str, Mapping[str, Any]],
    scenario: Scenario,
    size_px: tuple[int, int] = DEFAULT_SIZE_PX,
) -> Figure:
    """One curve per schedule whose run finished, over its own tokens (``run_tokens``); DDP's final
    loss as a dotted line; time on a log axis."""
    figure = new_figure(size_px)
    ax = figure.subplots()
    parameters = scenario.model.parameters
    finished = {name: s for name, s in summaries.items() if s["complete"]}
    longest_s = (
        max(MAX_EXTENSION * float(s["wall_time_s"]) for s in finished.values()) if finished else 1.0
    )
    unit, seconds = time_unit(longest_s)
    reference = summaries.get(DDP.name) or next(iter(summaries.values()), None)
    ddp_tokens = run_tokens(scenario, reference) if reference else None
    target = chinchilla_loss(parameters, ddp_tokens or CHINCHILLA_TOKENS_PER_PARAMETER * parameters)
    for name, summary in finished.items():
        relative = estimate(scenario, name).relative_to_dp
        wall_s, colour = float(summary["wall_time_s"]), schedule_colour(name)
        factor = extra_tokens_factor(parameters, relative, ddp_tokens)
        reach = min(factor, MAX_EXTENSION) if is_finite_number(factor) else MAX_EXTENSION
        tokens = run_tokens(scenario, summary)
        times, losses = loss_curve(scenario, relative, wall_s, 1.0, tokens)
        ax.plot(
            times / seconds,
            losses,
            color=colour,
            label=f"{schedule_label(name)} ({100 * relative:+.2f}% loss)",
        )
        if factor > 1:
            times, losses = loss_curve(
                scenario, relative, wall_s, reach, tokens, first_fraction=1.0
            )
            ax.plot(times / seconds, losses, color=colour, linestyle="--")
    ax.axhline(target, color="#555", linestyle=":", label="DDP's loss at the end of its run")
    ax.set_xscale("log")
    ax.set_xlabel(f"wall-clock time ({unit}, log scale)")
    ax.set_ylabel("predicted evaluation loss (Chinchilla's L(N, D), the papers' C4 set-up)")
    ax.set_title(
        f"{scenario.name}: predicted loss against wall-clock time\n({tokens_title(scenario, ddp_tokens)})"
    )
    ax.legend()
    ax.grid(alpha=0.3, which="both")
    return figure
