"""The measured layer of the loss model: the scenario's schedule trained for real over a grid.

For each number of workers M in the grid, one DDP run and one run per (algorithm, H, bits, fragments)
point (algorithm: the scenario's schedule unless the grid names others), every run ``steps`` inner
steps per worker with the same workers, so each point and its DDP baseline see the same tokens. The
final evaluation loss of each becomes a ``ProfilePoint``; ``analysis.quality_profile`` prices any
setting from them. Runs go one after the
other: each already uses M processes, and a 2-core machine has no cores to spare.

The regime is stated before the first run: the steps per worker (by default the fewest that give
every point ``MIN_OUTER_STEPS`` outer steps and end on an outer step at every H) and each H's outer
steps; a point with fewer is marked wherever it is shown. With ``tune_outer_lr`` every point is
trained once per outer learning rate of ``OUTER_LR_SWEEP`` and the best kept, as the papers tune the
outer learning rate per setting (Charles et al. 2025, arXiv:2503.09799, section 3: a sweep per model
size and M; DiLoCo 2023 likewise for its outer optimizers).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import sys
import tempfile
import time
from pathlib import Path

from islands.errors import UserError
from islands.scenarios import Scenario, ScenarioSource
from islands.schedules import DDP, GRADIENT, SCHEDULES, switch_to

from ..progress_bar import ProgressBar
from .quality_profile import MIN_OUTER_STEPS, ProfilePoint, QualityProfile

GRID_KEYS = {
    "algorithm": "schedule.algorithm",
    "inner_steps": "schedule.inner_steps",
    "workers": None,
    "bits": "schedule.bits",
    "fragments": "schedule.fragments",
}
Point = dict[str, "int | str"]
# The outer learning rates a tuned point tries: around each optimizer's default (OUTER_DEFAULTS).
OUTER_LR_SWEEP = {
    "nesterov": (0.3, 0.5, 0.7, 1.0),
    "adamw": (3e-4, 1e-3, 3e-3, 1e-2),
    "average": (1.0,),
}


def default_steps(inner_steps: tuple[int, ...]) -> int:
    """The fewest steps per worker giving every H at least ``MIN_OUTER_STEPS`` outer steps, a
    multiple of every H (each run ends on an outer step)."""
    unit = math.lcm(*inner_steps)
    return -(-MIN_OUTER_STEPS * max(inner_steps) // unit) * unit


def check_steps(steps: int, inner_steps: tuple[int, ...]) -> None:
    """One line for an H beyond the run, or steps that do not end on an outer step."""
    beyond = [h for h in inner_steps if h > steps]
    if beyond:
        raise UserError(
            f"--steps {steps}: H = {beyond[0]} is beyond the run's {steps} inner steps per worker "
            f"(no outer step); raise --steps to {default_steps(inner_steps)} or drop that H"
        )
    bad = [h for h in inner_steps if steps % h]
    if bad:
        raise UserError(
            f"--steps {steps}: must be a multiple of every H in the grid, so that each run ends "
            f"on an outer step (not of {', '.join(map(str, bad))})"
        )


def regime(steps: int, inner_steps: tuple[int, ...]) -> str:
    """The line that states the regime every point is measured in."""
    outer = ", ".join(f"H = {h}: {steps // h}" for h in inner_steps)
    few = [h for h in inner_steps if steps // h < MIN_OUTER_STEPS]
    mark = (
        (
            f"; H = {', '.join(map(str, few))} below {MIN_OUTER_STEPS} outer steps: marked, outside the "
            "papers' regime"
        )
        if few
        else ""
    )
    return f"quality: {steps} inner steps per worker for every run, DDP at equal tokens; outer steps {outer}{mark}"


def parse_grid(items: list[str]) -> dict[str, tuple]:
    """``["inner_steps=10,30", "workers=2,4", "algorithm=diloco,streaming"]`` as {key: values}; one
    line for a malformed item."""
    grid: dict[str, tuple] = {}
    for item in items:
        key, _, values = item.partition("=")
        key = key.strip()
        if key not in GRID_KEYS:
            raise UserError(f"--grid {item}: the key must be one of {', '.join(GRID_KEYS)}")
        if key in grid:
            raise UserError(f"--grid {item}: give each key once")
        grid[key] = tuple(
            dict.fromkeys(
                parse_algorithms(item, values) if key == "algorithm" else parse_counts(item, values)
            )
        )
    return grid


def parse_counts(item: str, values: str) -> tuple[int, ...]:
    try:
        parsed = tuple(int(value) for value in values.split(","))
    except ValueError:
        raise UserError(
            f"--grid {item}: values must be whole numbers separated by commas"
        ) from None
    if min(parsed) < 1:
        raise UserError(f"--grid {item}: values must be 1 or more")
    return parsed


def parse_algorithms(item: str, values: str) -> tuple[str, ...]:
    """Schedule names that are compared with DDP: every registered one but those averaging gradients."""
    allowed = [name for name, declared in SCHEDULES.items() if declared.exchanged != GRADIENT]
    parsed = tuple(value.strip() for value in values.split(","))
    unknown = [name for name in parsed if name not in allowed]
    if unknown:
        raise UserError(
            f"--grid {item}: {unknown[0]!r} is not a schedule to compare with DDP "
            f"(one of {', '.join(allowed)})"
        )
    return parsed


def whole(point: Point, key: str) -> int:
    """A whole-number axis of ``point`` (workers, inner_steps: ``GRID_KEYS``)."""
    value = point[key]
    assert isinstance(value, int), f"{key} is a whole-number axis"
    return value


def run_overrides(point: Point, steps: int, algorithm: str) -> list[str]:
    """The ``--set`` list for one run of ``algorithm`` at ``point``, ``steps`` inner steps long."""
    overrides = list(switch_to(algorithm))
    overrides += [
        f"{GRID_KEYS[key]}={value}"
        for key, value in point.items()
        if GRID_KEYS[key] and key != "algorithm"
    ]
    period = 1 if SCHEDULES[algorithm].exchanged == GRADIENT else whole(point, "inner_steps")
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
    """Train once; the run's ``run.json``, which must hold a final evaluation loss. (The trainer is
    imported here: this folder imports no torch until a run is trained.)"""
    from islands.trainer.core.tracing import read_output
    from islands.trainer.kinds import make_run_plan
    from islands.trainer.launch import TrainOptions, train

    plan = make_run_plan(ScenarioSource.read(scenario_name, overrides).scenario, workers)
    with quiet_stdout():
        failed = train(plan, TrainOptions(out_dir=out_dir)).exit_code
    if failed:
        raise UserError(
            f"the quality run {' '.join(overrides)} at M = {workers} failed (its output is above)"
        )
    run = read_output(out_dir, "run")
    if run["final_eval_loss"] is None:
        raise UserError(
            f"the quality run {' '.join(overrides)} at M = {workers} ended without an evaluation"
        )
    return run


def point_fragments(scenario_name: str, overrides: list[str], point: Point, steps: int) -> int:
    """The fragments a point's run really has (1 for a schedule that does not split the model); the
    loader's one line if the point's settings break the schedule's rules."""
    name = str(point["algorithm"])
    scenario = ScenarioSource.read(
        scenario_name, [*overrides, *run_overrides(point, steps, name)]
    ).scenario
    return SCHEDULES[name].fragments(scenario.schedule)


def check_dense(scenario: Scenario) -> None:
    """A profile's points are keyed by (algorithm, H, M, bits, P): they measure dense exchanges."""
    if scenario.schedule.compression != "none":
        raise UserError(
            f'{scenario.source}: schedule.compression: "{scenario.schedule.compression}": a profile\'s '
            'points are dense exchanges (its keys do not hold the compression): set compression = "none"'
        )


def measure_profile(
    scenario_name: str,
    overrides: list[str],
    grid: dict[str, tuple],
    steps: int | None,
    tune_outer_lr: bool = False,
    progress: ProgressBar | None = None,
) -> QualityProfile:
    """Train the grid (see the module docstring) and return its profile (``steps`` None: the default);
    ``progress`` counts the runs and shows each one's loss (default: a bar on stderr)."""
    base = ScenarioSource.read(scenario_name, overrides).scenario
    algorithm = base.schedule.algorithm
    check_dense(base)
    if "algorithm" not in grid and SCHEDULES[algorithm].exchanged == GRADIENT:
        raise UserError(
            f"{base.source}: schedule.algorithm: the profile compares a schedule with DDP; "
            f"set one that is not DDP, or --grid algorithm=... (got {algorithm!r})"
        )
    axes = {
        "algorithm": (algorithm,),
        "inner_steps": (base.schedule.inner_steps,),
        "workers": (min(base.worker_count, 2),),
        "bits": (base.schedule.bits,),
        "fragments": (base.schedule.fragments,),
        **grid,
    }
    outside = [m for m in axes["workers"] if not 2 <= m <= base.worker_count]
    if outside:
        raise UserError(
            f"--grid workers: each M must be between 2 and the scenario's {base.worker_count} workers "
            f"(got {', '.join(map(str, outside))}; raise island.N.replicas for more)"
        )
    steps = steps or default_steps(axes["inner_steps"])
    check_steps(steps, axes["inner_steps"])
    sweep = OUTER_LR_SWEEP[base.trainer.outer_optimizer] if tune_outer_lr else (None,)
    points = [dict(zip(axes, values)) for values in itertools.product(*axes.values())]
    fragments = [
        point_fragments(scenario_name, overrides, point, steps) for point in points
    ]  # refused up front
    total = len(axes["workers"]) + len(points) * len(sweep)
    measured: list[ProfilePoint] = []
    progress = progress or ProgressBar("quality: runs trained")
    progress.note(regime(steps, axes["inner_steps"]))
    progress(0, total)
    with tempfile.TemporaryDirectory(prefix="islands-quality-") as folder:
        done = 0

        def train(point: Point, name: str, outer_lr: float | None = None) -> dict:
            nonlocal done
            started = time.monotonic()
            tuned = [] if outer_lr is None else [f"trainer.outer_lr={outer_lr:g}"]
            run = trained(
                scenario_name,
                [*overrides, *run_overrides(point, steps, name), *tuned],
                whole(point, "workers"),
                Path(folder) / f"run-{done}",
            )
            done += 1
            shown = ", ".join(f"{key} {value}" for key, value in point.items())
            shown += "" if outer_lr is None else f", outer lr {outer_lr:g}"
            progress.note(
                f"quality: {done} of {total}: {name} ({shown}): eval loss {run['final_eval_loss']:.4f} "
                f"({time.monotonic() - started:.0f} s)"
            )
            progress(done, total)
            return run

        baselines = {m: train({"workers": m}, DDP.name) for m in axes["workers"]}
        for point, count in zip(points, fragments):
            losses = {
                lr: train(point, str(point["algorithm"]), lr)["final_eval_loss"] for lr in sweep
            }
            best = min(losses, key=losses.__getitem__)
            if tune_outer_lr:
                progress.note(
                    f"quality: outer lr {best:g} won at {point} (of {', '.join(f'{lr:g}' for lr in sweep)})"
                )
            measured.append(
                ProfilePoint(
                    steps=steps,
                    eval_loss=losses[best],
                    outer_lr=best,
                    ddp_eval_loss=baselines[point["workers"]]["final_eval_loss"],
                    **{**point, "fragments": count},
                )
            )
    progress.close()
    parameters = next(iter(baselines.values()))["parameters"]
    return QualityProfile(base.name, parameters, tuple(measured))
