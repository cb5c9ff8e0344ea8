"""MULTI-PROCESS tests: real ``islands train`` runs (torch.distributed, gloo, one process per rank).

Each run starts 2-4 Python processes, so each test takes several seconds on 2 cores; every run has
a timeout. Bad-input tests run in this process and start nothing.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from helpers.multiprocess import RUN_TIMEOUT_S, TINY, global_flat, rank_state, train

from islands.cli import main
from islands.scenarios import load
from islands.simulator import simulate


def test_two_islands_of_two_ranks_train_and_write_every_output(tmp_path):
    sets = [
        "schedule.inner_steps=3",
        "schedule.outer_steps=2",
        "trainer.ranks_per_island=2",
        "schedule.bits=8",
    ]
    stdout = train(tmp_path, sets=sets)
    assert stdout.count("diloco period") == 2
    states = [rank_state(tmp_path, 2, rank) for rank in range(4)]
    assert all(torch.equal(global_flat(states[0]), global_flat(s)) for s in states[1:])
    summary = json.loads((tmp_path / "summary.json").read_text())
    predicted = simulate(load("worked-example", sets + ["island.0.replicas=2"])).summary
    assert set(summary) == set(predicted)
    assert (
        summary["workers"] == 2 and summary["syncs"] == 2 and summary["network_model"] == "measured"
    )
    metrics = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2, 3, 4, 5, 6]
    assert [m["eval_loss"] is not None for m in metrics] == [False, False, True] * 2
    assert metrics[-1]["tokens"] == 6 * 4 * 2 * 16
    trace = (tmp_path / "trace.csv").read_text().splitlines()
    assert trace[0] == "time_start_s,time_end_s,worker,island,kind,bytes,fragment,outer_step"


@pytest.mark.parametrize(
    "schedule",
    [
        ("schedule.algorithm=streaming", "schedule.overlap_steps=1", "trainer.fragment_alpha=0.5"),
        ("schedule.algorithm=eager",),
    ],
    ids=["streaming", "eager"],
)
def test_resume_reproduces_the_uninterrupted_run_exactly(tmp_path, schedule):
    """Eager has every fragment's exchange in flight at the checkpoint: the resumed run sends again
    what each island had sent."""
    sets = [
        *schedule,
        "schedule.inner_steps=4",
        "schedule.fragments=2",
        "schedule.outer_steps=3",
        "schedule.bits=4",
    ]
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    train(whole, sets=sets)
    train(parts, "--stop-after", "1", sets=sets)
    assert (parts / "checkpoints" / "LATEST").read_text().strip() == "period-000001"
    train(parts, "--resume", str(parts), sets=sets)
    for rank in range(2):
        a, b = rank_state(whole, 3, rank), rank_state(parts, 3, rank)
        assert torch.equal(global_flat(a), global_flat(b))
        assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    losses = [
        [json.loads(line)["train_loss"] for line in (d / "metrics.jsonl").read_text().splitlines()]
        for d in (whole, parts)
    ]
    assert losses[0] == losses[1] and len(losses[0]) == 12


def test_ddps_buckets_sent_during_the_real_backward_pass_train_the_flat_runs_weights(tmp_path):
    """Unpaced, over gloo between processes: each bucket's call as its gradients exist, the same
    weights as the flat exchange after the backward pass, and run.json says where they were ready."""
    sets = [
        "schedule.algorithm=ddp",
        "schedule.outer_steps=3",
        "exchange.calls=buckets",
        "exchange.bucket_cap_mb=1000",  # 2e10 B of values in 20 buckets; the tiny GPT's 10,944 too
        "schedule.bits=32",
    ]
    flat, overlapped = tmp_path / "flat", tmp_path / "overlapped"
    train(flat, sets=sets)
    train(overlapped, sets=[*sets, "schedule.backward_overlap=0.5"])
    for rank in range(2):
        a, b = rank_state(flat, 1, rank), rank_state(overlapped, 1, rank)
        assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    buckets = json.loads((overlapped / "run.json").read_text())["backward_buckets"]
    assert len(buckets["ready_fractions"]) == 20
    assert "backward_buckets" not in json.loads((flat / "run.json").read_text())


def run_cli(*argv):
    return main(
        [
            "train",
            "worked-example",
            "--workers",
            "2",
            *[a for s in TINY for a in ("--set", s)],
            *argv,
        ]
    )


def test_a_corrupt_checkpoint_is_one_line_and_exit_2(tmp_path, capsys):
    folder = tmp_path / "checkpoints" / "period-000001"
    folder.mkdir(parents=True)
    (folder / "rank-0000.pt").write_bytes(b"not a checkpoint")
    (tmp_path / "checkpoints" / "LATEST").write_text("period-000001\n")
    assert run_cli("--resume", str(tmp_path)) == 2
    error = capsys.readouterr().err.strip()
    assert (
        error.startswith("islands train: error: ")
        and "rank-0000.pt: damaged, not a readable checkpoint" in error
    )
    assert len(error.splitlines()) == 1


def test_data_without_text_is_refused(tmp_path, capsys):
    (tmp_path / "blob.bin").write_bytes(b"\x00\x01\x02")
    assert run_cli("--data", str(tmp_path)) == 2
    assert "holds no UTF-8 text file" in capsys.readouterr().err


def test_torchrun_with_the_wrong_world_size_is_refused(monkeypatch, capsys):
    for name, value in {
        "RANK": "0",
        "WORLD_SIZE": "3",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "1",
    }.items():
        monkeypatch.setenv(name, value)
    assert run_cli() == 2
    assert "WORLD_SIZE=3, but the scenario needs 2 islands x 1" in capsys.readouterr().err


@pytest.mark.parametrize("workers", ["1", "9"])
def test_workers_must_fit_the_scenario(workers, capsys):
    assert main(["train", "worked-example", "--workers", workers]) == 2
    assert "--workers" in capsys.readouterr().err


class StartedRank:
    """Stands in for a rank's process: records how it was started and exits at once with 0."""

    started: list = []

    def __init__(self, command, env):
        self.started.append((command, env))

    def poll(self):
        return 0

    def wait(self, timeout):
        return 0


def test_launch_local_uses_the_given_rendezvous_port_and_island_prefix(monkeypatch):
    from islands.trainer import launch
    from islands.trainer.kinds import make_run_plan
    from islands.trainer.runtime.processes import IslandLaunch
    from islands.trainer.runtime.spec import LaunchSpec

    monkeypatch.setattr(subprocess, "Popen", StartedRank)
    StartedRank.started.clear()
    plan = make_run_plan(load("worked-example", ["trainer.ranks_per_island=2"]), 2)

    def wrap(island):
        return IslandLaunch(("ip", "netns", "exec", f"ns{island}"), {"ISLAND": str(island)})

    assert launch.launch_local(plan, LaunchSpec(out_dir="x"), "10.213.0.1", wrap, port=29555) == 0
    assert len(StartedRank.started) == plan.world_size
    for rank, (command, env) in enumerate(StartedRank.started):
        island = rank // plan.ranks_per_island
        assert command[:4] == ["ip", "netns", "exec", f"ns{island}"]
        where = (env["MASTER_ADDR"], env["MASTER_PORT"], env["RANK"], env["ISLAND"])
        assert where == ("10.213.0.1", "29555", str(rank), str(island))


MEMBER = textwrap.dedent("""
    import os, sys, torch, torch.distributed as dist
    from islands.trainer.exchange.comm import TorchGroup
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=size)
    group = TorchGroup(list(range(size)), dist.group.WORLD)
    values = 40_000  # 160 000 B per chunk: three 64 KiB pieces, the last one partial
    chunks = [torch.arange(values, dtype=torch.float32) + 1000 * rank + to for to in range(size)]
    received = group.all_to_all(chunks)
    gathered = group.all_gather(torch.full((2, 50_001), rank, dtype=torch.int64))
    ok = all(torch.equal(received[source], torch.arange(values, dtype=torch.float32) + 1000 * source + rank)
             for source in range(size))
    ok &= all(torch.equal(gathered[member], torch.full((2, 50_001), member, dtype=torch.int64))
              for member in range(size))
    dist.destroy_process_group()
    sys.exit(0 if ok else 3)
""")


def test_torch_group_collectives_deliver_every_piece_to_the_right_member():
    from islands.trainer.runtime.processes import free_port

    env = {
        **os.environ,
        "WORLD_SIZE": "3",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port("127.0.0.1")),
    }
    members = [
        subprocess.Popen([sys.executable, "-c", MEMBER], env={**env, "RANK": str(rank)})
        for rank in range(3)
    ]
    assert [member.wait(timeout=RUN_TIMEOUT_S) for member in members] == [0, 0, 0]
