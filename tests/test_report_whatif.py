"""The report's what-if grid and panel, without a browser: the axes, the overrides behind each stop,
the figures at a grid point against the worked example's arithmetic, the events budget and the
embedded data (tests/test_report_browser.py drives the panel itself)."""

from __future__ import annotations

import json
import re

import pytest

from islands.analysis.report.whatif import (
    WhatIfAxis,
    WhatIfGrid,
    bandwidth_overrides,
    fit_budget,
    run_whatif,
    whatif_axes,
)
from islands.analysis.report.whatif_page import embedded_json, grid_document, whatif_section
from islands.scenarios import ScenarioSource
from islands.simulator.budget import estimate

ONE_INTERVAL = ["schedule.outer_steps=1"]


def stops(axes: list[WhatIfAxis]) -> dict[str, tuple]:
    return {axis.key: (axis.values, axis.start) for axis in axes}


def test_the_worked_examples_axes():
    # DiLoCo sends the model whole: no P slider; H, 16 bits, the link and M = 8 sit mid-axis
    assert stops(whatif_axes(ScenarioSource.read("worked-example").scenario)) == {
        "inner_steps": ((250, 500, 1000), 1),
        "bits": ((4, 8, 16), 2),
        "bandwidth_scale": ((0.1, 0.3, 1, 3, 10), 2),
        "workers": ((4, 8, 16), 1),
    }
    streaming = whatif_axes(
        ScenarioSource.read("worked-example", ["schedule.algorithm=streaming"]).scenario
    )
    assert stops(streaming)["fragments"] == ((1, 5, 10, 20), 2)  # 1, P / 2, P = 10, 2P


def test_ddp_has_no_h_slider():
    assert "inner_steps" not in stops(
        whatif_axes(ScenarioSource.read("worked-example", ["schedule.algorithm=ddp"]).scenario)
    )


def test_the_bandwidth_scale_keeps_an_asymmetric_link_asymmetric():
    # home-lab's fibre island: 1 Gbit/s down, 100 Mbit/s up
    source = ScenarioSource.read("home-lab")
    fibre = source.variant(*bandwidth_overrides(source.scenario, 3)).islands[0]
    assert (fibre.upload_gbps, fibre.download_gbps) == (pytest.approx(0.3), pytest.approx(3.0))


def test_each_workers_stop_is_the_worker_count_it_shows():
    source = ScenarioSource.read("mixed-fleet")
    axis = next(axis for axis in whatif_axes(source.scenario) if axis.key == "workers")
    assert (
        axis.values[axis.start] == source.scenario.worker_count and axis.overrides[axis.start] == ()
    )
    assert [source.variant(*overrides).worker_count for overrides in axis.overrides] == list(
        axis.values
    )


@pytest.fixture(scope="module")
def grid() -> WhatIfGrid:
    source = ScenarioSource.read("worked-example", ONE_INTERVAL)
    return run_whatif(source, whatif_axes(source.scenario), jobs=1)


def test_a_grid_point_is_the_worked_examples_arithmetic(grid):
    # H = 250 at equal work (the run's 500 inner steps): 2 outer steps of 375 s of compute at 1.5 s a step;
    # 4 bits of 10e9 values: S = 5 GB, M = 4: 2 * 3/4 * S = 7.5 GB per rank a sync, at 0.1 Gbit/s 600 s;
    # utilisation 375 / 975
    point = grid.point([0, 0, 0, 0])
    assert grid.overrides([0, 0, 0, 0]) == [
        "schedule.inner_steps=250",
        "schedule.outer_steps=2",
        "schedule.bits=4",
        "island.0.upload_gbps=0.1",
        "island.0.download_gbps=0.1",
        "island.0.replicas=4",
    ]
    assert point["compute_utilisation"] == pytest.approx(375 / 975)
    assert point["stall_s"] == pytest.approx(2 * 600)
    assert point["bytes_per_worker"] == pytest.approx(2 * 7.5e9)
    assert point["wall_time_s"] == pytest.approx(2 * 975)
    # the uplink: nothing during compute, then 0.1 Gbit/s for 600 s, twice
    assert point["times_s"] == [0.0, 375.0, 975.0, 1350.0, 1950.0]
    assert point["rates_gbps"] == [0.0, 0.1, 0.0, 0.1, 0.0]


def test_the_h_slider_keeps_the_work_equal():
    """The worked example runs 20 x 500 = 10,000 inner steps per worker. H = 250 and H = 1000 cover the
    same 10,000, in 40 and 10 outer steps; each sync of 16-bit 10e9 values among 8 workers sends
    2 * 7/8 * 20 GB per rank, 280 s at 1 Gbit/s; so H = 250 takes 40 x (250 x 1.5 + 280) = 26,200 s and
    H = 1000 10 x (1000 x 1.5 + 280) = 17,800 s: the longer interval is the shorter run."""
    source = ScenarioSource.read("worked-example")
    axis = whatif_axes(source.scenario)[0]
    assert axis.key == "inner_steps" and axis.values == (250, 500, 1000)
    assert axis.overrides[0] == ("schedule.inner_steps=250", "schedule.outer_steps=40")
    assert axis.overrides[2] == ("schedule.inner_steps=1000", "schedule.outer_steps=10")
    variants = [source.variant(*overrides) for overrides in axis.overrides]
    assert [v.schedule.inner_steps * v.schedule.outer_steps for v in variants] == [10_000] * 3
    grid = run_whatif(source, [axis], jobs=1)
    walls = [point["wall_time_s"] for point in grid.points]
    assert walls == [
        pytest.approx(40 * (375 + 280)),
        pytest.approx(20 * (750 + 280)),
        pytest.approx(10 * (1500 + 280)),
    ]
    assert walls[2] < walls[1] < walls[0]


def test_an_h_stop_is_a_divisor_of_the_run_s_steps_and_never_above_them():
    # one interval of 500 steps: twice H would be more than the run, so H has two stops
    assert stops(whatif_axes(ScenarioSource.read("worked-example", ONE_INTERVAL).scenario))[
        "inner_steps"
    ] == ((250, 500), 1)
    # H = 500 over 3 intervals: 1,500 steps; 1,000 does not divide them, 750 (2 outer steps) does
    three = whatif_axes(ScenarioSource.read("worked-example", ["schedule.outer_steps=3"]).scenario)[
        0
    ]
    assert three.values == (250, 500, 750) and three.overrides[2] == (
        "schedule.inner_steps=750",
        "schedule.outer_steps=2",
    )


def test_the_scenario_as_written_is_the_middle_of_the_grid(grid):
    # 750 / (750 + 280)
    assert grid.point([axis.start for axis in grid.axes])["compute_utilisation"] == pytest.approx(
        750 / 1030
    )
    assert len(grid.points) == 2 * 3 * 5 * 3 and grid.fixed == ()


def test_a_combination_the_format_refuses_carries_the_rule():
    source = ScenarioSource.read("worked-example", [*ONE_INTERVAL, "schedule.algorithm=streaming"])
    axes = [
        axis for axis in whatif_axes(source.scenario) if axis.key in ("inner_steps", "fragments")
    ]
    grid = run_whatif(source, axes, jobs=1)
    # H = 250 in P = 20: 12.5 steps per fragment, not above tau = 20
    assert grid.point([0, 3])["error"].startswith(
        "schedule.overlap_steps: must be below inner_steps / fragments"
    )
    assert "error" not in grid.point([1, 2])


def axis(stop_count: int, start: int) -> WhatIfAxis:
    return WhatIfAxis(
        "x", "x", tuple(range(stop_count)), tuple((f"v={i}",) for i in range(stop_count)), start
    )


def test_over_budget_the_widest_axis_loses_its_farthest_stop_first():
    # 3 x 5 runs of one event each, room for 6: the 5-stop axis (start 2) loses 4, then 0, then (level
    # at 3 stops each, the later axis first) 3
    axes = [axis(3, 1), axis(5, 2)]
    events = {(a, b): 1.0 for a in range(3) for b in range(5)}
    assert fit_budget(axes, events, 6) == [[0, 1, 2], [1, 2]]
    assert fit_budget(axes, events, 15) == [[0, 1, 2], [0, 1, 2, 3, 4]]
    assert fit_budget(axes, events, 0.5) == [[1], [2]]


def test_a_grid_shrunk_to_one_stop_drops_that_slider_and_says_so():
    source = ScenarioSource.read("worked-example", ONE_INTERVAL)
    axes = whatif_axes(source.scenario)
    # room for less than one run: every stop goes but the scenario's own, which always stays
    grid = run_whatif(source, axes, jobs=1, max_events=1)
    assert grid.axes == () and len(grid.points) == 1 and len(grid.fixed) == len(axes)
    assert grid.points[0]["compute_utilisation"] == pytest.approx(750 / 1030)
    page = whatif_section(grid)
    assert "The full grid of 90 combinations would take more than the 1 simulator events" in page
    assert (
        "H, inner steps between syncs (at equal work: outer steps = inner steps / H) fixed at 500."
        in page
    )
    assert "<input" not in page
    assert f"about {estimate(source.scenario).events:.3g} simulator events" in page


def test_the_panel_has_a_labelled_slider_per_axis_and_an_element_per_figure(grid):
    page = whatif_section(grid)
    sliders = re.findall(
        r"<input type='range' id='whatif-(\w+)' name='\w+' min='0' max='(\d+)'", page
    )
    assert sliders == [(axis.key, str(len(axis.values) - 1)) for axis in grid.axes]
    assert all(f"<label for='whatif-{axis.key}'>" in page for axis in grid.axes)
    assert re.findall(r"data-figure='(\w+)'", page) == [
        "compute_utilisation",
        "stall_s",
        "bytes_per_worker",
        "wall_time_s",
        "avg_bandwidth_gbps",
        "uplink_gbps",
    ]


def test_the_embedded_data_cannot_end_its_script_early(grid):
    hostile = WhatIfGrid(grid.axes[:1], ({"error": "</script><script>alert(1)"},) * 3)
    text = embedded_json(grid_document(hostile))
    assert "</" not in text
    assert json.loads(text)["points"][0]["error"] == "</script><script>alert(1)"


def test_m_never_drops_below_the_two_workers_a_sync_needs():
    # streaming-diloco-1b: one island of two replicas, so half of M would be one worker
    source = ScenarioSource.read("streaming-diloco-1b")
    assert source.scenario.worker_count == 2
    assert stops(whatif_axes(source.scenario))["workers"] == ((2, 4), 0)


def test_the_grid_is_the_same_from_one_process_or_a_pool(grid):
    source = ScenarioSource.read("worked-example", ONE_INTERVAL)
    assert run_whatif(source, whatif_axes(source.scenario), jobs=2) == grid
