"""``islands.trainer.train(plan, options)``, the trainer's API: what it refuses, in one line, before any
process starts (``launch_local`` fails the test if reached)."""

import pytest

from islands.errors import UserError
from islands.scenarios import load
from islands.trainer import launch
from islands.trainer.kinds import make_run_plan
from islands.trainer.launch import TrainOptions

UNWRITABLE = "/proc/islands-api"  # no one, root included, can create a folder there


@pytest.fixture
def no_launch(monkeypatch):
    def launched(*args, **kwargs):
        raise AssertionError("a process started before the bad input was refused")

    monkeypatch.setattr(launch, "launch_local", launched)


@pytest.mark.parametrize(
    "options, data, message",
    [
        (TrainOptions(out_dir=UNWRITABLE), None, f"--out {UNWRITABLE}: cannot write there"),
        (
            TrainOptions(out_dir="folder/trace.csv"),
            None,
            "--out folder/trace.csv: is a file; name a folder",
        ),
        (
            TrainOptions(out_dir="folder"),
            "folder/trace.csv",
            "--out's trace.csv would overwrite --data",
        ),
        (TrainOptions(stop_after=0), None, "--stop-after 0: must be >= 1"),
        (TrainOptions(resume_dir="nowhere"), None, "--resume nowhere: no such run folder"),
    ],
)
def test_a_bad_option_is_one_line_before_any_process(
    options, data, message, tmp_path, monkeypatch, no_launch
):
    from pathlib import Path

    monkeypatch.chdir(tmp_path)
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "trace.csv").write_text("print('a text to train on')\n" * 100)
    paths = {
        name: Path(value) if isinstance(value, str) else value
        for name, value in vars(options).items()
        if name in ("out_dir", "resume_dir")
    }
    options = TrainOptions(**{**vars(options), **paths})
    plan = make_run_plan(load("worked-example"), 2, data)
    with pytest.raises(UserError) as refused:
        launch.train(plan, options)
    assert message in str(refused.value) and "\n" not in str(refused.value)
    assert (tmp_path / "folder" / "trace.csv").read_text().startswith("print(")  # the data kept
