"""The real trainer: the scenario's schedule run with torch.distributed, measured in the trace schema.

A plan (``config.RunPlan``, made by ``kinds.make_run_plan``) runs as one of three kinds, chosen in one
place (``kinds.kind_of``): ``fixed`` (``fixed.py``: every island from start to end over fixed groups),
``elastic`` (``elastic/``: islands that leave and join) or Decoupled DiLoCo (``decoupled/``: learners
and a syncer). ``train(plan, options)`` is the API (``launch.py``): it runs a plan on this machine,
each process ``python -m islands.trainer`` with a typed launch spec (``runtime/spec.py``); under
torchrun ``islands train`` is one of the processes.

* ``core/``: what every kind trains with: the loop (``loop.py``), DiLoCo's fragment syncs, the outer
  optimizers, quantised averaging, the model, data, checkpoints, the trace, and what the loop asks of
  the processes it trains with (``world.py``);
* ``runtime/``: what the kinds with processes share: the store and the run's clock, the fleet of
  island processes, a rank's environment and device, islands of several ranks, WAN pacing;
* ``outputs`` and ``report``: the run folder's files and the summary table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .config import RunPlan
    from .launch import Trained, TrainOptions


def train(plan: RunPlan, options: TrainOptions | None = None) -> Trained:
    """Run ``plan`` (``kinds.make_run_plan``) on this machine, as ``simulate(scenario)`` predicts it:
    ``launch.train``; torch is imported only here."""
    from .launch import TrainOptions
    from .launch import train as run

    return run(plan, options or TrainOptions())
