"""A run folder read back (``validation/run_folder.py``, for compare and validate): a file cut at any
byte is refused in one ``UserError``, never read as a shorter run, never a traceback."""

from __future__ import annotations

import json

import pytest

from islands.errors import UserError
from islands.io import json_text, write_table
from islands.simulator import simulate
from islands.validation.compare import error_text
from islands.validation.run_folder import read_run

from conftest import make_scenario


@pytest.fixture
def run_folder(tmp_path):
    result = simulate(make_scenario())
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "summary.json").write_text(json_text(result.summary))
    (folder / "run.json").write_text(json.dumps({"scenario": "test", "algorithm": "diloco", "bits": 16}))
    write_table(result.trace, folder / "trace.csv")
    return folder


@pytest.mark.parametrize("name", ["summary.json", "run.json"])
def test_a_json_file_cut_at_any_byte_is_refused(run_folder, name):
    whole = (run_folder / name).read_bytes()
    for length in range(len(whole)):
        (run_folder / name).write_bytes(whole[:length])
        with pytest.raises(UserError, match=f"{name}: "):
            read_run(run_folder)


def test_a_trace_cut_at_any_byte_is_refused_unless_at_a_line_end_that_keeps_the_run_s_span(run_folder):
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
    assert run.summary["wall_time_s"] == pytest.approx(3 * (100 + 24))  # 3 outer steps: 100 s compute, 24 s sync


def test_an_error_beyond_1000_percent_is_three_figures_not_hundreds_of_digits():
    assert error_text(-0.0512) == "-5.1%"
    assert error_text(9.994) == "+999.4%"
    assert error_text(2.4e15) == "+2.4e+17%"
    assert error_text(None) == "-"
