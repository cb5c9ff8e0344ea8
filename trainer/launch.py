"""Starting the processes: one per rank, locally or under torchrun, with the same entry point.

``islands train`` looks for torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). If
it is there the command *is* one rank (``run_process``); if not it is the local launcher
(``launch_local``), which starts ``python -m islands.cli train ...`` once per rank with that
environment set, so both paths run the same code. Rank r belongs to island r // R (R =
``trainer.ranks_per_island``): under torchrun with ``--nproc-per-node=R`` each node is one island.
Both ask the plan's run kind (``kinds.kind_of``: fixed, elastic or decoupled) how.

Each island's processes can be wrapped: ``IslandLaunch`` gives a command prefix (e.g. ``ip netns exec
ns0``) and extra environment (e.g. GLOO_SOCKET_IFNAME), and ``master_addr`` may be an address other
than 127.0.0.1, which is what network emulation needs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from .config import RunPlan
from .kinds import kind_of
from .runtime.processes import DistEnv, IslandLaunch, LocalLaunch, RankRun, free_port, uses_cuda
from .runtime.spec import LaunchSpec


def launch_local(train_args: list[str], plan: RunPlan, master_addr: str = "127.0.0.1",
                 island_launch: Callable[[int], IslandLaunch] | None = None, port: int | None = None,
                 syncer_launch: IslandLaunch = IslandLaunch()) -> int:
    """Start every process of ``plan`` on this machine and wait; returns the first failing exit code or 0.
    ``port`` is the rendezvous port; by default a free one on ``master_addr``, which must then be an
    address of this host's namespace (pass ``port`` for one that exists only inside island 0's).
    ``island_launch(island)`` wraps an island's processes, ``syncer_launch`` a Decoupled DiLoCo
    syncer's (which hosts the store at ``master_addr``)."""
    port = port or free_port(master_addr)
    uses_cuda(plan.spec.device, plan.ranks_per_island)  # one line before any process starts
    return kind_of(plan).launch(LocalLaunch(train_args, plan, master_addr, port, island_launch, syncer_launch))


def run_process(plan: RunPlan, env: DistEnv | None, spec: LaunchSpec, out_dir: Path | None,
                resume_dir: Path | None, stop_after: int | None, default_out: Callable[[], Path]) -> dict | None:
    """One process's whole life (a rank, or the syncer, as its launch ``spec`` says): train, write the
    outputs (the process that reports), leave; returns the summary on the process that wrote it."""
    return kind_of(plan).run_rank(RankRun(plan, env, spec, out_dir, resume_dir, stop_after, default_out))
