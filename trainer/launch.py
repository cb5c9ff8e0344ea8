"""Starting the processes: one per rank, locally or under torchrun, with the same entry point.

``islands train`` looks for torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). If
it is there the command *is* one rank (``run_process``); if not it is the local launcher
(``launch_local``), which starts ``python -m islands.cli train ...`` once per rank with that
environment set, so both paths run the same code. Rank r belongs to island r // R (R =
``trainer.ranks_per_island``): under torchrun with ``--nproc-per-node=R`` each node is one island.

Each island's processes can be wrapped: ``IslandLaunch`` gives a command prefix (e.g. ``ip netns exec
ns0``) and extra environment (e.g. GLOO_SOCKET_IFNAME), and ``master_addr`` may be an address other
than 127.0.0.1, which is what network emulation needs.
"""

from __future__ import annotations

import gc
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Callable, Mapping

import torch
import torch.distributed as dist

from islands.errors import UserError

from .comm import StagedGroup, TorchGroup
from .config import RunPlan
from .launch_decoupled import launch_decoupled, run_learner
from .launch_elastic import launch_elastic, run_elastic_process
from .loop import Trainer
from .world import Groups
from .paced import paced_from_environment

POLL_S = 0.2
LAUNCHED_VARIABLE = "ISLANDS_LAUNCHED"  # set in the processes that ``launch_local`` starts
DIST_VARIABLES = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class DistEnv:
    rank: int
    world_size: int
    local_rank: int


@dataclass(frozen=True)
class IslandLaunch:
    """How to start one island's processes: a command prefix and extra environment variables."""

    prefix: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)


def distributed_env(environ: Mapping[str, str] = os.environ) -> DistEnv | None:
    """torchrun's (or our launcher's) variables, or None when this process was started by hand."""
    if not all(name in environ for name in DIST_VARIABLES):
        return None
    try:
        return DistEnv(int(environ["RANK"]), int(environ["WORLD_SIZE"]), int(environ.get("LOCAL_RANK", "0")))
    except ValueError:
        raise UserError(f"RANK={environ['RANK']!r}, WORLD_SIZE={environ['WORLD_SIZE']!r}: must be integers") from None


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def rank_environment(rank: int, plan: RunPlan, master_addr: str, port: int, extra: Mapping[str, str]) -> dict:
    return {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(plan.world_size),
            "LOCAL_RANK": str(rank % plan.ranks_per_island), "LOCAL_WORLD_SIZE": str(plan.ranks_per_island),
            "MASTER_ADDR": master_addr, "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1",
            LAUNCHED_VARIABLE: "1", **extra}


def launch_local(train_args: list[str], plan: RunPlan, master_addr: str = "127.0.0.1",
                 island_launch: Callable[[int], IslandLaunch] | None = None, port: int | None = None,
                 syncer_launch: IslandLaunch = IslandLaunch()) -> int:
    """Start every rank of ``plan`` on this machine and wait; returns the first failing exit code or 0.
    ``port`` is the rendezvous port; by default a free one on ``master_addr``, which must then be an
    address of this host's namespace (pass ``port`` for one that exists only inside island 0's).
    An elastic run (churn) is started by ``launch_elastic.launch_elastic`` instead, a decoupled one
    (its syncer wrapped by ``syncer_launch``, which hosts the store at ``master_addr``) by
    ``launch_decoupled.launch_decoupled``."""
    port = port or free_port(master_addr)
    uses_cuda(plan.spec.device, plan.ranks_per_island)  # one line before any process starts
    if not plan.schedule.coupled:
        def learner(rank: int) -> tuple[list[str], dict]:
            wrap = island_launch(rank) if island_launch else IslandLaunch()
            return list(wrap.prefix), rank_environment(rank, plan, master_addr, port, wrap.env)
        syncer = (list(syncer_launch.prefix),
                  rank_environment(plan.world_size, plan, master_addr, port, syncer_launch.env))
        return launch_decoupled(train_args, plan, master_addr, port, learner, syncer)
    if plan.elastic:
        def environment(rank: int) -> tuple[list[str], dict]:
            wrap = island_launch(rank // plan.ranks_per_island) if island_launch else IslandLaunch()
            return list(wrap.prefix), rank_environment(rank, plan, master_addr, port, wrap.env)
        return launch_elastic(train_args, plan, master_addr, port, environment)
    children = []
    for rank in range(plan.world_size):
        wrap = island_launch(rank // plan.ranks_per_island) if island_launch else IslandLaunch()
        command = [*wrap.prefix, sys.executable, "-m", "islands.cli", "train", *train_args]
        children.append(subprocess.Popen(command, env=rank_environment(rank, plan, master_addr, port, wrap.env)))
    try:
        return wait_all(children)
    finally:
        stop_all(children)


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
        raise UserError(f"trainer.device = \"cuda\": an island's {ranks_per_island} ranks average gradients over "
                        f"NCCL, one GPU each, and this host has {available} GPU(s); set trainer.device = \"cpu\" "
                        f"or lower trainer.ranks_per_island")
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


def group_backends(device: torch.device) -> tuple[str, str]:
    """(the world's and the islands' exchange backend, the backend inside an island): gloo between
    islands, always (its tensors staged on the CPU, so islands may share a GPU), NCCL inside an island
    on CUDA."""
    return "gloo", "nccl" if device.type == "cuda" else "gloo"


def host_processes(env: DistEnv) -> tuple[int, int]:
    """(this process's index among its host's processes, how many its host runs): every rank for
    the local launcher, which runs the whole world on one host; torchrun's LOCAL_RANK and
    LOCAL_WORLD_SIZE otherwise."""
    if os.environ.get(LAUNCHED_VARIABLE):
        return env.rank, env.world_size
    return env.local_rank, int(os.environ.get("LOCAL_WORLD_SIZE", env.local_rank + 1))


def torch_groups(plan: RunPlan, rank: int, device: torch.device = torch.device("cpu")) -> Groups:
    """Create every group in the same order on every rank (``new_group`` is collective): the world and
    the cross-island groups over gloo, their tensors staged on the CPU (``comm.StagedGroup``), the
    intra-island ones over NCCL on CUDA (``group_backends``)."""
    r, m = plan.ranks_per_island, plan.islands
    between, inside = group_backends(device)
    world = StagedGroup(TorchGroup(list(range(plan.world_size)), dist.group.WORLD))
    groups = Groups(world=world, cross=world)
    for local in range(r):
        ranks = [island * r + local for island in range(m)]
        handle = dist.new_group(ranks, backend=between)
        if rank in ranks:
            groups.cross = StagedGroup(TorchGroup(ranks, handle))
    if r == 1:
        return groups
    for purpose in ("intra_grad", "intra_sync"):
        for island in range(m):
            ranks = list(range(island * r, island * r + r))
            handle = dist.new_group(ranks, backend=inside)
            if rank in ranks:
                setattr(groups, purpose, TorchGroup(ranks, handle))
    return groups


def run_process(plan: RunPlan, env: DistEnv, out_dir: Path | None, resume_dir: Path | None,
                stop_after: int | None, default_out: Callable[[], Path]) -> dict | None:
    """One rank's whole life: join the group, train, write outputs (rank 0), leave."""
    if env.world_size != plan.world_size:
        raise UserError(f"WORLD_SIZE={env.world_size}, but the scenario needs {plan.islands} islands x "
                        f"{plan.ranks_per_island} trainer.ranks_per_island = {plan.world_size} processes")
    if not plan.schedule.coupled:
        return run_learner(plan, env.rank, pick_device(plan.spec.device, host_processes(env)[0], 1))
    if plan.elastic:
        return run_elastic_process(plan, env.rank, os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                                   out_dir, resume_dir, stop_after, default_out)
    torch.set_num_threads(1)
    device = pick_device(plan.spec.device, host_processes(env)[0], plan.ranks_per_island)
    dist.init_process_group(group_backends(device)[0], rank=env.rank,
                            world_size=env.world_size, timeout=timedelta(seconds=plan.spec.timeout_s))
    try:
        return train_in_group(plan, env.rank, device, out_dir, resume_dir, stop_after, default_out)
    finally:
        dist.destroy_process_group()
        # What still holds a group's handle (a reference cycle) is freed now, while the interpreter is
        # alive: gloo's threads freed at interpreter exit can abort the process ("terminate called").
        gc.collect()


def train_in_group(plan: RunPlan, rank: int, device: torch.device, out_dir: Path | None, resume_dir: Path | None,
                   stop_after: int | None, default_out: Callable[[], Path]) -> dict | None:
    groups = torch_groups(plan, rank, device)
    groups.cross = paced_from_environment(groups.cross, list(range(plan.islands)))
    out_dir = Path(groups.world.all_gather_object(str(out_dir or default_out()))[0])
    trainer = Trainer(plan, rank, groups, device, out_dir, resume_dir)
    trainer.run(stop_after)
    return trainer.finish()
