"""Starting a Decoupled DiLoCo run: the syncer's process, then one process per learner.

Every process runs ``islands train`` with the same arguments. The syncer's launch spec says so
(``runtime/spec.py``; ``ISLANDS_SYNCER=1`` under torchrun) and it hosts the run's ``TCPStore`` at
MASTER_ADDR:MASTER_PORT (so that, under an emulated WAN, every byte to or from it crosses the
syncer's link); each learner connects there. Locally, ``launch_decoupled`` also plays the scenario's
``[[event]]`` entries as an elastic run does (``runtime.island_processes.Fleet``): a ``leave`` SIGKILLs the
learner, a ``join`` starts a new process of it, which waits for the event's time and catches up from
the syncer. When no learner process is left it tells the syncer (``over``), which writes the outputs
and exits.

Under torchrun each learner is one node of one process (RANK = its island); start the syncer beside
them with ``ISLANDS_SYNCER=1 islands train SCENARIO --out DIR`` and MASTER_ADDR:MASTER_PORT naming
the syncer's own address, and the learners with the same MASTER_ADDR:MASTER_PORT.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import torch

from ..config import RunPlan
from ..core.loop import Trainer
from ..core.memory import start_rank_process
from ..runtime.island import incarnation
from ..runtime.island_processes import Fleet
from ..runtime.processes import (
    LocalLaunch,
    RankRun,
    check_world_size,
    host_processes,
    pick_device,
    rank_command,
)
from ..runtime.spec import LaunchSpec
from ..runtime.store import connect, run_time_s
from .learner import DecoupledWorld, SyncerLink
from .outputs import write_run
from .syncer_process import Syncer
from .wire import OVER

POLL_S = 0.05
SYNCER_EXIT_S = 600.0


def launch_decoupled(
    plan: RunPlan,
    master_addr: str,
    port: int,
    environment: Callable[..., tuple[list[str], Mapping[str, str]]],
    syncer_environment: tuple[list[str], Mapping[str, str]],
) -> int:
    """Start the syncer and the learners, play the events; returns the first failing exit code or 0.
    ``environment(rank, **process)`` gives a learner's command prefix and environment (``process``:
    its own fields of the launch spec), ``syncer_environment`` the syncer's (its spec says ``syncer``)."""
    command = rank_command()
    prefix, env = syncer_environment
    syncer = subprocess.Popen([*prefix, *command], env=env)

    def start(rank: int, join_at: float | None, starts: int) -> subprocess.Popen:
        prefix, env = environment(rank, incarnation=str(starts), join_at_s=join_at)
        return subprocess.Popen([*prefix, *command], env=env)

    store = connect(master_addr, port, False, plan.spec.timeout_s)
    fleet = Fleet(plan, start)
    origin_s = None  # time.time() at the run's time zero: the syncer's clock never pauses
    try:
        while (code := fleet.status()) is None:
            if syncer.poll() is not None and syncer.returncode:
                return syncer.returncode  # the syncer failed; the learners are stopped below
            if origin_s is None and syncer.poll() is None:
                now_s = run_time_s(store)
                origin_s = None if now_s is None else time.time() - now_s
            if origin_s is not None:
                fleet.play(time.time() - origin_s)
            time.sleep(POLL_S)  # (a syncer done with every learner exits while they do)
        if syncer.poll() is None:
            tell_over(store)
        return code or syncer.wait(timeout=SYNCER_EXIT_S)
    finally:
        for island in list(fleet.running):
            fleet.kill_island(island)
        if syncer.poll() is None:
            syncer.kill()
            syncer.wait()


def launch(request: LocalLaunch) -> int:
    """The decoupled kind's local launcher (``kinds.py``): the syncer wrapped by the request's
    ``syncer_launch``, each learner as its island."""
    return launch_decoupled(
        request.plan,
        request.master_addr,
        request.port,
        request.environment,
        request.syncer_environment(),
    )


def run_rank(run: RankRun) -> None:
    """The decoupled kind's process (``kinds.py``): the syncer (its launch spec says so), which writes
    the outputs and prints the summary, or a learner on its device."""
    plan = run.plan
    if run.spec.syncer:
        run_syncer(plan, run.out_dir or run.default_out())
        return None
    env = run.env
    assert env is not None, (
        "a learner has torchrun's or the launcher's environment (Kind.runs_here)"
    )
    check_world_size(plan, env)
    return run_learner(
        plan, env.rank, pick_device(plan.spec.device, host_processes(env, run.spec)[0], 1), run.spec
    )


def tell_over(store) -> None:
    """No learner process is left: the syncer may finish (it may have, and closed the store)."""
    try:
        store.set(OVER, "1")
    except RuntimeError:
        pass


def run_syncer(plan: RunPlan, out_dir: Path) -> dict:
    """The syncer's whole life: host the store at MASTER_ADDR:MASTER_PORT, merge until the learners
    are done, write the outputs; returns the summary."""
    start_rank_process()
    store = connect(
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), True, plan.spec.timeout_s
    )
    syncer = Syncer(plan, store, out_dir)
    syncer.run()
    return write_run(syncer)


def run_learner(plan: RunPlan, rank: int, device: torch.device, spec: LaunchSpec) -> None:
    """Learner ``rank``'s whole life on ``device``: hello (and, returning, catch up), train, report
    done. Its exchanges are staged through the CPU."""
    start_rank_process()
    link = SyncerLink(
        plan,
        rank,
        incarnation(spec),
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        spec.wan_pacer,
    )
    world = DecoupledWorld(plan, rank, link, spec.join_at_s)
    try:
        trainer = Trainer(plan, rank, world, device)
        trainer.run()
        trainer.finish()
    finally:
        link.close()
