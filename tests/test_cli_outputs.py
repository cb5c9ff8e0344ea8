"""Every output path: formats by extension, ``-`` for stdout, and any OS error as one line, exit 2."""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest

from islands.cli import main
from islands.errors import UserError
from islands.io import atomic_path, output_format, safe_name, write_table

SHORT = ["--set", "schedule.outer_steps=1"]
FAST = {"report": ["--no-fragments", "--jobs", "1"]}


def one_error_line(capsys, command: str) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"islands {command}: error: "), err
    return lines[0]


@pytest.fixture
def a_file(tmp_path):
    path = tmp_path / "FILE"
    path.write_text("in the way")
    return path


def unwritable_targets(tmp_path, a_file, suffix: str) -> list[tuple[str, str]]:
    """(path, the reason the error must give) for targets no command can write."""
    return [
        (str(a_file / f"x.{suffix}"), "a file of that name is in the way"),
        (str(tmp_path) + os.sep, "is a folder"),
        (str(tmp_path), "is a folder"),
        (f"/proc/x.{suffix}", "cannot write in /proc"),
    ]


@pytest.mark.parametrize(
    "command,option,suffix",
    [
        ("plot", "-o", "png"),
        ("trace", "-o", "json"),
        ("report", "-o", "html"),
        ("simulate", "--trace", "csv"),
        ("simulate", "--links", "csv"),
    ],
)
def test_unwritable_outputs_are_one_line_naming_the_path(
    command, option, suffix, tmp_path, a_file, capsys
):
    for target, reason in unwritable_targets(tmp_path, a_file, suffix):
        argv = [
            command,
            *(["breakdown"] if command == "plot" else []),
            "worked-example",
            *SHORT,
            *FAST.get(command, []),
            option,
            target,
        ]
        assert main(argv) == 2, target
        line = one_error_line(capsys, command)
        assert target.rstrip(os.sep) in line and reason in line
    assert os.listdir(tmp_path) == ["FILE"]  # no temporary file left anywhere


@pytest.mark.parametrize(
    "argv,suffixes",
    [
        (["plot", "breakdown", "worked-example", "-o", "x.jpg"], ".png, .svg, .pdf"),
        (["trace", "worked-example", "-o", "x.csv"], ".json"),
        (["simulate", "worked-example", "--trace", "t.txt"], ".csv, .parquet, .json"),
    ],
)
def test_other_extensions_are_refused(argv, suffixes, capsys):
    assert main(argv) == 2
    assert f"is not a format this writes; end the name with {suffixes}" in one_error_line(
        capsys, argv[0]
    )


def test_a_table_ending_in_json_is_json(tmp_path):
    frame = pd.DataFrame({"worker": [0, 1], "bytes": [1.5, float("nan")]})
    write_table(frame, tmp_path / "t.json")
    assert json.loads((tmp_path / "t.json").read_text()) == [
        {"worker": 0, "bytes": 1.5},
        {"worker": 1, "bytes": None},
    ]


def test_trace_to_stdout_writes_json_there_and_no_file(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["trace", "worked-example", *SHORT, "-o", "-"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["otherData"]["workers"] == 8
    assert "wrote stdout" in captured.err
    assert os.listdir(tmp_path) == []


def test_plot_to_stdout_is_png(tmp_path, capfdbinary, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["plot", "breakdown", "worked-example", *SHORT, "-o", "-"]) == 0
    assert capfdbinary.readouterr().out.startswith(b"\x89PNG\r\n\x1a\n")
    assert os.listdir(tmp_path) == []


def test_a_failed_write_keeps_the_previous_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "kept.csv"
    target.write_text("old")
    with pytest.raises(UserError, match="kept.csv: No space left on device"):
        with atomic_path(target):
            raise OSError(28, "No space left on device")
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["kept.csv"]


def test_stdout_takes_the_first_format():
    assert output_format("-", ("png", "svg")) == "png"
    assert output_format("A.SVG", ("png", "svg")) == "svg"


@pytest.mark.parametrize(
    "name,safe",
    [
        ("../../escaped/x", "escaped_x"),
        ("seed-10b-1.5gbps", "seed-10b-1.5gbps"),
        ("a b/c", "a_b_c"),
        ("..", "unnamed"),
        (".hidden", "hidden"),
    ],
)
def test_names_in_file_names_stay_one_name(name, safe):
    assert safe_name(name) == safe
