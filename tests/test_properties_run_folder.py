"""Generated bad run folders (``islands compare SCENARIO RUN``, and ``islands validate`` reading its own
run): the folder of a run that went as predicted, with summary.json or run.json changed at one place
(``helpers/mutations.py``), or a cell of trace.csv swapped for junk, a line dropped, repeated or
added. Each folder is read, or refused in one line naming a file of it; ``islands compare`` answers 0
(without a nan or inf in its table) or 2 in one line, never a traceback. The files cut at any byte
are tests/test_run_folder.py's."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
from pathlib import Path

import pytest
from helpers.mutations import answer, json_text, mutated
from helpers.scenarios import SCENARIO, make_scenario
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from islands.cli import main
from islands.errors import UserError
from islands.io import json_text as summary_text
from islands.io import write_table
from islands.simulator import simulate
from islands.validation.run_folder import read_run

FIXTURES = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
CELLS = st.sampled_from(
    [
        "",
        "nan",
        "inf",
        "-inf",
        "-1",
        "1e999",
        "9" * 400,
        "x",
        "True",
        "0x10",
        "1,2",
        '"',
        "a",
        "compute",
        "nap",
        "-0",
        "1e-320",
    ]
) | st.text(max_size=5)


@pytest.fixture(scope="module")
def good_run(tmp_path_factory) -> Path:
    """What `islands train` writes for the run tests/helpers/scenarios.py predicts, and the scenario."""
    folder = tmp_path_factory.mktemp("good")
    (folder / "scenario.toml").write_text(SCENARIO)
    result = simulate(make_scenario())
    run = folder / "run"
    run.mkdir()
    (run / "summary.json").write_text(summary_text(result.summary))
    (run / "run.json").write_text(
        json.dumps({"scenario": "test", "algorithm": "diloco", "bits": 16})
    )
    write_table(result.trace, run / "trace.csv")
    return folder


def copied(good_run: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "w"
    if folder.exists():
        shutil.rmtree(folder)
    shutil.copytree(good_run, folder)
    return folder


def read_or_refused(run: Path) -> None:
    """The folder read, or refused in one line naming it; and compare's answer."""
    answer(lambda: read_run(run), run)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["compare", str(run.parent / "scenario.toml"), str(run)])
    assert code in (0, 2) and len(err.getvalue().splitlines()) == (code == 2), err.getvalue()
    assert code == 2 or not re.search(r"(?<!')\b(nan|inf)\b(?!')", out.getvalue().lower()), (
        out.getvalue()
    )


@given(st.sampled_from(["summary.json", "run.json"]), st.data())
@FIXTURES
def test_a_json_file_changed_at_one_place_is_read_or_refused_naming_it(
    good_run, tmp_path, name, data
):
    folder = copied(good_run, tmp_path)
    path = folder / "run" / name
    changed, what = data.draw(mutated(json.loads(path.read_text())))
    path.write_text(json_text(changed))
    read_or_refused(folder / "run")


@given(st.data())
@FIXTURES
def test_a_trace_with_a_cell_or_line_changed_is_read_or_refused_naming_it(good_run, tmp_path, data):
    folder = copied(good_run, tmp_path)
    path = folder / "run" / "trace.csv"
    lines = path.read_text().splitlines()
    index = data.draw(st.integers(0, len(lines) - 1))
    change = data.draw(st.sampled_from(["cell", "cell", "drop", "repeat", "add"]))
    if change == "cell":
        cells = lines[index].split(",")
        cells[data.draw(st.integers(0, len(cells) - 1))] = data.draw(CELLS)
        lines[index] = ",".join(cells)
    elif change == "drop":
        del lines[index]
    elif change == "repeat":
        lines.insert(index, lines[index])
    else:
        lines.insert(index, data.draw(CELLS))
    path.write_text("\n".join(lines) + "\n")
    read_or_refused(folder / "run")


# --- the failures these suites found, each as its shrunk case -------------------------------------


@pytest.mark.parametrize(
    "line, message",
    [
        ("0.0,100.0,0,a,compute,x,-1,0", "trace.csv: line 2: bytes must be a number (got 'x')"),
        (
            "0.0,100.0,0,a,compute,0.0,-1,x",
            "trace.csv: line 2: outer_step must be a whole number (got 'x')",
        ),
        (
            "0.0,1e999,0,a,compute,0.0,-1,0",
            "trace.csv: time_end_s must be finite and 0 or more (got inf)",
        ),
        (
            "0.0,100.0," + "9" * 400 + ",a,compute,0.0,-1,0",
            "trace.csv: line 2: worker must be a whole number (got an integer of 400 digits)",
        ),
        (
            "0.0,100.0,0.5,a,compute,0.0,-1,0",
            "trace.csv: line 2: worker must be a whole number (got 0.5)",
        ),
        (
            "0.0,100.0,0,a,compute,0.0,-1,-1",
            "trace.csv: outer_step must be 0 to 4294967296 (got -1)",
        ),
        (
            "0.0,100.0,0,a,\x1e,0.0,-1,0",
            "trace.csv: line 2: kind must be one of compute, comm, stall, idle, wasted (got '\\x1e')",
        ),
    ],
)
def test_a_trace_cell_that_is_no_number_is_refused_naming_its_line(
    good_run, tmp_path, line, message
):
    """Were a traceback before: a word in a numeric column (a TypeError: pandas read the column as
    text), 400 digits (an OverflowError), a negative outer step (a ValueError in the summary's sync
    keys); a worker of 0.5 was read as worker 0; a kind holding a control character split the line."""
    folder = copied(good_run, tmp_path)
    path = folder / "run" / "trace.csv"
    lines = path.read_text().splitlines(keepends=True)
    lines[1] = line + "\n"
    path.write_text("".join(lines))
    with pytest.raises(UserError) as refused:
        read_run(folder / "run")
    assert message in str(refused.value), refused.value
