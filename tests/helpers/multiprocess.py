"""Real ``islands train`` runs of a tiny model (one process per rank) and the checkpoints they leave."""

from __future__ import annotations

import subprocess
import sys

import torch

RUN_TIMEOUT_S = 180
TINY = [
    "trainer.n_layer=2",
    "trainer.n_head=1",
    "trainer.n_embd=16",
    "trainer.block_size=16",
    "trainer.batch_size=2",
    "trainer.corpus_bytes=60000",
    "trainer.eval_batches=2",
    "trainer.timeout_s=60",
]


def train(out_dir, *options, sets=()):
    command = [
        sys.executable,
        "-m",
        "islands.cli",
        "train",
        "worked-example",
        "--workers",
        "2",
        "--out",
        str(out_dir),
    ]
    for override in [*TINY, *sets]:
        command += ["--set", override]
    done = subprocess.run(
        command + list(options), capture_output=True, text=True, timeout=RUN_TIMEOUT_S
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def rank_state(out_dir, period, rank):
    path = out_dir / "checkpoints" / f"period-{period:06d}" / f"rank-{rank:04d}.pt"
    return torch.load(path, weights_only=True)


def global_flat(state):
    return torch.cat([g.flatten() for fragment in state["fragments"] for g in fragment["global"]])
