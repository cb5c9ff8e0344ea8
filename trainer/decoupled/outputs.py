"""What Decoupled DiLoCo's syncer writes when the run is over (``syncer_process.py``).

* ``trace.csv``: every learner's rows, gathered from the store (``wire``: ``rows/I/N``, one
  list per start of each learner, so a killed learner's rows survive it);
* ``summary.json``: the simulator's keys (``tracing.build_summary``, syncs counted per learner),
  steps and outer steps the slowest learner's; a learner that never finished marks it incomplete;
* ``run.json``: the final global model's validation loss, each learner's own eval losses and
  starts, and the syncer's counts (merges, reports, dropped reports, leaves, joins).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import torch

from islands.trace import Row

from ..core.tracing import build_summary, write_outputs
from ..core.world import unflatten_into
from ..report import print_summary
from .wire import key

if TYPE_CHECKING:
    from .syncer_process import Syncer


def write_run(syncer: Syncer) -> dict[str, Any]:
    """Write the outputs, print the summary and return it."""
    plan, learners = syncer.plan, syncer.learners
    steps = min(
        learner.steps if learner.done else learner.outer_done * plan.eval_every_steps
        for learner in learners.values()
    )
    churn: dict[str, Any] = {
        "lost_compute_s": syncer.lost_compute_s,
        "dropped_deltas": syncer.counts["dropped_reports"],
        "leaves": syncer.counts["leaves"],
        "joins": syncer.counts["joins"],
    }
    unfinished = [island for island, learner in learners.items() if not learner.done]
    if unfinished:
        churn["incomplete_reason"] = f"learner(s) {unfinished} did not finish"
    trace, summary = build_summary(plan, steps, gather_rows(syncer), churn)
    write_outputs(syncer.out_dir, trace, {"summary": summary, "run": run_info(syncer, steps)})
    print_summary(summary)
    return summary


def gather_rows(syncer: Syncer) -> list[Row]:
    rows = []
    for island, learner in syncer.learners.items():
        for incarnation in learner.incarnations:
            name = key("rows", island, incarnation)
            if syncer.store.check([name]):
                rows += [
                    Row(*json.loads(line))
                    for line in syncer.store.get(name).decode().splitlines()
                    if line
                ]
    return rows


def final_loss(syncer: Syncer) -> float:
    """The final global model's mean validation loss."""
    with torch.no_grad():
        for fragment in syncer.fragments:
            unflatten_into(fragment.flat, fragment.params)
        losses = [syncer.model(x, y).item() for x, y in syncer.eval_batches]
    return sum(losses) / len(losses)


def run_info(syncer: Syncer, steps: int) -> dict[str, Any]:
    plan = syncer.plan
    final = final_loss(syncer)
    learners = {
        str(island): {
            "incarnations": len(learner.incarnations),
            "steps": learner.steps,
            "outer_steps": learner.outer_done,
            **learner.info,
        }
        for island, learner in syncer.learners.items()
    }
    compute = [
        learner.info["mean_step_compute_s"] for learner in syncer.learners.values() if learner.info
    ]
    return {
        "scenario": plan.scenario.name,
        "algorithm": plan.algorithm,
        "islands": plan.islands,
        "ranks_per_island": plan.ranks_per_island,
        "world_size": plan.world_size,
        "parameters": sum(p.numel() for p in syncer.model.parameters()),
        "bits": syncer.bits,
        "steps": steps,
        "tokens": steps * plan.tokens_per_step,
        "final_eval_loss": final,
        "eval_losses": [[steps, final]],
        "device": "cpu",
        "mean_step_compute_s": sum(compute) / len(compute) if compute else 0.0,
        "excluded_contributions": syncer.excluded,
        "syncer": {**syncer.counts, "lost_compute_s": syncer.lost_compute_s, "learners": learners},
    }
