"""Resuming only from verified checkpoints, writing nothing before every process agrees, never over
another run, and the fault hooks' own parsing. Multi-process runs are tiny and have timeouts."""

import json
import os
import subprocess
import sys

import pytest
import torch
from helpers.multiprocess import TINY, train

from islands.cli import main
from islands.errors import UserError
from islands.trainer.core import faults
from islands.trainer.core.data import Document, split_validation
from islands.trainer.runtime.processes import free_port

SETS = ["schedule.inner_steps=2", "schedule.outer_steps=2", "trainer.checkpoint_every=1"]


def sets_args(sets):
    return [a for s in [*TINY, *sets] for a in ("--set", s)]


def flip_a_tensor_bit(path):
    """Flip one bit inside the largest tensor record of a checkpoint (the zip stays well formed)."""
    import zipfile

    with zipfile.ZipFile(path) as archive:
        record = max(archive.infolist(), key=lambda info: info.file_size)
        offset = (
            record.header_offset
            + 30
            + len(record.filename)
            + len(record.extra)
            + record.file_size // 2
        )
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x10
    path.write_bytes(bytes(data))


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory):
    """A two-island run stopped after its first period, with its checkpoint."""
    out = tmp_path_factory.mktemp("stopped")
    train(out, "--stop-after", "1", sets=SETS)
    return out


def copy_run(source, target):
    import shutil

    shutil.copytree(source, target)
    return target


def snapshot(run):
    return {
        path.relative_to(run): path.read_bytes()
        for path in sorted(run.rglob("*"))
        if path.is_file()
    }


def test_a_flipped_bit_is_one_line_exit_2_and_nothing_is_written(stopped_run, tmp_path):
    run = copy_run(stopped_run, tmp_path / "run")
    flip_a_tensor_bit(run / "checkpoints" / "period-000001" / "rank-0001.pt")
    before = snapshot(run)
    command = [
        sys.executable,
        "-m",
        "islands.cli",
        "train",
        "worked-example",
        "--workers",
        "2",
        "--resume",
        str(run),
        *sets_args(SETS),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert (
        done.stderr.count("\n") == 1
        and "rank-0001.pt: damaged" in done.stderr
        and "CRC-32" in done.stderr
    )
    assert snapshot(run) == before


def test_under_torchrun_every_rank_verifies_before_anyone_writes(stopped_run, tmp_path):
    """Two ranks started as torchrun would (no launcher to check first): rank 1's file is damaged,
    rank 1 says so in one line, rank 0 stops quietly, and neither touches the run's files."""
    run = copy_run(stopped_run, tmp_path / "run")
    flip_a_tensor_bit(run / "checkpoints" / "period-000001" / "rank-0001.pt")
    before = snapshot(run)
    port = free_port("127.0.0.1")
    command = [
        sys.executable,
        "-m",
        "islands.cli",
        "train",
        "worked-example",
        "--workers",
        "2",
        "--resume",
        str(run),
        *sets_args(SETS),
    ]
    ranks = [
        subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={
                **os.environ,
                "RANK": str(rank),
                "WORLD_SIZE": "2",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
                "OMP_NUM_THREADS": "1",
            },
        )
        for rank in range(2)
    ]
    outputs = [rank.communicate(timeout=120) for rank in ranks]
    assert [rank.returncode for rank in ranks] == [2, 2]
    errors = "".join(stderr for _, stderr in outputs).strip().splitlines()
    assert len(errors) == 1 and "rank-0001.pt: damaged" in errors[0]
    assert snapshot(run) == before


def test_a_latest_pointer_that_is_not_text_is_one_line(stopped_run, tmp_path, capsys):
    run = copy_run(stopped_run, tmp_path / "run")
    (run / "checkpoints" / "LATEST").write_bytes(b"\xff\xfe\x00period")
    assert (
        main(["train", "worked-example", "--workers", "2", "--resume", str(run), *sets_args(SETS)])
        == 2
    )
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "LATEST: cannot be read" in error


def test_out_holding_a_run_is_refused_without_resume_or_force(stopped_run, tmp_path, capsys):
    run = copy_run(stopped_run, tmp_path / "run")
    before = snapshot(run)
    assert (
        main(["train", "worked-example", "--workers", "2", "--out", str(run), *sets_args(SETS)])
        == 2
    )
    error = capsys.readouterr().err
    assert "holds a run already" in error and "--resume" in error and "--force" in error
    assert snapshot(run) == before


def test_force_replaces_the_old_run_and_keeps_other_files(stopped_run, tmp_path):
    run = copy_run(stopped_run, tmp_path / "run")
    (run / "notes.txt").write_text("mine")
    train(run, "--force", sets=["schedule.inner_steps=2", "schedule.outer_steps=1"])
    assert (run / "checkpoints" / "LATEST").read_text().strip() == "period-000001"
    assert [
        json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()
    ] == [1, 2]
    assert (run / "notes.txt").read_text() == "mine"


def test_one_text_file_is_enough_data():
    text = b"".join(b"line %d of a single file\n" % i for i in range(1000))
    train_part, held_out = split_validation([Document("one.txt", text)], 0.1, 0, "one.txt")
    assert train_part[0].data + held_out[0].data == text
    assert held_out[0].data.startswith(b"line ") and 0.09 < len(held_out[0].data) / len(text) < 0.11


@pytest.mark.parametrize(
    "setting, island, step, check",
    [
        ("nan@1:2", 1, 2, lambda x: torch.isnan(x).all()),
        ("inf@1:2", 1, 2, lambda x: torch.isinf(x).all()),
        ("scale:1e6@1:2", 1, 2, lambda x: torch.equal(x, torch.full((3,), 2e6))),
        ("scale:1e6@1:2", 1, 3, lambda x: torch.equal(x, torch.full((3,), 2.0))),
        ("scale:1e6@1:2", 0, 2, lambda x: torch.equal(x, torch.full((3,), 2.0))),
    ],
)
def test_the_fault_hook_poisons_only_its_island_and_outer_step(
    monkeypatch, setting, island, step, check
):
    monkeypatch.setenv(faults.FAULT_VARIABLE, setting)
    assert check(faults.poisoned(torch.full((3,), 2.0), island, step))


@pytest.mark.parametrize(
    "variable, setting",
    [
        (faults.FAULT_VARIABLE, "nan@x:1"),
        (faults.FAULT_VARIABLE, "scale:big@1:1"),
        (faults.FAULT_VARIABLE, "zero@1:1"),
        (faults.KILL_VARIABLE, "somewhere:1:0"),
        (faults.KILL_VARIABLE, "inner-step:1"),
    ],
)
def test_a_malformed_fault_setting_is_one_clear_error(monkeypatch, variable, setting, capsys):
    monkeypatch.setenv(variable, setting)
    with pytest.raises(UserError, match=variable):
        faults.poisoned(
            torch.zeros(1), 0, 0
        ) if variable == faults.FAULT_VARIABLE else faults.kill_point("inner-step", 0)
    assert main(["train", "worked-example", "--workers", "2", *sets_args(SETS)]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and variable in error
