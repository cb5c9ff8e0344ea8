"""Predicted loss against wall-clock time: each run is 20 N tokens, its loss (1 + p) L(N, D)."""

from __future__ import annotations

import pytest

from islands.analysis.plots.loss_time import loss_curve, loss_time_figure
from islands.analysis.quality.loss_prior import chinchilla_loss, estimate, extra_tokens_factor
from islands.scenarios import load

N = 10e9


def test_a_curve_ends_at_its_schedule_s_loss_and_reaches_ddp_s_at_its_tokens_factor():
    scenario = load("worked-example", ["schedule.inner_steps=3000"])
    relative = estimate(scenario, "diloco").relative_to_dp
    factor = extra_tokens_factor(N, relative)
    times, losses = loss_curve(scenario, relative, 1000.0, factor)
    ddp_final = chinchilla_loss(N, 20 * N)
    assert times[0] == pytest.approx(100.0) and times[-1] == pytest.approx(1000.0 * factor)
    assert losses[-1] == pytest.approx(ddp_final)  # DDP's loss, reached factor x later
    at_end = loss_curve(scenario, relative, 1000.0, 1.0)[1][-1]
    assert at_end == pytest.approx((1 + relative) * ddp_final)
    assert all(later < earlier for earlier, later in zip(losses, losses[1:]))


def test_the_figure_has_one_curve_per_finished_run_and_ddp_s_line():
    scenario = load("worked-example")
    summaries = {"ddp": {"complete": True, "wall_time_s": 5000.0}, "diloco": {"complete": True, "wall_time_s": 1000.0},
                 "streaming": {"complete": False, "wall_time_s": 10.0}}
    axes = loss_time_figure(summaries, scenario).axes[0]
    labels = [line.get_label() for line in axes.get_lines()]
    assert labels[0].startswith("DDP (+0.00% loss)") and labels[1].startswith("DiLoCo (+")
    assert not any("Streaming" in label for label in labels)
    assert "DDP's loss at the end of its run" in labels
