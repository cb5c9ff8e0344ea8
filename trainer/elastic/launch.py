"""Starting an elastic run (churn): the store outside the islands, and the scenario's events played.

Locally, ``launch_elastic`` hosts the run's ``TCPStore`` in this launcher process, which trains
nothing, so no island is a single point of failure. It starts the processes of every island present
at the start (``trainer.ranks_per_island`` each), and plays the scenario's ``[[event]]`` entries
against the run's clock (``runtime.store.run_time_s``, the fleet in ``runtime.island_processes``): a ``leave``
SIGKILLs the island's processes at once (no cleanup, as a crashed machine); a ``join`` is served by
processes started ahead of time with a launch spec's ``join_at_s`` (``runtime/spec.py``; at launch
for an island with ``present = false``, right after the kill for a returning one), which load their
data and then ask to join when the clock reads the event's time, so the join time measured is the
protocol's, not Python's start-up. An island lives and dies whole: when one of its processes dies
the launcher kills the others (``island.py``: they also kill themselves), and each start of an
island gets its own ``incarnation``.

Under torchrun each process connects to the store at MASTER_ADDR:MASTER_PORT, which torchrun's agent
hosts (TORCHELASTIC_USE_AGENT_STORE); without an agent store, rank 0 hosts it and is then the one
island whose death ends the run. Run torchrun with ``--max-restarts=0`` so that the agents do not
restart the survivors when an island dies; a returning machine is started with ``ISLANDS_JOIN_AT_S=0``
(torchrun starts the processes, so there is no launch spec: the variable gives ``join_at_s``).
One node is one island: ``--nproc-per-node`` = ``trainer.ranks_per_island``, so RANK // R is the
node's island and LOCAL_RANK 0 its leader; when one of a node's processes dies, its agent stops the
others (and they stop themselves), so the node leaves as one island.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import torch

from islands.errors import UserError

from ..config import RunPlan
from ..core.loop import Trainer
from ..core.memory import start_rank_process
from ..runtime.island import IslandRanks, incarnation
from ..runtime.island_processes import Fleet
from ..runtime.processes import LocalLaunch, RankRun, check_world_size, rank_command
from ..runtime.spec import LaunchSpec
from ..runtime.store import connect, run_time_s
from .membership import Membership, Timing
from .world import ElasticWorld, RunOver

POLL_S = 0.05


def launch_elastic(
    plan: RunPlan,
    master_addr: str,
    port: int,
    environment: Callable[..., tuple[list[str], Mapping[str, str]]],
) -> int:
    """Host the store, start the islands, play the events; returns the first failing exit code or 0.
    ``environment(rank, **process)`` gives the command prefix and environment of a rank's process,
    with ``process``: its own fields of the launch spec."""
    store = connect(master_addr, port, True, plan.spec.collective_timeout_s)

    def start(rank: int, join_at: float | None, incarnation: int) -> subprocess.Popen:
        prefix, env = environment(
            rank, store_hosted=True, incarnation=str(incarnation), join_at_s=join_at
        )
        return subprocess.Popen([*prefix, *rank_command()], env=env)

    fleet = Fleet(plan, start)
    try:
        while (code := fleet.status()) is None:
            now_s = run_time_s(store)
            if now_s is not None:
                fleet.play(now_s)
            time.sleep(POLL_S)
        return code
    finally:
        for island in list(fleet.running):
            fleet.kill_island(island)


def launch(request: LocalLaunch) -> int:
    """The elastic kind's local launcher (``kinds.py``): ``launch_elastic`` with every island's
    processes wrapped as the request says."""
    return launch_elastic(request.plan, request.master_addr, request.port, request.environment)


def run_rank(run: RankRun) -> dict | None:
    """The elastic kind's process (``kinds.py``): ``run_elastic_process`` at torchrun's address."""
    env = run.env
    assert env is not None, "a rank has torchrun's or the launcher's environment (Kind.runs_here)"
    check_world_size(run.plan, env)
    return run_elastic_process(
        run.plan,
        env.rank,
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        run.spec,
        run.out_dir,
        run.resume_dir,
        run.stop_after,
        run.default_out,
    )


def run_elastic_process(
    plan: RunPlan,
    rank: int,
    master_addr: str,
    port: int,
    spec: LaunchSpec,
    out_dir: Path | None,
    resume_dir: Path | None,
    stop_after: int | None,
    default_out: Callable[[], Path],
) -> dict | None:
    """One rank's whole life in an elastic run: form its island's group (several ranks per island),
    join the membership (the island's leader) or follow the leader, train, and (the last epoch's
    leader) write the outputs."""
    if torch.cuda.is_available() and plan.spec.device != "cpu":
        raise UserError(
            "trainer.elastic: islands that leave and join train on CPU (gloo) only; "
            'set trainer.device = "cpu"'
        )
    start_rank_process()
    timeout_s = plan.spec.collective_timeout_s
    store = connect(master_addr, port, rank == 0 and not spec.store_hosted, timeout_s)
    island, local_rank = divmod(rank, plan.ranks_per_island)
    membership = Membership(
        store,
        connect(master_addr, port, False, timeout_s),
        island,
        Timing(plan.scenario.network.detection_timeout_s, timeout_s),
    )
    ranks = (
        None
        if plan.ranks_per_island == 1
        else IslandRanks(
            store,
            membership.key("island", island, incarnation(spec)),
            island,
            local_rank,
            plan.ranks_per_island,
        )
    )
    out_key = membership.key("run", "out")
    store.compare_set(out_key, "", str(out_dir or default_out()))
    out_dir = Path(store.get(out_key).decode())
    world = ElasticWorld(plan, rank, membership, spec.join_at_s, ranks, out_dir, spec.wan_pacer)
    trainer = Trainer(plan, rank, world, "cpu", out_dir, resume_dir)
    try:
        trainer.run(stop_after)
        return trainer.finish()
    except RunOver as late:
        if local_rank == 0:
            print(late, flush=True)
        membership.close()
        return None
    finally:
        if ranks is not None:
            ranks.close()
