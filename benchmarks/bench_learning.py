"""Does the trainer's DiLoCo learn as the papers say? Final evaluation loss of DiLoCo against DDP at
equal tokens, on the trainer's own model, with the islands as threads of this process.

Every run trains ``--steps`` inner steps per worker on the standard-library corpus (IID shards, one
per island), with the trainer's defaults except the keys given; DDP sees the same tokens (M workers x
``--steps`` steps x batch). Prints one line per run: the setting, the final evaluation loss, and the
penalty against the DDP run with the same M and model.

DiLoCo exchanges fp32 pseudo-gradients; ``--topk`` runs SparseLoCo instead (``schedule.compression =
"topk"``, ``schedules/compression.py``): every combination of ``--topk`` (kept per chunk of
``--chunk-values``), ``--bits`` and ``--error-feedback`` (beta; 0: none) with every outer setting.
``--mean`` sets how a kept place is averaged (``trainer.topk_mean``): over the workers that kept it,
as SparseLoCo's reference code does ("senders", the trainer's default), or over all M workers, zeros
where a worker did not keep it, as Covenant-72B's eq. 2 writes it ("workers").

    python benchmarks/bench_learning.py --workers 4 --inner-steps 50 --outer nesterov average
    python benchmarks/bench_learning.py --workers 2 4 --n-embd 32 64 96 --outer nesterov
    python benchmarks/bench_learning.py --inner-steps 15 --outer-lr 1 --topk 64 --bits 2 --error-feedback 0.95 0
    python benchmarks/bench_learning.py --inner-steps 15 --outer-lr 1 --topk 64 --mean workers
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
import tomllib

import torch

from islands.errors import UserError
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
MEANS = ("senders", "workers")  # ``trainer.topk_mean``
RUN_TIMEOUT_S = 3600.0


def plan_for(
    algorithm: str,
    workers: int,
    inner_steps: int,
    steps: int,
    trainer: dict,
    compression: dict | None = None,
):
    """The run plan; ``compression``: top-k schedule keys (``compression_keys``), else fp32 dense."""
    period = 1 if algorithm == "ddp" else inner_steps
    document = {
        "name": "learning",
        "model": {"parameters": 1e5},
        "schedule": {
            "algorithm": algorithm,
            "inner_steps": inner_steps,
            "outer_steps": steps // period,
            "bits": 32,
            **(compression or {}),
        },
        "island": [{"name": "a", "replicas": workers, "step_time_s": 0.01, "bandwidth_gbps": 1.0}],
        "trainer": {"eval_batches": EVAL_BATCHES, "checkpoint_every": 0, **trainer},
    }
    return make_run_plan(from_dict(document, "scenario"))


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


def compression_keys(args: argparse.Namespace) -> list[dict | None]:
    """The exchanges to run: fp32 dense (None) without ``--topk``, else one set of top-k schedule keys
    per (k, bits, beta); ``UserError`` for a k outside 1..chunk, or a beta outside [0, 1)."""
    if not args.topk:
        if args.mean != MEANS[0]:
            raise UserError(f"--mean {args.mean}: has no effect without --topk (dense payloads)")
        return [None]
    for k in args.topk:
        if not 1 <= k <= args.chunk_values:
            raise UserError(f"--topk: {k} must be in 1..--chunk-values ({args.chunk_values})")
    for beta in args.error_feedback:
        if not 0 <= beta < 1:
            raise UserError(f"--error-feedback: {beta} must be in [0, 1)")
    return [
        {
            "compression": "topk",
            "chunk_values": args.chunk_values,
            "topk": k,
            "bits": bits,
            "error_feedback": beta,
        }
        for k, bits, beta in itertools.product(args.topk, args.bits, args.error_feedback)
    ]


def mean_key(mean: str, exchange: dict | None) -> dict:
    """``trainer.topk_mean`` for a top-k run (a dense one has no such key to set)."""
    return {} if exchange is None else {"topk_mean": mean}


def exchange_label(keys: dict | None, mean: str = MEANS[0]) -> str:
    """How a run exchanges: fp32 dense, or top-k's density, bits, error feedback and its mean."""
    if keys is None:
        return "fp32"
    density = 100 * keys["topk"] / keys["chunk_values"]
    label = (
        f"top {keys['topk']}/{keys['chunk_values']} ({density:.2f}%) {keys['bits']}b "
        f"ef {keys['error_feedback']:g}"
    )
    return f"{label} mean {mean}"


def trainer_keys(items: list[str]) -> dict:
    """``--set KEY=VALUE`` items as [trainer] keys: VALUE read as a TOML value (a bare word as a
    string); the scenario loader checks each key's type and range."""
    keys = {}
    for item in items:
        name, _, value = item.partition("=")
        if name not in TRAINER_KEYS:
            raise UserError(f"--set {item}: {name!r} is not a [trainer] key")
        try:
            keys[name] = tomllib.loads(f"v = {value}")["v"]
        except tomllib.TOMLDecodeError:
            keys[name] = value
    return keys


def main(argv: list[str] | None = None) -> int:
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
    parser.add_argument(
        "--topk",
        type=int,
        nargs="+",
        default=[],
        help="SparseLoCo: values kept per chunk (schedule.topk); without it DiLoCo exchanges fp32",
    )
    parser.add_argument("--chunk-values", type=int, default=4096, help="values per chunk")
    parser.add_argument(
        "--bits", type=int, nargs="+", default=[2], help="bits per kept value (with --topk)"
    )
    parser.add_argument(
        "--error-feedback",
        type=float,
        nargs="+",
        default=[0.95],
        help="beta of the error-feedback buffer, 0: none (with --topk)",
    )
    parser.add_argument(
        "--mean",
        choices=MEANS,
        default=MEANS[0],
        help="a top-k place's mean (trainer.topk_mean): over the workers that kept it (SparseLoCo's "
        "reference code, the trainer's default) or over all M workers",
    )
    parser.add_argument("--no-ddp", action="store_true", help="skip the DDP baselines")
    parser.add_argument(
        "--threaded-ddp",
        action="store_true",
        help="DDP over M threads instead of one worker with M x the batch",
    )
    args = parser.parse_args(argv)
    try:
        settings = planned_runs(args)
    except UserError as exc:
        print(f"bench_learning: error: {exc}", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    for (n_embd, workers), runs in settings.items():
        model = runs[0][1]
        ddp = None
        if not args.no_ddp:
            started = time.monotonic()
            ddp = ddp_loss(workers, args, model)
            print(
                f"n_embd {n_embd:>4}  M {workers}  ddp{' (threads)' if args.threaded_ddp else ''}"
                f"{'':<20}  loss {ddp:.4f}  ({time.monotonic() - started:.0f} s)",
                flush=True,
            )
        for (h, outer, exchange), _, plan in runs:
            started = time.monotonic()
            loss = final_loss(plan)
            spec = plan.spec
            penalty = f"{100 * (loss / ddp - 1):+.1f}% vs DDP" if ddp else ""
            print(
                f"n_embd {n_embd:>4}  M {workers}  H {h:>4}  {outer:<8} lr {spec.outer_lr:<6g} mu "
                f"{spec.outer_momentum:<4g} {exchange_label(exchange, args.mean)}  loss {loss:.4f}  {penalty}  "
                f"({time.monotonic() - started:.0f} s)",
                flush=True,
            )
    return 0


def planned_runs(args: argparse.Namespace) -> dict[tuple[int, int], list[tuple]]:
    """Every DiLoCo run's plan by (n_embd, M), built before any training so that a bad setting is
    refused at once (``UserError``): [((H, outer optimizer, exchange keys), model keys, plan)]."""
    exchanges = compression_keys(args)
    settings: dict[tuple[int, int], list[tuple]] = {}
    for n_embd, workers in itertools.product(args.n_embd, args.workers):
        model = {
            "n_embd": n_embd,
            "n_layer": args.n_layer,
            "seed": args.seed,
            **trainer_keys(args.keys),
        }
        settings[(n_embd, workers)] = [
            (
                (h, outer, exchange),
                model,
                plan_for(
                    "diloco",
                    workers,
                    h,
                    args.steps,
                    {**model, **outer_keys(outer, lr, mu), **mean_key(args.mean, exchange)},
                    exchange,
                ),
            )
            for h, outer, lr, mu, exchange in itertools.product(
                args.inner_steps, args.outer, args.outer_lr, args.momentum, exchanges
            )
        ]
    return settings


if __name__ == "__main__":
    sys.exit(main())
