"""The report's what-if axes the user marks (``islands report --axis KEY=V1,V2,...``): parsed and
checked in one line, each stop the simulator's run with that ``--set``, replacing the built-in slider
of the same key, and shown as a slider of its own (the bad inputs on the command line are rows of
tests/test_bad_inputs_simulation.py)."""

from __future__ import annotations

import pytest

from islands.analysis.report.marked_axes import (
    AS_WRITTEN,
    MAX_COMBINATIONS,
    check_marked,
    parse_axis,
    report_axes,
)
from islands.analysis.report.whatif import FIGURES, run_whatif
from islands.analysis.report.whatif_page import whatif_section
from islands.errors import UserError
from islands.scenarios import ScenarioSource
from islands.simulator import simulate

SMALL = ["schedule.outer_steps=2"]


@pytest.fixture(scope="module")
def source() -> ScenarioSource:
    return ScenarioSource.read("worked-example", SMALL)


def test_an_axis_opens_as_written_then_takes_each_value_in_order():
    axis = parse_axis(" island.0.latency_ms = 50, 0 ,100").axis()
    assert axis.key == "axis-island-0-latency-ms" and axis.label == "island.0.latency_ms (--axis)"
    assert axis.values == (AS_WRITTEN, "50", "0", "100") and axis.start == 0
    assert axis.overrides == (
        (),
        ("island.0.latency_ms=50",),
        ("island.0.latency_ms=0",),
        ("island.0.latency_ms=100",),
    )


@pytest.mark.parametrize(
    "text, message",
    [
        ("latency", "write KEY=V1,V2,..."),
        ("=1,2", "write KEY=V1,V2,..."),
        ("schedule.bits=", "a value is empty"),
        ("schedule.bits=4,,8", "a value is empty"),
        ("schedule.bits=4,4", "a value is given twice"),
        ("schedule.seed=" + ",".join(map(str, range(21))), "at most 20 values (got 21)"),
    ],
)
def test_a_badly_written_axis_is_one_line(text, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_axis(text)


def test_a_value_the_format_refuses_is_named_before_any_run(source):
    with pytest.raises(UserError) as refused:
        check_marked(source, [parse_axis("island.0.replicas=4,0")])
    assert str(refused.value) == (
        "--axis island.0.replicas=4,0: 0: island.0.replicas: must be >= 1 (got 0)"
    )


def test_a_grid_too_large_to_hold_is_refused(source):
    many = [
        parse_axis(f"island.0.{key}=" + ",".join(map(str, range(1, 21))))
        for key in ("latency_ms", "step_time_s")
    ]
    with pytest.raises(UserError, match=f"more than the {MAX_COMBINATIONS:,} a report holds"):
        check_marked(source, many)


def test_a_marked_key_replaces_the_built_in_slider_that_sets_it(source):
    keys = [axis.key for axis in report_axes(source.scenario)]
    assert keys == ["inner_steps", "bits", "bandwidth_scale", "workers"]
    marked = [parse_axis("schedule.bits=4,8"), parse_axis("island.*.replicas=2,3")]
    assert [axis.key for axis in report_axes(source.scenario, marked)] == [
        "inner_steps",
        "bandwidth_scale",
        "axis-schedule-bits",
        "axis-island-replicas",
    ]
    # H's slider sets outer_steps too, to keep the work equal: marking either key replaces it
    outer = report_axes(source.scenario, [parse_axis("schedule.outer_steps=1,4")])
    assert "inner_steps" not in [axis.key for axis in outer]


def test_each_stop_is_the_simulators_run_with_that_set(source):
    axis = parse_axis("island.0.latency_ms=0,80").axis()
    grid = run_whatif(source, [axis], jobs=1)
    for stop, overrides in enumerate(axis.overrides):
        expected = simulate(source.variant(*overrides)).summary
        assert {key: grid.points[stop][key] for key in FIGURES} == {
            key: expected[key] for key in FIGURES
        }
    assert grid.points[2]["wall_time_s"] > grid.points[1]["wall_time_s"]  # 80 ms per hop costs time


def test_the_panel_shows_the_marked_slider_with_its_values(source):
    axis = parse_axis("schedule.algorithm=streaming,ddp").axis()
    section = whatif_section(run_whatif(source, [axis], jobs=1))
    assert "<label for='whatif-axis-schedule-algorithm'>schedule.algorithm (--axis): " in section
    assert "<output id='whatif-axis-schedule-algorithm-value'>as written</output>" in section
    assert '"texts":["as written","streaming","ddp"]' in section
