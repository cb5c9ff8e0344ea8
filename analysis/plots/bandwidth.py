"""Bandwidth over time on one access link, one panel per schedule, each on its own time axis.

The schedules run the same work (``side_by_side.simulate_schedules``), so the panels' time axes end at
each schedule's wall time for that work: DDP a dense sawtooth (a transfer every step) over a long
axis, DiLoCo one spike per outer interval, Streaming DiLoCo many small transfers spread over the
interval while compute goes on. Each panel's legend says its inner steps and wall time.
"""

from __future__ import annotations

from collections.abc import Mapping

from matplotlib.figure import Figure

from islands.errors import UserError
from islands.scenarios import Scenario
from islands.simulator import SimResult
from islands.tables import duration

from ..display_units import rate_text, rate_unit, time_unit
from ..link_rates import rate_steps
from .style import DEFAULT_SIZE_PX, new_figure, schedule_colour, schedule_label

DIRECTIONS = ("up", "down")
HEADROOM = 1.35  # room above the tallest transfer for the legend


def check_link(scenario: Scenario, worker: int, direction: str) -> None:
    if not 0 <= worker < scenario.worker_count:
        raise UserError(
            f"--worker {worker}: the scenario has workers 0 to {scenario.worker_count - 1}"
        )
    if direction not in DIRECTIONS:
        raise UserError(f"--direction {direction}: must be one of {', '.join(DIRECTIONS)}")


def bandwidth_figure(
    results: Mapping[str, SimResult],
    scenario: Scenario,
    worker: int = 0,
    direction: str = "up",
    size_px: tuple[int, int] = DEFAULT_SIZE_PX,
) -> Figure:
    """Stacked panels, one per schedule in ``results``, of one worker's link rate over time; each
    panel's time axis spans its own run, in its own unit, and the rate axis is shared."""
    check_link(scenario, worker, direction)
    steps = {name: rate_steps(result.links, worker, direction) for name, result in results.items()}
    peak = max((levels.max() for _, levels in steps.values()), default=0.0) or 1.0
    rate_name, rate_scale = rate_unit(peak)
    figure = new_figure(size_px)
    axes = figure.subplots(len(results), 1, sharey=True, squeeze=False)[:, 0]
    worker_name = scenario.workers()[worker].name
    for ax, (name, (times, levels)) in zip(axes, steps.items()):
        summary = results[name].summary
        span_s = summary["wall_time_s"]
        time_name, time_scale = time_unit(span_s)
        colour = schedule_colour(name)
        label = (
            f"{schedule_label(name)}: {int(summary['inner_steps']):,} inner steps in "
            f"{duration(span_s)}, {summary['syncs']:,} all-reduces, "
            f"average {rate_text(summary['avg_bandwidth_gbps'])}"
        )
        ax.fill_between(
            times / time_scale,
            levels / rate_scale,
            step="post",
            color=colour,
            alpha=0.35,
            linewidth=0,
        )
        ax.step(
            times / time_scale,
            levels / rate_scale,
            where="post",
            color=colour,
            linewidth=0.8,
            label=label,
        )
        ax.set_ylabel(f"rate ({rate_name})")
        ax.set_ylim(0, peak * HEADROOM / rate_scale)
        ax.set_xlim(0, span_s / time_scale)
        ax.set_xlabel(f"time since start ({time_name})")
        ax.legend(loc="upper right")
        ax.grid(alpha=0.3)
    figure.suptitle(
        f"{scenario.name}: {direction}link of worker {worker_name}, rate over time "
        f"(each schedule's own time axis)"
    )
    return figure
