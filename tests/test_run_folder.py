"""A run folder read back (``validation/run_folder.py``, for compare and validate): a file cut at any
byte is refused in one ``UserError``, never read as a shorter run, never a traceback."""

from __future__ import annotations

import contextlib
import io
import json
import re

import pytest
from helpers.scenarios import SCENARIO, make_scenario
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from islands.cli import main
from islands.errors import UserError
from islands.io import json_text, write_table
from islands.simulator import simulate
from islands.validation.compare import error_text, relative_error
from islands.validation.run_folder import read_run


@pytest.fixture
def scenario_path(tmp_path):
    path = tmp_path / "scenario.toml"
    path.write_text(SCENARIO)
    return path


@pytest.fixture
def run_folder(tmp_path):
    result = simulate(make_scenario())
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "summary.json").write_text(json_text(result.summary))
    (folder / "run.json").write_text(
        json.dumps({"scenario": "test", "algorithm": "diloco", "bits": 16})
    )
    write_table(result.trace, folder / "trace.csv")
    return folder


@pytest.mark.parametrize("name", ["summary.json", "run.json"])
def test_a_json_file_cut_at_any_byte_is_refused(run_folder, name):
    whole = (run_folder / name).read_bytes()
    for length in range(len(whole)):
        (run_folder / name).write_bytes(whole[:length])
        with pytest.raises(UserError, match=f"{name}: "):
            read_run(run_folder)


def test_a_trace_cut_at_any_byte_is_refused_unless_at_a_line_end_that_keeps_the_run_s_span(
    run_folder,
):
    """Cut mid-line: no line end. At a line end: refused where the lost rows held the run's last end;
    the rows sorted by start, this trace's last 8 rows (4 workers' comm and stall of the last sync)
    all end at 372 s, so only losing all of them shortens the span."""
    whole = (run_folder / "trace.csv").read_bytes()
    line_ends = [index + 1 for index, byte in enumerate(whole) if byte == ord("\n")]
    read = []
    for length in range(len(whole)):
        (run_folder / "trace.csv").write_bytes(whole[:length])
        try:
            read.append(len(read_run(run_folder).trace))
        except UserError as error:
            assert "trace.csv: " in str(error)
        else:
            assert length in line_ends
    rows = len(line_ends) - 1
    assert read == list(range(rows - 7, rows))  # the last sync's 8 rows, all but the last


def test_the_whole_trace_reads_back_row_for_row(run_folder):
    run = read_run(run_folder)
    predicted = simulate(make_scenario()).trace
    assert run.trace.equals(predicted)
    assert run.summary["wall_time_s"] == pytest.approx(
        3 * (100 + 24)
    )  # 3 outer steps: 100 s compute, 24 s sync


def test_a_measured_value_so_small_that_the_error_overflows_gets_none_not_inf():
    assert relative_error(24.0, 1e-320) is None
    assert relative_error(24.0, 1e-3) == pytest.approx(23_999.0)


def test_an_error_beyond_1000_percent_is_three_figures_not_hundreds_of_digits():
    assert error_text(-0.0512) == "-5.1%"
    assert error_text(9.994) == "+999.4%"
    assert error_text(2.4e15) == "+2.4e+17%"
    assert error_text(None) == "-"


FIGURES = (
    "wall_time_s",
    "compute_utilisation",
    "stall_s",
    "idle_s",
    "bytes_per_worker",
    "mean_sync_s",
)


@given(
    figures=st.fixed_dictionaries(
        {},
        optional={key: st.floats() | st.integers(-(10**20), 10**20) | st.none() for key in FIGURES},
    )
)
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_compare_prints_only_finite_numbers_or_refuses_in_one_line(
    run_folder, scenario_path, figures
):
    """Whatever numbers summary.json holds (NaN and infinities written as JSON allows, as null), compare
    either prints a table without nan or inf, or refuses in one line with exit code 2."""
    summary = json.loads((run_folder / "summary.json").read_text())
    (run_folder / "summary.json").write_text(json_text({**summary, **figures}))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["compare", str(scenario_path), str(run_folder)])
    if code == 2:
        assert len(err.getvalue().splitlines()) == 1
    else:
        assert code == 0 and not re.search(r"\b(nan|inf)\b", out.getvalue().lower()), out.getvalue()
