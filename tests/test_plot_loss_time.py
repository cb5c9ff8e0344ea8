"""Predicted loss against wall-clock time: each run consumes its stated tokens (or 20 N, said so),
its loss (1 + p) L(N, D)."""

from __future__ import annotations

import pytest
from helpers.scenarios import make_scenario

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
    summaries = {
        "ddp": {"complete": True, "wall_time_s": 5000.0},
        "diloco": {"complete": True, "wall_time_s": 1000.0},
        "streaming": {"complete": False, "wall_time_s": 10.0},
    }
    for summary in summaries.values():
        summary["inner_steps"] = 1000
    axes = loss_time_figure(summaries, scenario).axes[0]
    labels = [line.get_label() for line in axes.get_lines()]
    assert labels[0].startswith("DDP (+0.00% loss)") and labels[1].startswith("DiLoCo (+")
    assert not any("Streaming" in label for label in labels)
    assert "DDP's loss at the end of its run" in labels


# A 70B run over two datacentres, DiLoCo M = 2, H = 100: 4e6 tokens per worker per step, 2,000 inner
# steps per worker, 2 workers = 1.6e10 tokens, DiLoCo in 2.93 h; DDP over the WAN in 32 days.
TWO_DATACENTRES = [
    "model.parameters=70e9",
    "model.tokens_per_step=4e6",
    "island.0.replicas=2",
    "schedule.outer_steps=20",
]
WALL_S = {"ddp": 32 * 86400.0, "diloco": 2.93 * 3600}


def test_the_70b_two_datacentre_plot_uses_the_stated_tokens_on_a_log_time_axis():
    scenario = make_scenario(TWO_DATACENTRES)
    summaries = {
        name: {"complete": True, "wall_time_s": wall_s, "inner_steps": 2000}
        for name, wall_s in WALL_S.items()
    }
    axes = loss_time_figure(summaries, scenario).axes[0]
    assert axes.get_xscale() == "log" and "1.6e+10 tokens" in axes.get_title()
    tokens = 4e6 * 2000 * 2
    assert tokens == 1.6e10  # 20 N would be 1.4e12, 87x more
    ddp, diloco = (
        line
        for line in axes.get_lines()
        if not line.get_linestyle() == "--" and not line.get_label().startswith("DDP's loss")
    )
    # time in days (the longest span: 3 x 32 days); the curve ends at its wall time with the loss of
    # (1 + p) L(N, 1.6e10), and starts at a tenth of it with the loss of a tenth of the tokens
    p = estimate(scenario, "diloco").relative_to_dp
    assert p > 0
    assert diloco.get_xdata()[-1] == pytest.approx(2.93 / 24)
    assert diloco.get_ydata()[-1] == pytest.approx((1 + p) * chinchilla_loss(70e9, 1.6e10))
    assert diloco.get_xdata()[0] == pytest.approx(0.293 / 24)
    assert diloco.get_ydata()[0] == pytest.approx((1 + p) * chinchilla_loss(70e9, 1.6e9))
    assert ddp.get_xdata()[-1] == pytest.approx(32)
    assert ddp.get_ydata()[-1] == pytest.approx(chinchilla_loss(70e9, 1.6e10))
    target = next(
        line for line in axes.get_lines() if line.get_label() == "DDP's loss at the end of its run"
    )
    assert target.get_ydata()[0] == pytest.approx(chinchilla_loss(70e9, 1.6e10))
    # dashed: DiLoCo on at the same pace until DDP's final loss, D' / D of DDP's 1.6e10 tokens later
    dashed = next(line for line in axes.get_lines() if line.get_linestyle() == "--")
    factor = extra_tokens_factor(70e9, p, 1.6e10)
    assert dashed.get_xdata()[-1] == pytest.approx(2.93 / 24 * factor)
    assert dashed.get_ydata()[-1] == pytest.approx(chinchilla_loss(70e9, 1.6e10))


def test_without_tokens_per_step_the_plot_says_it_assumes_20_n():
    scenario = make_scenario(["model.parameters=70e9", "island.0.replicas=2"])
    summaries = {"diloco": {"complete": True, "wall_time_s": 3600.0, "inner_steps": 300}}
    axes = loss_time_figure(summaries, scenario).axes[0]
    assert "assumed 20 N tokens: the scenario gives no model.tokens_per_step" in axes.get_title()
    p = estimate(scenario, "diloco").relative_to_dp
    solid = axes.get_lines()[0]
    assert solid.get_ydata()[-1] == pytest.approx((1 + p) * chinchilla_loss(70e9, 20 * 70e9))
