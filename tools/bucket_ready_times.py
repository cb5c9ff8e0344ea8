"""Measure when the real backward pass has DDP's buckets ready, against the simulator's assumption.

Trains the GPT that ``islands validate worked-example --compute measured`` scales DDP to (buckets of
``bucket_cap_mb`` 3000, ``backward_overlap`` 0.6, two islands), unpaced, as threads of this process,
one exchange per step, and prints each call's mean place in its step's first-to-last-bucket window
(``run.json``'s ``backward_buckets``) beside ``schedules.buckets``' ready fractions (ready in
proportion to the values produced), and where in the step the first bucket was ready: the overlap
the real backward pass gives, against the scenario's 0.6.

    python tools/bucket_ready_times.py [STEPS]     # docs/how-to/ddp-buckets.md shows one run
"""

from __future__ import annotations

import os
import statistics
import sys
import tomllib

from islands.scenarios import from_dict, load
from islands.schedules.buckets import layout_of
from islands.trainer.core.inprocess import run_threads, thread_groups
from islands.trainer.core.loop import Trainer
from islands.trainer.kinds import make_run_plan
from islands.validation.scaling import ScaleOptions, scale, to_toml

KEYS = [
    "schedule.algorithm=ddp",
    "exchange.calls=buckets",
    "exchange.bucket_cap_mb=3000",
    "schedule.backward_overlap=0.6",
]


def shown(values: list[float]) -> str:
    return ", ".join(f"{value:.3f}" for value in values)


def main(steps: int) -> None:
    case = scale(load("worked-example", KEYS), ScaleOptions(max_workers=2, pace=False))
    document = tomllib.loads(to_toml(case.document))
    document["schedule"].update(outer_steps=steps, inner_steps=1)
    scenario = from_dict(document, "scaled.toml")
    plan = make_run_plan(scenario)
    groups = thread_groups(plan.islands, plan.ranks_per_island)
    trainers = run_threads(plan.world_size, lambda rank: Trainer(plan, rank, groups[rank]))
    run_threads(plan.world_size, lambda rank: trainers[rank].run())
    run_threads(plan.world_size, lambda rank: trainers[rank].finish())
    model = layout_of(scenario.exchange, scenario.model.parameters, scenario.model.bytes_per_param)
    print(f"{model.calls} buckets of {shown([size for size in model.sizes()])} values")
    print(f"simulated ready fractions: {shown(model.ready_fractions())}")
    for trainer in trainers:
        info = trainer.run_info()
        buckets, step_s = info["backward_buckets"], info["mean_step_compute_s"]
        records = trainer.backward_calls[1:]  # the first step warms up
        backward_s = statistics.median(r.end_s - r.start_s for r in records)
        overlap_s = statistics.median(r.end_s - r.calls[0].ready_s for r in records)
        print(
            f"island {trainer.island}: measured {shown(buckets['ready_fractions'])}; "
            f"{100 * buckets['started_in_backward']:.0f}% of calls started in the backward pass; "
            f"compute {step_s * 1e3:.1f} ms a step, backward {backward_s * 1e3:.1f} ms, first "
            f"bucket ready {overlap_s * 1e3:.1f} ms before the compute's end "
            f"(overlap {overlap_s / step_s:.2f} of the step)"
        )
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 12)
