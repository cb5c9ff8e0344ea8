"""Plots: PNGs of the right size, and figures whose axes, labels and drawn values are the run's."""

from __future__ import annotations

import struct

import numpy as np
import pandas as pd
import pytest

from islands.analysis.link_rates import rate_steps
from islands.analysis.plots.bandwidth import bandwidth_figure
from islands.analysis.plots.breakdown import breakdown_figure
from islands.analysis.plots.heatmap import heatmap_figure
from islands.analysis.plots.style import parse_size, save_figure, save_png
from islands.analysis.plots.worker_timeline import timeline_figure
from islands.analysis.side_by_side import (
    equal_work_schedules,
    left_out_notes,
    simulate_schedules,
    work_line,
)
from islands.analysis.sweep.runner import run_sweep
from islands.cli import main
from islands.errors import UserError
from islands.scenarios import ScenarioSource
from islands.simulator import simulate

SIZE = (900, 600)


def png_size(path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk (bytes 16-24)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


@pytest.fixture(scope="module")
def source() -> ScenarioSource:
    return ScenarioSource.read("worked-example", ["schedule.outer_steps=2"])


@pytest.fixture(scope="module")
def results(source):
    return simulate_schedules(source)


def test_rate_steps_add_overlapping_segments():
    links = pd.DataFrame(
        {
            "time_start_s": [1.0, 2.0, 5.0],
            "time_end_s": [3.0, 4.0, 6.0],
            "worker": [0, 0, 0],
            "island": ["a"] * 3,
            "direction": ["up"] * 3,
            "rate_gbps": [1.0, 0.5, 2.0],
        }
    )
    times, levels = rate_steps(links, 0, "up")
    assert times.tolist() == [0, 1, 2, 3, 4, 5, 6]
    assert levels.tolist() == [0, 1.0, 1.5, 0.5, 0, 2.0, 0]


def test_schedules_are_compared_at_equal_work(results):
    # worked example at 2 outer steps of H = 500: DDP runs 1,000 steps, the others 2 intervals
    assert {name: r.summary["inner_steps"] for name, r in results.items()} == {
        "ddp": 1000,
        "diloco": 1000,
        "streaming": 1000,
        "eager": 1000,
        "decoupled": 1000,
    }
    assert results["ddp"].summary["wall_time_s"] == pytest.approx(1000 * (1.5 + 280))
    assert results["diloco"].summary["wall_time_s"] == pytest.approx(2 * (750 + 280))
    # eager: round 0's 10 fragments of 28 s each go out 75 s apart and overlap interval 1: no stall
    assert results["eager"].summary["wall_time_s"] == pytest.approx(2 * 750)
    # decoupled: each learner's 2 GB fragment goes 16 s up and 16 s down, 2 s past tau = 30 s
    assert results["decoupled"].summary["wall_time_s"] == pytest.approx(2 * 750 + 2 * 10 * 2)


def test_a_schedule_that_cannot_run_the_work_is_left_out_with_why():
    source = ScenarioSource.read("worked-example", ["schedule.outer_steps=1"])
    assert list(simulate_schedules(source)) == ["ddp", "diloco", "streaming", "decoupled"]
    assert left_out_notes(source) == [
        "Eager DiLoCo not run: schedule.outer_steps: eager needs at least 2 (a round's average is applied "
        "one outer step later)"
    ]


def test_a_ddp_scenario_gives_the_others_whole_intervals():
    source = ScenarioSource.read(
        "worked-example", ["schedule.algorithm=ddp", "schedule.outer_steps=501"]
    )
    scenarios = equal_work_schedules(source)
    assert [s.schedule.outer_steps for s in scenarios.scenarios.values()] == [1000, 2, 2, 2, 2]


def test_work_line_says_equal_or_unequal_work():
    equal = {"ddp": {"inner_steps": 1000}, "diloco": {"inner_steps": 1000}}
    assert (
        work_line(equal, 2e6)
        == "Equal work: every schedule runs 1,000 inner steps per worker (2B tokens)."
    )
    unequal = {"ddp": {"inner_steps": 20}, "diloco": {"inner_steps": 10000}}
    assert work_line(unequal) == (
        "Unequal work, compare wall times with care: inner steps per worker: DDP 20, DiLoCo 10,000."
    )


def test_bandwidth_plot_has_a_panel_per_schedule_each_on_its_own_time_axis(
    results, source, tmp_path
):
    figure = bandwidth_figure(results, source.scenario, size_px=SIZE)
    axes = figure.axes
    assert len(axes) == 5
    assert [ax.get_ylabel() for ax in axes] == ["rate (Gbit/s)"] * 5
    # DDP's 1,000 steps take 1000 * 281.5 s = 3.26 days; DiLoCo's 2 intervals 2 * 1030 s = 34.3 min
    assert [ax.get_xlabel() for ax in axes[:2]] == [
        "time since start (days)",
        "time since start (minutes)",
    ]
    assert axes[0].get_xlim() == pytest.approx((0, 1000 * 281.5 / 86400))
    assert axes[1].get_xlim() == pytest.approx((0, 2 * 1030 / 60))
    legends = [ax.get_legend().get_texts()[0].get_text() for ax in axes]
    assert [text.split(":")[0] for text in legends] == [
        "DDP",
        "DiLoCo",
        "Streaming DiLoCo",
        "Eager DiLoCo",
        "Decoupled DiLoCo",
    ]
    assert legends[0].startswith("DDP: 1,000 inner steps in 3.3 d, 1,000 all-reduces")
    path = save_png(figure, tmp_path / "bandwidth.png")
    assert png_size(path) == SIZE


def test_timeline_rows_are_workers_and_bars_are_the_trace(source, tmp_path):
    run = simulate(
        source.scenario
    )  # DiLoCo: per worker, per interval one compute and one stall bar
    figure = timeline_figure(run.trace, source.scenario, (0, 2), size_px=SIZE)
    ax = figure.axes[0]
    assert [label.get_text() for label in ax.get_yticklabels()] == [f"dc-{i}" for i in range(8)]
    assert ax.get_xlabel() == "time since start (minutes)" and ax.get_ylabel() == "worker"
    # 8 workers x (compute, comm, stall) collections, each holding the 2 intervals' bars
    assert sum(len(c.get_paths()) for c in ax.collections) == 8 * 3 * 2
    assert png_size(save_png(figure, tmp_path / "timeline.png")) == SIZE


def test_timeline_says_when_workers_are_left_out_and_can_show_all(source):
    run = simulate(source.scenario)
    cut = timeline_figure(run.trace, source.scenario, (0, 1), max_workers=3).axes[0]
    assert len(cut.get_yticklabels()) == 3
    assert "first 3 of 8 workers shown, 5 left out" in cut.get_title()
    every = timeline_figure(run.trace, source.scenario, (0, 1), max_workers=None).axes[0]
    assert len(every.get_yticklabels()) == 8 and "left out" not in every.get_title()


@pytest.mark.parametrize(
    ("suffix", "magic"), [("svg", b"<?xml"), ("pdf", b"%PDF"), ("png", b"\x89PNG")]
)
def test_the_extension_picks_the_plot_format(results, source, tmp_path, suffix, magic):
    figure = breakdown_figure({name: r.summary for name, r in results.items()}, "x", size_px=SIZE)
    path = save_figure(figure, tmp_path / f"breakdown.{suffix}")
    assert path.read_bytes().startswith(magic)


def test_timeline_rejects_intervals_the_run_does_not_have(source):
    run = simulate(source.scenario)
    with pytest.raises(UserError, match="outer intervals 0 to 1"):
        timeline_figure(run.trace, source.scenario, (5, 7))


def test_breakdown_bars_are_each_schedules_shares(results, tmp_path):
    figure = breakdown_figure({name: r.summary for name, r in results.items()}, "x", size_px=SIZE)
    ax = figure.axes[0]
    compute_bars = ax.containers[0]
    # DiLoCo: 750 s compute, 280 s stall per interval; DDP: 1.5 s compute, 280 s stall per step.
    assert [bar.get_height() for bar in compute_bars] == pytest.approx(
        [100 * 1.5 / 281.5, 100 * 750 / 1030, 100, 100, 100 * 1500 / 1540]
    )
    assert ax.get_ylabel() == "share of each worker's time (%)"
    assert [t.get_text() for t in ax.get_xticklabels()] == [
        "DDP",
        "DiLoCo",
        "Streaming DiLoCo",
        "Eager DiLoCo",
        "Decoupled DiLoCo",
    ]
    assert png_size(save_png(figure, tmp_path / "breakdown.png")) == SIZE


@pytest.fixture(scope="module")
def sweep(source):
    return run_sweep(
        source,
        {
            "schedule.algorithm": ["diloco", "streaming"],
            "schedule.inner_steps": [100, 500],
            "island.*.bandwidth_gbps": [1, 10],
        },
        jobs=1,
    )


def test_heatmap_cells_are_the_sweeps_values(sweep, tmp_path):
    figure = heatmap_figure(sweep, where=["schedule.algorithm=diloco"], size_px=SIZE)
    ax = figure.axes[0]
    assert ax.get_xlabel() == "inner steps H" and ax.get_ylabel() == "bandwidth per island (Gbit/s)"
    assert figure.axes[1].get_ylabel() == "compute utilisation (%)"
    # compute H * 1.5 s against 280 / bw s of all-reduce; rows are bandwidths 1, 10, columns H = 100, 500
    expected = [[150 / (150 + 280), 750 / (750 + 280)], [150 / (150 + 28), 750 / (750 + 28)]]
    np.testing.assert_allclose(ax.images[0].get_array(), 100 * np.array(expected))
    assert png_size(save_png(figure, tmp_path / "heatmap.png")) == SIZE


def test_heatmap_marks_invalid_combinations(sweep):
    # Streaming with P = 10, tau = 20 needs H / P > 20: H = 100 is invalid at both bandwidths.
    figure = heatmap_figure(sweep, where=["schedule.algorithm=streaming"])
    cells = figure.axes[0].images[0].get_array()
    assert cells.mask[:, 0].all() and not cells.mask[:, 1].any()
    assert [t.get_text() for t in figure.axes[0].texts].count("invalid") == 2


def test_heatmap_needs_other_parameters_pinned(sweep):
    with pytest.raises(UserError, match="also varies island.*bandwidth_gbps"):
        heatmap_figure(sweep, "schedule.inner_steps", "schedule.algorithm")
    figure = heatmap_figure(
        sweep, "schedule.inner_steps", "schedule.algorithm", where=["island.*.bandwidth_gbps=10"]
    )
    assert np.ma.count(figure.axes[0].images[0].get_array()) == 3


def test_heatmap_rejects_unknown_metrics(sweep):
    with pytest.raises(UserError, match="--metric nope: not a numeric column"):
        heatmap_figure(sweep, metric="nope")


def test_sizes_parse_and_are_bounded():
    assert parse_size("640x480") == (640, 480)
    for bad in ("640", "10x10"):
        with pytest.raises(UserError, match="--size"):
            parse_size(bad)


@pytest.mark.parametrize("kind", ["bandwidth", "timeline", "breakdown"])
def test_cli_plot_writes_a_png_of_the_asked_size(kind, tmp_path, capsys):
    out = tmp_path / f"{kind}.png"
    code = main(
        [
            "plot",
            kind,
            "worked-example",
            "--set",
            "schedule.outer_steps=2",
            "--size",
            "640x480",
            "-o",
            str(out),
        ]
    )
    assert code == 0 and str(out) in capsys.readouterr().out
    assert png_size(out) == (640, 480)


def test_cli_heatmap_from_a_written_table(sweep, tmp_path):
    table = tmp_path / "sweep.csv"
    sweep.to_csv(table, index=False)
    out = tmp_path / "heat.png"
    assert (
        main(
            ["plot", "heatmap", str(table), "--where", "schedule.algorithm=diloco", "-o", str(out)]
        )
        == 0
    )
    assert png_size(out) == (1200, 800)


def test_cli_unknown_kind_is_one_line(capsys):
    assert main(["plot", "bandwidht", "worked-example"]) == 2
    assert "unknown plot kind 'bandwidht' (did you mean 'bandwidth'?)" in capsys.readouterr().err


def test_a_heatmap_over_seeds_shows_each_cell_s_spread():
    """Two seeds per cell: utilisation 0.5 and 0.7 (mean 60%, sample sd 14.1%); 0.8 and 0.8 (sd 0)."""
    table = pd.DataFrame(
        {
            "schedule.inner_steps": [100, 100, 500, 500, 100, 100, 500, 500],
            "island.*.bandwidth_gbps": [1, 1, 1, 1, 10, 10, 10, 10],
            "seed": [1, 2] * 4,
            "valid": [True] * 8,
            "compute_utilisation": [0.5, 0.7, 0.8, 0.8] * 2,
        }
    )
    axes = heatmap_figure(table).axes[0]
    texts = sorted(text.get_text() for text in axes.texts)
    assert texts == ["60%\n± 14.1%"] * 2 + ["80%\n± 0%"] * 2
    assert "mean ± sample sd over 2 seeds" in axes.get_title()
