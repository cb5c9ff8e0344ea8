"""A tiny model's trainers as threads of one process (no sockets)."""

from __future__ import annotations

import torch

from islands.scenarios import from_dict
from islands.trainer.core.inprocess import run_threads, thread_groups
from islands.trainer.core.loop import Trainer, default_corpus
from islands.trainer.kinds import make_run_plan

TINY = {
    "n_layer": 2,
    "n_head": 1,
    "n_embd": 16,
    "block_size": 16,
    "batch_size": 2,
    "corpus_bytes": 60_000,
    "eval_batches": 2,
    "warmup_steps": 2,
}
CORPORA = {}


def plan_for(schedule, islands=2, **trainer):
    document = {
        "name": "tiny",
        "model": {"parameters": 1e5},
        "schedule": {"outer_steps": 2, "inner_steps": 2, **schedule},
        "island": [{"name": "a", "replicas": islands, "step_time_s": 0.01, "bandwidth_gbps": 1.0}],
        "trainer": {**TINY, **trainer},
    }
    return make_run_plan(from_dict(document))


def corpus_for(plan):
    key = (plan.islands, plan.spec.data_split)
    if key not in CORPORA:
        CORPORA[key] = default_corpus(plan)
    return CORPORA[key]


def trainers_for(plan, out_dir=None):
    groups = thread_groups(plan.islands, plan.ranks_per_island)
    corpus = corpus_for(plan)
    return run_threads(
        plan.world_size,
        lambda rank: Trainer(plan, rank, groups[rank], out_dir=out_dir, corpus=corpus),
    )


def in_threads(trainers, work):
    return run_threads(len(trainers), lambda rank: work(trainers[rank]))


def finish_all(trainers):
    return in_threads(trainers, lambda trainer: trainer.finish())[0]


def global_weights(trainer):
    return torch.cat(
        [g.flatten() for fragment in trainer.fragments for g in fragment.global_params]
    )
