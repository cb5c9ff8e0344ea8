"""A fixed run: every island from start to end over fixed torch.distributed groups.

Locally ``launch`` starts one process per rank (``islands train`` with the launcher's arguments);
``run_rank`` is one rank's whole life: join the process group, build the groups (gloo between
islands, NCCL inside an island on CUDA), train, write the outputs (rank 0), leave.
"""

from __future__ import annotations

import gc
import subprocess
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from islands.schedules.gather import STORE

from .config import RunPlan
from .core.loop import Trainer
from .core.memory import start_rank_process
from .core.world import Groups
from .exchange.comm import StagedGroup, TorchGroup
from .exchange.object_store import DirectoryStore, ObjectStore
from .runtime.paced import paced, paced_store, store_latency
from .runtime.processes import (
    LocalLaunch,
    RankRun,
    check_world_size,
    host_processes,
    pick_device,
    rank_command,
    stop_all,
    wait_all,
)


def launch(request: LocalLaunch) -> int:
    """Start every rank on this machine and wait; returns the first failing exit code or 0."""
    children = []
    for rank in range(request.plan.world_size):
        prefix, env = request.environment(rank)
        children.append(subprocess.Popen([*prefix, *rank_command()], env=env))
    try:
        return wait_all(children)
    finally:
        stop_all(children)


def run_rank(run: RankRun) -> dict | None:
    """One rank's whole life: join the group, train, write outputs (rank 0), leave."""
    plan, env = run.plan, run.env
    assert env is not None, "a rank has torchrun's or the launcher's environment (Kind.runs_here)"
    check_world_size(plan, env)
    start_rank_process()
    device = pick_device(plan.spec.device, host_processes(env, run.spec)[0], plan.ranks_per_island)
    dist.init_process_group(
        group_backends(device)[0],
        rank=env.rank,
        world_size=env.world_size,
        timeout=timedelta(seconds=plan.spec.timeout_s),
    )
    try:
        return train_in_group(
            plan,
            env.rank,
            device,
            run.out_dir,
            run.resume_dir,
            run.stop_after,
            run.default_out,
            run.spec.wan_pacer,
            run.spec.object_store,
        )
    finally:
        dist.destroy_process_group()
        # What still holds a group's handle (a reference cycle) is freed now, while the interpreter is
        # alive: gloo's threads freed at interpreter exit can abort the process ("terminate called").
        gc.collect()


def group_backends(device: torch.device) -> tuple[str, str]:
    """(the world's and the islands' exchange backend, the backend inside an island): gloo between
    islands, always (its tensors staged on the CPU, so islands may share a GPU), NCCL inside an island
    on CUDA."""
    return "gloo", "nccl" if device.type == "cuda" else "gloo"


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


def train_in_group(
    plan: RunPlan,
    rank: int,
    device: torch.device,
    out_dir: Path | None,
    resume_dir: Path | None,
    stop_after: int | None,
    default_out: Callable[[], Path],
    wan_pacer: str | None = None,
    object_store: str | None = None,
) -> dict | None:
    groups = torch_groups(plan, rank, device)
    groups.cross = paced(groups.cross, wan_pacer, list(range(plan.islands)))
    out_dir = Path(groups.world.all_gather_object(str(out_dir or default_out()))[0])
    if plan.scenario.network.gather == STORE:
        groups.store = run_store(plan, rank, groups, out_dir, wan_pacer, object_store)
    trainer = Trainer(plan, rank, groups, device, out_dir, resume_dir)
    trainer.run(stop_after)
    return trainer.finish()


def run_store(
    plan: RunPlan,
    rank: int,
    groups: Groups,
    out_dir: Path,
    wan_pacer: str | None,
    object_store: str | None = None,
) -> ObjectStore:
    """The run's object store (``network.gather = "store"``): the store served at ``object_store``
    (a host behind its own emulated link: its latency slept where the kernel has no netem,
    ``runtime.paced.store_latency``), else a directory of its own under ``<out>/store``, named by
    rank 0 so that a resumed run never reads a payload its first attempt left there, paced on this
    island's emulated link (``runtime.paced.PacedStore``)."""
    if object_store is not None:
        return store_latency(object_store, wan_pacer, rank, plan.scenario.store)
    named = out_dir / "store" / uuid.uuid4().hex
    root = Path(groups.world.all_gather_object(str(named))[0])
    store = DirectoryStore(root)
    return paced_store(store, wan_pacer, rank, plan.islands, plan.scenario.store)
