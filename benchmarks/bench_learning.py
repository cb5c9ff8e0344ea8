"""Does the trainer's DiLoCo learn as the papers say? Final evaluation loss of DiLoCo against DDP at
equal tokens, on the trainer's own model, with the islands as threads of this process.

Every run trains ``--steps`` inner steps per worker on the standard-library corpus (IID shards, one
per island), with the trainer's defaults except the keys given; DDP sees the same tokens (M workers x
``--steps`` steps x batch). Prints one line per run: the setting, the final evaluation loss, and the
penalty against the DDP run with the same M and model.

    python benchmarks/bench_learning.py --workers 4 --inner-steps 50 --outer nesterov average
    python benchmarks/bench_learning.py --workers 2 4 --n-embd 32 64 96 --outer nesterov
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time

import torch

from islands.scenarios import from_dict
from islands.scenarios.trainer_keys import TRAINER_KEYS
from islands.trainer.core.data import BatchSampler, sampler_seed, validation_batches
from islands.trainer.core.inprocess import run_threads, thread_groups
from islands.trainer.core.loop import (
    Trainer,
    default_corpus,
    learning_rate,
    make_inner_optimizer,
    model_config,
)
from islands.trainer.core.model import build_model
from islands.trainer.kinds import make_run_plan

EVAL_BATCHES = 16
RUN_TIMEOUT_S = 3600.0


def plan_for(algorithm: str, workers: int, inner_steps: int, steps: int, trainer: dict):
    period = 1 if algorithm == "ddp" else inner_steps
    document = {
        "name": "learning",
        "model": {"parameters": 1e5},
        "schedule": {
            "algorithm": algorithm,
            "inner_steps": inner_steps,
            "outer_steps": steps // period,
            "bits": 32,
        },
        "island": [{"name": "a", "replicas": workers, "step_time_s": 0.01, "bandwidth_gbps": 1.0}],
        "trainer": {"eval_batches": EVAL_BATCHES, "checkpoint_every": 0, **trainer},
    }
    return make_run_plan(from_dict(document))


def final_loss(plan) -> float:
    """Train ``plan`` with its islands as threads; the final evaluation loss of the global model."""
    groups = thread_groups(plan.islands, plan.ranks_per_island, timeout_s=RUN_TIMEOUT_S)
    corpus = default_corpus(plan)

    def work(rank: int) -> float:
        trainer = Trainer(plan, rank, groups[rank], corpus=corpus)
        trainer.run()
        trainer.finish()
        return trainer.eval_losses[-1][1]

    return run_threads(plan.world_size, work, timeout_s=RUN_TIMEOUT_S)[0]


def ddp_loss(workers: int, args: argparse.Namespace, model: dict) -> float:
    """DDP over ``workers`` islands as threads (``--threaded-ddp``), or by default (3x faster here)
    the same computation in one loop: each step concatenates every island's batch from its own
    shard (the trainer's samplers), so the gradient of the mean loss is the mean of the M
    per-island gradients that DDP averages; the trainer's optimizer, schedule, clipping and
    validation batches."""
    plan = plan_for("ddp", workers, args.inner_steps[0], args.steps, model)
    if args.threaded_ddp:
        return final_loss(plan)
    spec = plan.spec
    corpus = default_corpus(plan)
    network = build_model(model_config(plan), spec.seed)
    optimizer = make_inner_optimizer(network, plan)
    samplers = [
        BatchSampler(shard, spec.batch_size, spec.block_size, sampler_seed(spec.seed, island))
        for island, shard in enumerate(corpus.shards)
    ]
    for step in range(plan.total_steps):
        batches = [sampler.next_batch() for sampler in samplers]
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(
                step, plan.total_steps, spec.lr, spec.warmup_steps, spec.min_lr_ratio
            )
        network(torch.cat([x for x, _ in batches]), torch.cat([y for _, y in batches])).backward()
        if spec.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(network.parameters(), spec.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    evaluation = validation_batches(
        corpus.validation, spec.eval_batches, spec.batch_size, spec.block_size, spec.seed
    )
    with torch.no_grad():
        return sum(network(x, y).item() for x, y in evaluation) / len(evaluation)


def outer_keys(outer: str, lr: float | None, momentum: float | None) -> dict:
    keys = {"outer_optimizer": outer}
    if lr is not None:
        keys["outer_lr"] = lr
    if momentum is not None:
        keys["outer_momentum"] = momentum
    return keys


def trainer_keys(items: list[str]) -> dict:
    keys = {}
    for item in items:
        name, _, value = item.partition("=")
        default = TRAINER_KEYS[name].default
        keys[name] = type(default)(value) if not isinstance(default, bool) else value == "true"
    return keys


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workers", type=int, nargs="+", default=[4])
    parser.add_argument("--inner-steps", type=int, nargs="+", default=[50])
    parser.add_argument("--steps", type=int, default=1500, help="inner steps per worker")
    parser.add_argument("--outer", nargs="+", default=["nesterov"], help="nesterov, average, adamw")
    parser.add_argument("--outer-lr", type=float, nargs="+", default=[None])
    parser.add_argument("--momentum", type=float, nargs="+", default=[None])
    parser.add_argument("--n-embd", type=int, nargs="+", default=[64])
    parser.add_argument("--n-layer", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--set",
        dest="keys",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a [trainer] key for every run, e.g. weight_decay=0",
    )
    parser.add_argument("--no-ddp", action="store_true", help="skip the DDP baselines")
    parser.add_argument(
        "--threaded-ddp",
        action="store_true",
        help="DDP over M threads instead of one worker with M x the batch",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    for n_embd, workers in itertools.product(args.n_embd, args.workers):
        model = {
            "n_embd": n_embd,
            "n_layer": args.n_layer,
            "seed": args.seed,
            **trainer_keys(args.keys),
        }
        ddp = None
        if not args.no_ddp:
            started = time.monotonic()
            ddp = ddp_loss(workers, args, model)
            print(
                f"n_embd {n_embd:>4}  M {workers}  ddp{' (threads)' if args.threaded_ddp else ''}"
                f"{'':<20}  loss {ddp:.4f}  ({time.monotonic() - started:.0f} s)",
                flush=True,
            )
        for h, outer, lr, mu in itertools.product(
            args.inner_steps, args.outer, args.outer_lr, args.momentum
        ):
            started = time.monotonic()
            plan = plan_for(
                "diloco", workers, h, args.steps, {**model, **outer_keys(outer, lr, mu)}
            )
            loss = final_loss(plan)
            spec = plan.spec
            penalty = f"{100 * (loss / ddp - 1):+.1f}% vs DDP" if ddp else ""
            print(
                f"n_embd {n_embd:>4}  M {workers}  H {h:>4}  {outer:<8} lr {spec.outer_lr:<6g} mu "
                f"{spec.outer_momentum:<4g} loss {loss:.4f}  {penalty}  ({time.monotonic() - started:.0f} s)",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
