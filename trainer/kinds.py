"""The run kinds, chosen once: ``kind_of(plan)`` is the only place that decides how a plan runs.

* ``fixed``: every island from start to end over fixed torch.distributed groups (``fixed.py``);
* ``elastic``: islands that leave and join mid-run, through a membership (``elastic/``): asked for
  with ``trainer.elastic``, or implied by the scenario's churn;
* ``decoupled``: Decoupled DiLoCo's learners, each on its own clock, and a syncer (``decoupled/``).

Each kind checks its plan (``make_run_plan`` runs the rules every kind shares, then the kind's),
launches its processes on this machine (``launch_local``) and runs one of them (``run_process``).
The launchers import torch when called, so a plan is made (and refused) without it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from islands.errors import UserError
from islands.scenarios import Scenario
from islands.schedules import AVERAGE
from islands.schedules.gather import STORE

from .config import RunPlan, check_model, check_supported

if TYPE_CHECKING:
    from .runtime.processes import DistEnv, LocalLaunch, RankRun
    from .runtime.spec import LaunchSpec

FIXED, ELASTIC, DECOUPLED = "fixed", "elastic", "learners-and-syncer"  # (not a schedule's name)


@dataclass(frozen=True)
class RunKind:
    """How a plan of this kind runs: ``check`` refuses a plan in one line, ``launch`` starts every
    process of the run on this machine and waits (the first failing exit code, or 0), ``run_rank`` is
    one process's whole life (the summary, on the process that wrote the outputs)."""

    name: str
    check: Callable[[RunPlan], None]
    launch: Callable[[LocalLaunch], int]
    run_rank: Callable[[RankRun], dict | None]
    resumes: bool = True  # --resume and --stop-after: the state lives in the ranks' checkpoints
    has_syncer: bool = False  # a process besides the ranks: started with them, writes the outputs

    def runs_here(self, env: DistEnv | None, spec: LaunchSpec) -> bool:
        """Whether this process is one of the run's (a rank: torchrun's environment or the local
        launcher's; or the syncer, as its launch spec says) rather than the launcher."""
        return env is not None or (self.has_syncer and spec.syncer)


def check_fixed(plan: RunPlan) -> None:
    """A fixed run needs nothing beyond what every kind needs."""


def check_elastic(plan: RunPlan) -> None:
    """Churn (events, present = false, trainer.elastic) runs DiLoCo or Streaming DiLoCo, its top-k
    payloads gathered without a store; an island of several ranks leaves and joins as a whole."""
    source = plan.scenario.source
    if plan.schedule.update != AVERAGE:
        raise UserError(
            f'{source}: schedule.algorithm = "{plan.algorithm}": under {plan.schedule.label} every '
            f"island holds its own global weights, so islands that leave and join (churn, "
            f"trainer.elastic) would have no one state to download"
        )
    if plan.syncs_gradient:
        raise UserError(
            f'{source}: schedule.algorithm = "{plan.algorithm}": islands that leave and join '
            f"(churn, trainer.elastic) train a schedule that exchanges pseudo-gradients (one that "
            f"averages the gradient in every step would re-form the group at every step)"
        )
    if plan.scenario.network.gather == STORE:
        raise UserError(
            f'{source}: network.gather = "store": islands that leave and join (churn, '
            "trainer.elastic) do not exchange through an object store in the real trainer yet; "
            'the store is simulated only with churn (use "direct" or "ring" to train it)'
        )
    if not plan.initial_members():
        raise UserError(f"{source}: every island has present = false: nobody starts the run")


def check_decoupled(plan: RunPlan) -> None:
    """A Decoupled DiLoCo learner is one process (its island's only rank); someone must start."""
    source = plan.scenario.source
    if plan.ranks_per_island != 1:
        raise UserError(
            f"{source}: trainer.ranks_per_island: a decoupled learner is one process, so it must "
            f"be 1 (got {plan.ranks_per_island})"
        )
    if not plan.initial_members():
        raise UserError(f"{source}: every island has present = false: no learner starts the run")


def imported_when_called(module: str, name: str) -> Callable:
    """``module.name``, imported at its first call: the launchers import torch, and a plan is made (and
    refused) without it."""

    def call(*args: object) -> object:
        return getattr(importlib.import_module(module, __package__), name)(*args)

    return call


KINDS = {
    kind.name: kind
    for kind in (
        RunKind(
            FIXED,
            check_fixed,
            imported_when_called(".fixed", "launch"),
            imported_when_called(".fixed", "run_rank"),
        ),
        RunKind(
            ELASTIC,
            check_elastic,
            imported_when_called(".elastic.launch", "launch"),
            imported_when_called(".elastic.launch", "run_rank"),
        ),
        RunKind(
            DECOUPLED,
            check_decoupled,
            imported_when_called(".decoupled.launch", "launch"),
            imported_when_called(".decoupled.launch", "run_rank"),
            resumes=False,
            has_syncer=True,
        ),
    )
}


def kind_of(plan: RunPlan) -> RunKind:
    """The one choice: a schedule whose learners are not coupled runs decoupled (a syncer merges what
    they report); otherwise islands that may leave and join (``RunPlan.elastic``) run elastic; the
    rest run fixed."""
    if not plan.schedule.coupled:
        return KINDS[DECOUPLED]
    return KINDS[ELASTIC] if plan.elastic else KINDS[FIXED]


def make_run_plan(
    scenario: Scenario, workers: int | None = None, data_path: str | None = None
) -> RunPlan:
    """The run plan of ``scenario`` (``--workers N``: its first N workers), checked by every kind's rules
    and then its own kind's; bad input raises ``UserError`` in one line."""
    all_workers = tuple(scenario.workers())
    if workers is not None and not 2 <= workers <= len(all_workers):
        raise UserError(
            f"--workers {workers}: must be between 2 and the scenario's {len(all_workers)} workers "
            f"(raise island.N.replicas for more)"
        )
    plan = RunPlan(scenario, all_workers[:workers] if workers else all_workers, data_path or "")
    check_supported(plan.scenario)
    kind_of(plan).check(plan)
    check_model(plan)
    return plan
