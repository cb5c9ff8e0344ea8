"""Starting an elastic run (churn): the store outside the islands, and the scenario's events played.

Locally, ``launch_elastic`` hosts the run's ``TCPStore`` in this launcher process, which trains
nothing, so no island is a single point of failure. It starts the processes of every island present
at the start (``trainer.ranks_per_island`` each), and plays the scenario's ``[[event]]`` entries
against the run's clock (``membership.run_time_s``): a ``leave`` SIGKILLs the island's processes at
once (no cleanup, as a crashed machine); a ``join`` is served by processes started ahead of time with
``ISLANDS_JOIN_AT_S`` (at launch for an island with ``present = false``, right after the kill for a
returning one), which load their data and then ask to join when the clock reads the event's time, so
the join time measured is the protocol's, not Python's start-up. An island lives and dies whole: when
one of its processes dies the launcher kills the others (``island.py``: they also kill themselves),
and each start of an island gets its own ``ISLANDS_INCARNATION``.

Under torchrun each process connects to the store at MASTER_ADDR:MASTER_PORT, which torchrun's agent
hosts (TORCHELASTIC_USE_AGENT_STORE); without an agent store, rank 0 hosts it and is then the one
island whose death ends the run. Run torchrun with ``--max-restarts=0`` so that the agents do not
restart the survivors when an island dies; a returning machine is started with ``ISLANDS_JOIN_AT_S=0``.
One node is one island: ``--nproc-per-node`` = ``trainer.ranks_per_island``, so RANK // R is the
node's island and LOCAL_RANK 0 its leader; when one of a node's processes dies, its agent stops the
others (and they stop themselves), so the node leaves as one island.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Mapping

import torch

from islands.errors import UserError

from .config import RunPlan
from .elastic import ElasticWorld, RunOver
from .island import INCARNATION_VARIABLE, IslandRanks, incarnation
from .loop import Trainer
from .membership import Membership, Timing, connect, run_time_s

JOIN_VARIABLE = "ISLANDS_JOIN_AT_S"
HOSTED_VARIABLE = "ISLANDS_STORE_HOSTED"
POLL_S = 0.05


class Fleet:
    """The launcher's island processes (each island's, in local rank order) and the events still to
    play. ``start(rank, join_at_s, incarnation)`` starts one process."""

    def __init__(self, plan: RunPlan, start: Callable[[int, float | None, int], subprocess.Popen]):
        self.plan = plan
        self.start = start
        self.events = plan.events()
        self.running: dict[int, list[subprocess.Popen]] = {}
        self.starts: dict[int, int] = {}
        self.clock_seen = False
        present = set(plan.initial_members())
        for island in range(plan.islands):
            join_at = None if island in present else self.next_join(island, -1.0)
            if island in present or join_at is not None:
                self.start_island(island, join_at)

    def start_island(self, island: int, join_at: float | None) -> None:
        incarnation = self.starts.get(island, 0)
        self.starts[island] = incarnation + 1
        r = self.plan.ranks_per_island
        self.running[island] = [self.start(rank, join_at, incarnation) for rank in range(island * r, island * r + r)]

    def kill_island(self, island: int) -> None:
        for child in self.running.pop(island):
            if child.poll() is None:
                child.send_signal(signal.SIGKILL)
            child.wait()

    def next_join(self, island: int, after_s: float) -> float | None:
        return next((at for at, index, kind in self.events if index == island and kind == "join" and at > after_s),
                    None)

    def play(self, now_s: float) -> None:
        """Kill the islands whose leave is due, starting the processes of their next join. Events before
        the first reading of the clock belong to the run a ``--resume`` continues: they are skipped."""
        if not self.clock_seen:
            self.clock_seen = True
            self.events = [event for event in self.events if event[0] >= now_s]
        while self.events and self.events[0][0] <= now_s:
            at_s, island, kind = self.events.pop(0)
            children = self.running.get(island)
            if kind != "leave" or children is None or all(child.poll() is not None for child in children):
                continue
            self.kill_island(island)
            print(f"islands train: island {island} killed (SIGKILL) at {now_s:.2f} s (event at {at_s:g} s)",
                  flush=True)
            join_at = self.next_join(island, at_s)
            if join_at is not None:
                self.start_island(island, join_at)

    def status(self) -> int | None:
        """The first failing exit code, 0 once every process is done, None while some run. An island
        one of whose processes was killed by a signal died, as islands may: its other processes are
        killed too, and the others carry on without it."""
        for island, children in list(self.running.items()):
            dead = [child.returncode for child in children if child.poll() is not None and child.returncode < 0]
            if dead:
                print(f"islands train: island {island} died (signal {-dead[0]})", flush=True)
                self.kill_island(island)
        codes = [child.poll() for children in self.running.values() for child in children]
        failed = [code for code in codes if code not in (None, 0)]
        if failed:
            return failed[0]
        return 0 if all(code == 0 for code in codes) else None


def launch_elastic(train_args: list[str], plan: RunPlan, master_addr: str, port: int,
                   environment: Callable[[int], tuple[list[str], Mapping[str, str]]]) -> int:
    """Host the store, start the islands, play the events; returns the first failing exit code or 0.
    ``environment(rank)`` gives the command prefix and environment of a rank's process."""
    store = connect(master_addr, port, True, plan.spec.collective_timeout_s)

    def start(rank: int, join_at: float | None, incarnation: int) -> subprocess.Popen:
        prefix, env = environment(rank)
        extra = {HOSTED_VARIABLE: "1", INCARNATION_VARIABLE: str(incarnation),
                 **({JOIN_VARIABLE: str(join_at)} if join_at is not None else {})}
        return subprocess.Popen([*prefix, sys.executable, "-m", "islands.cli", "train", *train_args],
                                env={**env, **extra})

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


def run_elastic_process(plan: RunPlan, rank: int, master_addr: str, port: int, out_dir: Path | None,
                        resume_dir: Path | None, stop_after: int | None,
                        default_out: Callable[[], Path]) -> dict | None:
    """One rank's whole life in an elastic run: form its island's group (several ranks per island),
    join the membership (the island's leader) or follow the leader, train, and (the last epoch's
    leader) write the outputs."""
    if torch.cuda.is_available() and plan.spec.device != "cpu":
        raise UserError("trainer.elastic: islands that leave and join train on CPU (gloo) only; "
                        "set trainer.device = \"cpu\"")
    torch.set_num_threads(1)
    hosted = os.environ.get(HOSTED_VARIABLE) == "1" or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    timeout_s = plan.spec.collective_timeout_s
    store = connect(master_addr, port, rank == 0 and not hosted, timeout_s)
    island, local_rank = divmod(rank, plan.ranks_per_island)
    membership = Membership(store, connect(master_addr, port, False, timeout_s), island,
                            Timing(plan.scenario.network.detection_timeout_s, timeout_s))
    ranks = None if plan.ranks_per_island == 1 else IslandRanks(
        store, membership.key("island", island, incarnation()), island, local_rank, plan.ranks_per_island)
    out_key = membership.key("run", "out")
    store.compare_set(out_key, "", str(out_dir or default_out()))
    join_at = os.environ.get(JOIN_VARIABLE)
    world = ElasticWorld(plan, rank, membership, float(join_at) if join_at is not None else None, ranks)
    trainer = Trainer(plan, rank, world, "cpu", Path(store.get(out_key).decode()), resume_dir)
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
