"""Processes on this machine: torchrun's environment, a rank's environment, waiting and stopping.

What every run kind's local launcher and every rank share (``trainer/kinds.py``): the rank's
environment (torchrun's variables, or the ones ``launch_local`` sets), how an island's processes are
wrapped (``IslandLaunch``: a command prefix such as ``ip netns exec ns0`` and extra environment), and
which device a process trains on.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from islands.errors import UserError

from ..config import RunPlan
from .spec import LaunchSpec

POLL_S = 0.2
DIST_VARIABLES = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class DistEnv:
    rank: int
    world_size: int
    local_rank: int


@dataclass(frozen=True)
class IslandLaunch:
    """How to start one island's processes: a command prefix, extra environment variables and the
    emulated WAN's pacer (``paced.py``; None: no pacing)."""

    prefix: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    wan_pacer: str | None = None


def distributed_env(environ: Mapping[str, str] = os.environ) -> DistEnv | None:
    """torchrun's (or our launcher's) variables, or None when this process was started by hand."""
    if not all(name in environ for name in DIST_VARIABLES):
        return None
    try:
        return DistEnv(
            int(environ["RANK"]), int(environ["WORLD_SIZE"]), int(environ.get("LOCAL_RANK", "0"))
        )
    except ValueError:
        raise UserError(
            f"RANK={environ['RANK']!r}, WORLD_SIZE={environ['WORLD_SIZE']!r}: must be integers"
        ) from None


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def rank_environment(
    rank: int, plan: RunPlan, master_addr: str, port: int, wrap: IslandLaunch, spec: LaunchSpec
) -> dict:
    """The environment of a process a local launcher starts: torchrun's variables, the island's own
    and the launch spec (``launched``, with the island's pacer)."""
    spec = replace(spec, launched=True, wan_pacer=wrap.wan_pacer)
    return {
        **os.environ,
        "RANK": str(rank),
        "WORLD_SIZE": str(plan.world_size),
        "LOCAL_RANK": str(rank % plan.ranks_per_island),
        "LOCAL_WORLD_SIZE": str(plan.ranks_per_island),
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(port),
        "OMP_NUM_THREADS": "1",
        **wrap.env,
        **spec.environment(),
    }


@dataclass(frozen=True)
class LocalLaunch:
    """What a run kind's local launcher gets: the run's launch spec (the plan's file, the folders, when
    to stop), the plan, the rendezvous (``master_addr``:``port``), how each island's processes are
    wrapped and (Decoupled DiLoCo) how the syncer's is."""

    run: LaunchSpec
    plan: RunPlan
    master_addr: str
    port: int
    island_launch: Callable[[int], IslandLaunch] | None = None
    syncer_launch: IslandLaunch = IslandLaunch()

    def wrap(self, island: int) -> IslandLaunch:
        return self.island_launch(island) if self.island_launch else IslandLaunch()

    def environment(self, rank: int, **process: Any) -> tuple[list[str], dict]:
        """(command prefix, environment) of ``rank``'s process, wrapped as its island's; ``process``:
        its own fields of the launch spec (``incarnation``, ``join_at_s``...)."""
        wrap = self.wrap(rank // self.plan.ranks_per_island)
        return list(wrap.prefix), rank_environment(
            rank, self.plan, self.master_addr, self.port, wrap, replace(self.run, **process)
        )

    def syncer_environment(self) -> tuple[list[str], dict]:
        """(command prefix, environment) of the syncer's process, which follows the ranks."""
        wrap = self.syncer_launch
        return list(wrap.prefix), rank_environment(
            self.plan.world_size,
            self.plan,
            self.master_addr,
            self.port,
            wrap,
            replace(self.run, syncer=True),
        )


@dataclass(frozen=True)
class RankRun:
    """What one process of a run gets: the plan, torchrun's environment (None: started by hand, the
    Decoupled DiLoCo syncer), its launch spec, where to write and resume from, and when to stop."""

    plan: RunPlan
    env: DistEnv | None
    spec: LaunchSpec
    out_dir: Path | None
    resume_dir: Path | None
    stop_after: int | None
    default_out: Callable[[], Path]  # the output folder when none was given


def rank_command() -> list[str]:
    """The command every process a local launcher starts runs (its launch spec says the rest)."""
    return [sys.executable, "-m", "islands.trainer"]


def check_world_size(plan: RunPlan, env: DistEnv) -> None:
    if env.world_size != plan.world_size:
        raise UserError(
            f"WORLD_SIZE={env.world_size}, but the scenario needs {plan.islands} islands x "
            f"{plan.ranks_per_island} trainer.ranks_per_island = {plan.world_size} processes"
        )


def wait_all(children: list[subprocess.Popen]) -> int:
    """Wait for every child; as soon as one fails, return its exit code (the caller stops the rest)."""
    while True:
        codes = [child.poll() for child in children]
        failed = [code for code in codes if code not in (None, 0)]
        if failed:
            return failed[0]
        if all(code == 0 for code in codes):
            return 0
        time.sleep(POLL_S)


def stop_all(children: list[subprocess.Popen]) -> None:
    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    for child in children:
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()


def uses_cuda(choice: str, ranks_per_island: int) -> bool:
    """Whether this host's processes train on CUDA. Islands may share a GPU (the exchange between
    islands goes over gloo on CPU-staged tensors, ``torch_groups``); only an island's own ranks, whose
    gradients NCCL averages, need a GPU each. ``auto`` takes CUDA when the host has that many,
    ``cuda`` without them is one clear error."""
    available = torch.cuda.device_count() if torch.cuda.is_available() else 0
    needed = max(1, ranks_per_island)
    if choice == "cuda" and available < needed:
        raise UserError(
            f'trainer.device = "cuda": an island\'s {ranks_per_island} ranks average gradients over '
            f'NCCL, one GPU each, and this host has {available} GPU(s); set trainer.device = "cpu" '
            f"or lower trainer.ranks_per_island"
        )
    return choice == "cuda" or (choice == "auto" and needed <= available)


def gpu_index(host_index: int, available: int) -> int:
    """This process's GPU: processes dealt round-robin over the host's GPUs, so islands share GPUs
    when there are fewer than processes and an island's consecutive ranks (``ranks_per_island`` <=
    ``available``) land on distinct ones."""
    return host_index % available


def pick_device(choice: str, host_index: int, ranks_per_island: int) -> torch.device:
    """This process's device; ``host_index`` is its index among its host's processes."""
    if not uses_cuda(choice, ranks_per_island):
        return torch.device("cpu")
    index = gpu_index(host_index, torch.cuda.device_count())
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def host_processes(env: DistEnv, spec: LaunchSpec) -> tuple[int, int]:
    """(this process's index among its host's processes, how many its host runs): every rank for
    the local launcher, which runs the whole world on one host; torchrun's LOCAL_RANK and
    LOCAL_WORLD_SIZE otherwise."""
    if spec.launched:
        return env.rank, env.world_size
    return env.local_rank, int(os.environ.get("LOCAL_WORLD_SIZE", env.local_rank + 1))
