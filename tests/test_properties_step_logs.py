"""Generated bad logs for ``islands compare SCENARIO LOG``, one property per format: whatever a
per-step CSV or JSON lines log, a Chrome trace or a torchtitan log holds (types swapped, NaN and
infinities, negative or huge numbers, cells or keys missing, steps out of order or twice, the file
cut at any byte), the log is read into rows that keep every rule, or refused in one line naming the
file (``UserError``; the command: exit code 2), never a traceback."""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path

import pytest
from helpers.step_logs import DATA, SCENARIO
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from islands.cli import main
from islands.errors import UserError
from islands.validation.logs.compare_log import read_log
from islands.validation.logs.steps import MAX_STEP_S, SUM_TOLERANCE, StepLog

SAMPLES = [
    ("steps-two-ranks.csv", "steps"),
    ("steps-rank0-window.jsonl", "steps"),
    ("steps-clock.csv", "steps"),
    ("chrome-trace.json", "chrome"),
    ("torchtitan.log", "torchtitan"),
]
COLUMNS = ("step", "wall_s", "compute_s", "blocked_s", "synced", "bytes", "rank")
FIXTURES = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
BAD = (
    st.floats(allow_nan=True, allow_infinity=True)
    | st.integers(-(10**30), 10**30)
    | st.integers(-(10**400), 10**400)
    | st.text(max_size=4)
    | st.booleans()
    | st.none()
    | st.lists(st.integers(0, 3), max_size=2)
)


def keeps_the_rules(log: StepLog) -> None:
    """What every log read holds: finite, non-negative seconds within a step's wall time, and each
    rank's steps one after another."""
    rows = log.rows
    for column in ("wall_s", "compute_s", "blocked_s", "bytes"):
        values = rows[column].dropna()
        assert ((values >= 0) & values.map(math.isfinite)).all()
    assert (rows["wall_s"] <= MAX_STEP_S * rows["steps"]).all()
    known = rows.dropna(subset=["compute_s"])
    assert (
        known["compute_s"] + known["blocked_s"]
        <= known["wall_s"] * (1 + SUM_TOLERANCE) + SUM_TOLERANCE
    ).all()
    for _, steps in rows.groupby("rank"):
        first = steps["step"] - steps["steps"] + 1
        assert (first.iloc[1:].to_numpy() == steps["step"].iloc[:-1].to_numpy() + 1).all()


def read_or_refuse(path: Path, log_format: str | None) -> StepLog | None:
    try:
        log = read_log(path, log_format)
    except UserError as error:
        assert "\n" not in str(error) and str(error).startswith(str(path))
        return None
    keeps_the_rules(log)
    return log


@pytest.mark.parametrize("name, log_format", SAMPLES)
def test_a_log_cut_at_any_byte_is_refused_or_read_at_a_line_end(tmp_path, name, log_format):
    """Every format ends each line with a line end: a file cut mid-line is refused, even where what is
    left parses (``1.2`` of ``1.25``); cut at a line end it is a shorter log, read or refused whole.
    Told from its content or named by --format, never a traceback."""
    whole = (DATA / name).read_bytes()
    line_ends = {index + 1 for index, byte in enumerate(whole) if byte == ord("\n")}
    path = tmp_path / name
    for length in range(len(whole)):
        path.write_bytes(whole[:length])
        for named in (log_format, None):
            if read_or_refuse(path, named) is not None:
                assert length in line_ends


def csv_text(rows: list[dict]) -> str:
    """The rows as plain CSV: a cell's comma, quote and line ends replaced, so one line is one record."""
    header = list(dict.fromkeys(key for row in rows for key in row))

    def cell(value) -> str:
        if value is None:
            return ""
        return str(value).replace(",", ";").replace('"', "'").replace("\n", " ").replace("\r", " ")

    return (
        "\n".join(
            [",".join(header), *(",".join(cell(row.get(key)) for key in header) for row in rows)]
        )
        + "\n"
    )


def jsonl_text(rows: list[dict]) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


def good_row(step: int) -> dict:
    synced = step % 4 == 0
    return {
        "step": step,
        "wall_s": 17.0 if synced else 1.0,
        "compute_s": 1.0,
        "blocked_s": 16.0 if synced else 0.0,
        "synced": int(synced),
        "bytes": 2e9 if synced else 0.0,
    }


def compare_answers(scenario: Path, log: Path) -> None:
    """The whole command: it compares (0) or refuses in one line (2)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["compare", str(scenario), str(log)])
    assert code in (0, 2), err.getvalue()
    if code == 2:
        assert len(err.getvalue().splitlines()) == 1 and "Traceback" not in err.getvalue()
    else:
        assert "nan" not in out.getvalue().lower().split()


@given(
    damage=st.lists(
        st.tuples(st.integers(0, 11), st.sampled_from(COLUMNS), BAD | st.just("drop")),
        min_size=1,
        max_size=3,
    ),
    as_json=st.booleans(),
)
@FIXTURES
def test_a_per_step_log_with_bad_cells_is_read_within_the_rules_or_refused(
    tmp_path, scenario_file, damage, as_json
):
    rows = [good_row(step) for step in range(1, 13)]
    for index, key, value in damage:
        if value == "drop":
            rows[index].pop(key, None)
        else:
            rows[index][key] = value
    path = tmp_path / ("steps.jsonl" if as_json else "steps.csv")
    path.write_text((jsonl_text if as_json else csv_text)(rows))
    read_or_refuse(path, "steps")
    compare_answers(scenario_file(SCENARIO), path)


@given(steps=st.lists(st.integers(1, 14), min_size=1, max_size=14), as_json=st.booleans())
@FIXTURES
def test_steps_out_of_order_twice_or_missing_are_refused(tmp_path, steps, as_json):
    path = tmp_path / "steps.log"
    path.write_text((jsonl_text if as_json else csv_text)([good_row(step) for step in steps]))
    one_after_another = all(b == a + 1 for a, b in zip(steps, steps[1:]))
    log = read_or_refuse(path, "steps")
    assert (log is not None) == one_after_another


@given(
    name=st.text(
        st.characters(whitelist_categories=("L", "N"), whitelist_characters="_"),
        min_size=1,
        max_size=8,
    ).filter(lambda name: name not in (*COLUMNS, "time_s")),
    value=BAD,
    as_json=st.booleans(),
)
@FIXTURES
def test_columns_it_does_not_read_are_read_past_in_both_forms(tmp_path, name, value, as_json):
    """Whatever a column the reader does not use holds, in a file that is valid CSV or JSON lines
    (JSON has no NaN or infinity: a line holding one is refused whatever its column)."""
    assume(not (as_json and isinstance(value, float) and not math.isfinite(value)))
    rows = [good_row(step) for step in range(1, 9)]
    plain, extra = tmp_path / "plain.log", tmp_path / "extra.log"
    write = jsonl_text if as_json else csv_text
    plain.write_text(write(rows))
    extra.write_text(write([{**row, name: value} for row in rows]))
    assert read_log(extra, "steps").rows.equals(
        read_log(plain, "steps").rows.assign(
            where=lambda rows: rows["where"].str.replace("plain.log", "extra.log")
        )
    )


def chrome_document() -> dict:
    return json.loads((DATA / "chrome-trace.json").read_text())


@given(
    index=st.integers(0, 40),
    key=st.sampled_from(["ph", "name", "ts", "dur", "event"]),
    value=BAD
    | st.sampled_from(["X", "ProfilerStep#2", "ProfilerStep#99", "gloo:all_reduce", "drop"]),
    rank=st.none() | BAD,
)
@FIXTURES
def test_a_chrome_trace_with_bad_events_is_read_within_the_rules_or_refused(
    tmp_path, scenario_file, index, key, value, rank
):
    document = chrome_document()
    events = document["traceEvents"]
    event = events[index % len(events)]
    if key == "event":
        events[index % len(events)] = value
    elif value == "drop":
        event.pop(key, None)
    else:
        event[key] = value
    if rank is not None:
        document["distributedInfo"]["rank"] = rank
    path = tmp_path / "trace.json"
    path.write_text(
        json.dumps(document) + "\n"
    )  # NaN and Infinity as Python writes them: refused as JSON
    read_or_refuse(path, "chrome")
    compare_answers(scenario_file(SCENARIO), path)


STAMPS = st.datetimes().map(lambda moment: moment.strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]) | st.text(
    max_size=24
)


@given(
    lines=st.lists(
        st.tuples(
            st.sampled_from(["[rank0]:", "[rank1]:", ""]),
            STAMPS,
            st.integers(-3, 20) | st.integers(0, 10**30) | st.text(max_size=3),
        ),
        min_size=0,
        max_size=6,
    )
)
@FIXTURES
def test_a_torchtitan_log_with_bad_lines_is_read_within_the_rules_or_refused(
    tmp_path, scenario_file, lines
):
    text = "".join(
        f"{prefix}[titan] {stamp} - root - INFO - step: {step}  loss:  7.1234  tps: 1,234\n"
        for prefix, stamp, step in lines
    )
    path = tmp_path / "train.log"
    path.write_text(text + "done\n")
    read_or_refuse(path, "torchtitan")
    compare_answers(scenario_file(SCENARIO), path)
