"""Does the DiLoCo machinery slow the inner loop? Measured in one process, on the default model.

1. Throughput: the same model, data sampler, AdamW, learning-rate schedule and gradient clipping,
   once as a plain loop and once as the trainer's own inner loop (``Trainer.run_steps``, with its
   trace recording, pacing check and metrics file), for the same number of steps. The two alternate
   ``ROUNDS`` times and the median of each is kept (the machine is shared). Target ratio >= 0.95.
2. Outer-step overhead: the three things the trainer does per sync besides communicating (the
   pseudo-gradient, the outer optimizer step on the fp32 global copy, the merge into the local
   weights), timed on the same model and reported as a fraction of one inner step.

    python benchmarks/bench_trainer.py [--steps 100] [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from islands.scenarios import load
from islands.trainer.core.data import BatchSampler, sampler_seed
from islands.trainer.core.inprocess import thread_groups
from islands.trainer.core.loop import Trainer, default_corpus, learning_rate, make_inner_optimizer
from islands.trainer.core.model import GPTConfig, build_model
from islands.trainer.kinds import make_run_plan

OUTER_REPEATS = 20
NEVER_SYNC = ["schedule.algorithm=diloco", "schedule.inner_steps=1000000", "schedule.outer_steps=1"]


def plain_loop(plan, corpus, steps: int) -> float:
    """Seconds for ``steps`` steps of an ordinary training loop; returns steps per second."""
    spec = plan.spec
    model = build_model(
        GPTConfig(spec.block_size, spec.n_layer, spec.n_head, spec.n_embd), spec.seed
    )
    optimizer = make_inner_optimizer(model, plan)
    sampler = BatchSampler(
        corpus.shards[0], spec.batch_size, spec.block_size, sampler_seed(spec.seed, 0)
    )
    start = time.perf_counter()
    for step in range(steps):
        x, y = sampler.next_batch()
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(
                step, plan.total_steps, spec.lr, spec.warmup_steps, spec.min_lr_ratio
            )
        loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), spec.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        loss.item()
    return steps / (time.perf_counter() - start)


def trainer_loop(plan, corpus, steps: int, out_dir: Path) -> tuple[float, Trainer]:
    groups = thread_groups(1, 1)[0]  # one island alone: the loop never reaches a sync
    trainer = Trainer(plan, 0, groups, out_dir=out_dir, corpus=corpus)
    start = time.perf_counter()
    trainer.run_steps(steps)
    rate = steps / (time.perf_counter() - start)
    return rate, trainer


def timed(work, repeats: int) -> float:
    start = time.perf_counter()
    for _ in range(repeats):
        work()
    return (time.perf_counter() - start) / repeats


def outer_overhead(trainer: Trainer) -> dict[str, float]:
    fragment = trainer.fragments[0]
    delta = fragment.pseudo_gradient()
    return {
        "pseudo-gradient": timed(fragment.pseudo_gradient, OUTER_REPEATS),
        "optimizer step": timed(lambda: fragment.outer_step(delta), OUTER_REPEATS),
        "merge": timed(lambda: fragment.merge(0.0), OUTER_REPEATS),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    plan = make_run_plan(load("worked-example", NEVER_SYNC), workers=2)
    corpus = default_corpus(plan)
    plain, ours = [], []
    with tempfile.TemporaryDirectory() as folder:
        for round_index in range(args.rounds):
            plain.append(plain_loop(plan, corpus, args.steps))
            rate, trainer = trainer_loop(plan, corpus, args.steps, Path(folder) / str(round_index))
            ours.append(rate)
            trainer.finish()
    plain_rate, our_rate = statistics.median(plain), statistics.median(ours)
    parameters = sum(p.numel() for p in trainer.params)
    print(
        f"model: {parameters:,} parameters, batch {plan.spec.batch_size} x {plan.spec.block_size} bytes, "
        f"{args.steps} steps x {args.rounds} rounds, 1 thread"
    )
    print(
        f"plain loop     {plain_rate:8.1f} steps/s  (rounds: {', '.join(f'{r:.1f}' for r in plain)})"
    )
    print(
        f"trainer loop   {our_rate:8.1f} steps/s  (rounds: {', '.join(f'{r:.1f}' for r in ours)})"
    )
    print(f"throughput ratio trainer / plain = {our_rate / plain_rate:.3f} (target >= 0.95)")
    step_s = 1 / our_rate
    costs = outer_overhead(trainer)
    for name, seconds in costs.items():
        print(f"outer {name:<16}{seconds * 1e3:7.3f} ms = {seconds / step_s:.3f} inner steps")
    total = sum(costs.values())
    print(
        f"outer step overhead (without communication) = {total / step_s:.3f} of one inner step "
        f"({total * 1e3:.3f} ms vs {step_s * 1e3:.3f} ms)"
    )


if __name__ == "__main__":
    main()
