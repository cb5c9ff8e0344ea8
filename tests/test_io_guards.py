"""The shared input guards: bounded reads and outputs that would overwrite an input or each other."""

import os

import pytest

from islands.errors import UserError
from islands.io import read_bounded_bytes, read_bounded_text, refuse_shared_paths


def test_a_bounded_read_returns_a_file_within_the_limit(tmp_path):
    path = tmp_path / "a.json"
    path.write_bytes(b"x" * 10)
    assert read_bounded_bytes(path, "profile", limit_bytes=10) == b"x" * 10


def test_a_file_one_byte_over_the_limit_is_refused(tmp_path):
    path = tmp_path / "a.json"
    path.write_bytes(b"x" * 11)
    with pytest.raises(UserError, match="at most 10 bytes"):
        read_bounded_bytes(path, "profile", limit_bytes=10)


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero on this machine")
def test_a_file_that_never_ends_costs_one_bounded_read():
    with pytest.raises(UserError, match="/dev/zero: a profile is at most 1024 bytes"):
        read_bounded_bytes("/dev/zero", "profile", limit_bytes=1024)


def test_a_folder_a_missing_file_and_bad_utf8_are_one_line_each(tmp_path):
    with pytest.raises(UserError, match="is a folder, not a scenario"):
        read_bounded_text(tmp_path, "scenario")
    with pytest.raises(UserError, match="cannot read this scenario: No such file"):
        read_bounded_text(tmp_path / "missing.toml", "scenario")
    (tmp_path / "bad.toml").write_bytes(b"ok\xff")
    with pytest.raises(UserError, match=r"not UTF-8 text \(byte 2\)"):
        read_bounded_text(tmp_path / "bad.toml", "scenario")


def test_an_output_that_is_an_input_is_refused_by_any_spelling_of_its_path(tmp_path, monkeypatch):
    scenario = tmp_path / "s.toml"
    scenario.write_text("")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match="--trace would overwrite the scenario"):
        refuse_shared_paths({"--trace": "./sub/../s.toml"}, {"the scenario": scenario})
    os.link(scenario, tmp_path / "hard.toml")
    with pytest.raises(UserError, match="--trace would overwrite the scenario"):
        refuse_shared_paths({"--trace": "hard.toml"}, {"the scenario": scenario})


def test_two_outputs_on_one_path_are_refused_and_stdout_never_clashes(tmp_path):
    with pytest.raises(UserError, match="--trace and --links name the same file"):
        refuse_shared_paths({"--trace": tmp_path / "t.csv", "--links": tmp_path / "t.csv"})
    refuse_shared_paths({"--trace": "-", "--links": "-"}, {"the scenario": "-"})
    refuse_shared_paths(
        {"--trace": tmp_path / "t.csv", "--links": None}, {"the profile": tmp_path / "p.json"}
    )


def test_json_too_deep_too_long_or_not_a_number_is_one_line_each(tmp_path):
    from islands.io import read_bounded_json

    cases = {
        "deep.json": ("[" * 100_000 + "]" * 100_000, "nested too deeply to be a calibration"),
        "long.json": ('{"a": ' + "9" * 5000 + "}", "not valid JSON"),
        "nan.json": ('{"a": NaN}', "holds NaN, which is no number in JSON"),
        "cut.json": ('{"a": 1', "not valid JSON"),
    }
    for name, (text, message) in cases.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(UserError, match=message):
            read_bounded_json(tmp_path / name, "calibration")
    (tmp_path / "ok.json").write_text('{"a": [1, 2.5]}')
    assert read_bounded_json(tmp_path / "ok.json", "calibration") == {"a": [1, 2.5]}
