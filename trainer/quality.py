"""The measured layer of the loss model: the scenario's schedule trained for real over a grid.

For each number of workers M in the grid, one DDP run and one run of the scenario's schedule per
(H, bits, fragments) point, every run ``steps`` inner steps per worker with the same workers, so each
point and its DDP baseline see the same tokens. The final evaluation loss of each becomes a
``ProfilePoint``; ``analysis.quality_profile`` prices any setting from them. Runs go one after the
other: each already uses M processes, and a 2-core machine has no cores to spare.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import tempfile
import time
from pathlib import Path

from islands.analysis.quality_profile import ProfilePoint, QualityProfile
from islands.errors import UserError
from islands.scenarios import load
from islands.schedules import GRADIENT, SCHEDULES

from .config import make_plan
from .launch import launch_local
from .tracing import read_output

GRID_KEYS = {"inner_steps": "schedule.inner_steps", "workers": None, "bits": "schedule.bits",
             "fragments": "schedule.fragments"}


def parse_grid(items: list[str]) -> dict[str, tuple[int, ...]]:
    """``["inner_steps=10,30", "workers=2,4"]`` as {key: values}; one line for a malformed item."""
    grid: dict[str, tuple[int, ...]] = {}
    for item in items:
        key, _, values = item.partition("=")
        key = key.strip()
        if key not in GRID_KEYS:
            raise UserError(f"--grid {item}: the key must be one of {', '.join(GRID_KEYS)}")
        try:
            parsed = tuple(int(value) for value in values.split(","))
        except ValueError:
            raise UserError(f"--grid {item}: values must be whole numbers separated by commas") from None
        if not parsed or min(parsed) < 1 or key in grid:
            raise UserError(f"--grid {item}: give each key once, with values >= 1")
        grid[key] = tuple(dict.fromkeys(parsed))
    return grid


def run_overrides(point: dict[str, int], steps: int, algorithm: str) -> list[str]:
    """The ``--set`` list for one run of ``algorithm`` at ``point``, ``steps`` inner steps long."""
    overrides = [f"schedule.algorithm={algorithm}"]
    overrides += [f"{GRID_KEYS[key]}={value}" for key, value in point.items() if GRID_KEYS[key]]
    period = 1 if SCHEDULES[algorithm].exchanged == GRADIENT else point["inner_steps"]
    return overrides + [f"schedule.outer_steps={steps // period}"]


@contextlib.contextmanager
def quiet_stdout():
    """Send this process's and its children's standard output to /dev/null (each run prints its own
    summary table); standard error, where a failing run explains itself, stays."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def trained(scenario_name: str, overrides: list[str], workers: int, out_dir: Path) -> dict:
    """Train once; the run's ``run.json``, which must hold a final evaluation loss."""
    plan = make_plan(load(scenario_name, overrides), workers)
    arguments = [scenario_name, "--workers", str(workers), *[a for s in overrides for a in ("--set", s)],
                 "--out", str(out_dir)]
    with quiet_stdout():
        failed = launch_local(arguments, plan)
    if failed:
        raise UserError(f"the quality run {' '.join(overrides)} at M = {workers} failed (its output is above)")
    run = read_output(out_dir, "run")
    if run["final_eval_loss"] is None:
        raise UserError(f"the quality run {' '.join(overrides)} at M = {workers} ended without an evaluation")
    return run


def measure_profile(scenario_name: str, overrides: list[str], grid: dict[str, tuple[int, ...]],
                    steps: int) -> QualityProfile:
    """Train the grid (see the module docstring) and return its profile."""
    base = load(scenario_name, overrides)
    algorithm = base.schedule.algorithm
    if SCHEDULES[algorithm].exchanged == GRADIENT:
        raise UserError(f"{base.source}: schedule.algorithm: the profile compares a schedule with DDP; "
                        f"set one that is not DDP (got {algorithm!r})")
    axes = {"inner_steps": (base.schedule.inner_steps,), "workers": (min(base.worker_count, 2),),
            "bits": (base.schedule.bits,), "fragments": (SCHEDULES[algorithm].fragments(base.schedule),), **grid}
    outside = [m for m in axes["workers"] if not 2 <= m <= base.worker_count]
    if outside:
        raise UserError(f"--grid workers: each M must be between 2 and the scenario's {base.worker_count} workers "
                        f"(got {', '.join(map(str, outside))}; raise island.N.replicas for more)")
    bad = [h for h in axes["inner_steps"] if steps % h]
    if bad:
        raise UserError(f"--steps {steps}: must be a multiple of every H in the grid, so that each run ends "
                        f"on an outer step (not of {', '.join(map(str, bad))})")
    points = [dict(zip(axes, values)) for values in itertools.product(*axes.values())]
    total = len(axes["workers"]) + len(points)
    measured: list[ProfilePoint] = []
    with tempfile.TemporaryDirectory(prefix="islands-quality-") as folder:
        done = 0

        def train(point: dict[str, int], name: str) -> dict:
            nonlocal done
            started = time.monotonic()
            run = trained(scenario_name, [*overrides, *run_overrides(point, steps, name)],
                          point["workers"], Path(folder) / f"run-{done}")
            done += 1
            shown = ", ".join(f"{key} {value}" for key, value in point.items())
            print(f"quality: {done} of {total}: {name} ({shown}): eval loss {run['final_eval_loss']:.4f} "
                  f"({time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)
            return run

        baselines = {m: train({"workers": m}, "ddp") for m in axes["workers"]}
        for point in points:
            run = train(point, algorithm)
            measured.append(ProfilePoint(algorithm=algorithm, steps=steps, eval_loss=run["final_eval_loss"],
                                         ddp_eval_loss=baselines[point["workers"]]["final_eval_loss"], **point))
    parameters = next(iter(baselines.values()))["parameters"]
    return QualityProfile(base.name, parameters, tuple(measured))
