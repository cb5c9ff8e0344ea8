"""Predicted loss against wall-clock time, one curve per schedule: where a faster schedule that loses
a little per token overtakes a slower exact one, and how long each takes to DDP's final loss.

Each schedule's run (``side_by_side.simulate_schedules``: equal inner steps) is taken as the Chinchilla-
optimal D = 20 N tokens, consumed evenly over its wall time; its loss at the tokens D(t) seen by time t
is (1 + p) L(N, D(t)), Hoffmann et al.'s L(N, D) and p the schedule's loss against DDP at equal tokens
(``loss_prior.estimate``). A schedule with p > 0 is drawn on past its run, dashed, at the same pace,
until it reaches DDP's final loss (its tokens factor times its wall time) or ``MAX_EXTENSION`` times
its run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from islands.numbers import is_finite_number
from islands.scenarios import Scenario

from ..display_units import time_unit
from ..quality.loss_prior import (
    CHINCHILLA_TOKENS_PER_PARAMETER,
    chinchilla_loss,
    estimate,
    extra_tokens_factor,
)
from .style import DEFAULT_SIZE_PX, new_figure, schedule_colour, schedule_label

FIRST_FRACTION = 0.1   # the curves start at a tenth of the run: L(N, D) has no meaning near D = 0
MAX_EXTENSION = 3.0
POINTS = 200


def loss_curve(scenario: Scenario, relative_to_dp: float, wall_s: float,
               last_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """(seconds, loss) from a tenth of the run to ``last_fraction`` of it."""
    parameters = scenario.model.parameters
    fractions = np.geomspace(FIRST_FRACTION, last_fraction, POINTS)
    tokens = CHINCHILLA_TOKENS_PER_PARAMETER * parameters * fractions
    losses = np.array([(1 + relative_to_dp) * chinchilla_loss(parameters, d) for d in tokens])
    return fractions * wall_s, losses


def loss_time_figure(summaries: Mapping[str, Mapping[str, Any]], scenario: Scenario,
                     size_px: tuple[int, int] = DEFAULT_SIZE_PX) -> Figure:
    """One curve per schedule whose run finished; DDP's final loss as a dotted line."""
    figure = new_figure(size_px)
    ax = figure.subplots()
    finished = {name: s for name, s in summaries.items() if s["complete"]}
    longest_s = max(MAX_EXTENSION * float(s["wall_time_s"]) for s in finished.values()) if finished else 1.0
    unit, seconds = time_unit(longest_s)
    target = chinchilla_loss(scenario.model.parameters, CHINCHILLA_TOKENS_PER_PARAMETER * scenario.model.parameters)
    for name, summary in finished.items():
        relative = estimate(scenario, name).relative_to_dp
        wall_s, colour = float(summary["wall_time_s"]), schedule_colour(name)
        factor = extra_tokens_factor(scenario.model.parameters, relative)
        reach = min(factor, MAX_EXTENSION) if is_finite_number(factor) else MAX_EXTENSION
        times, losses = loss_curve(scenario, relative, wall_s, max(1.0, reach))
        run, past = times <= wall_s, times >= wall_s
        ax.plot(times[run] / seconds, losses[run], color=colour,
                label=f"{schedule_label(name)} ({100 * relative:+.2f}% loss)")
        if factor > 1:
            ax.plot(times[past] / seconds, losses[past], color=colour, linestyle="--")
    ax.axhline(target, color="#555", linestyle=":", label="DDP's loss at the end of its run")
    ax.set_xlabel(f"wall-clock time ({unit})")
    ax.set_ylabel("predicted evaluation loss (Chinchilla's L(N, D), the papers' C4 set-up)")
    ax.set_title(f"{scenario.name}: predicted loss against wall-clock time (each run = 20 N tokens)")
    ax.legend()
    ax.grid(alpha=0.3)
    return figure
