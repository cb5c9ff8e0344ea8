"""The demo's real run: a scenario scaled down to about a minute on 2 CPU cores, beside its prediction.

Scaling keeps the number of workers M, the algorithm and its semantics (bits, fragments, overlap
where they fit) and shrinks the rest: H to at most ``DEMO_INNER_STEPS``, at most ``DEMO_OUTER_STEPS``
outer steps (DDP: H x that many steps), the trainer's small default GPT, a small corpus.

Calibration of the prediction: the simulator plays the same scaled scenario with ``step_time_s`` set
to the measured mean compute seconds per inner step and ``model.parameters`` set to the real
model's parameter count, so the predicted compute and bytes describe the run that happened. The
links stay the scenario's: until network emulation wraps the islands, the real run talks over
loopback, so measured sync times show this machine, not the scenario's WAN.
"""

from __future__ import annotations

from pathlib import Path

from islands.errors import UserError
from islands.scenarios import load
from islands.simulator import simulate

from .config import make_plan
from .launch import launch_local
from .tracing import read_output

DEMO_INNER_STEPS = 20
DEMO_OUTER_STEPS = 4
DEMO_TRAINER = ["trainer.corpus_bytes=300000", "trainer.eval_batches=2", "trainer.checkpoint_every=0",
                "trainer.warmup_steps=5", "trainer.pace_step_time_s=0", "trainer.pace_islands=false"]


def scaled_overrides(scenario_name: str) -> list[str]:
    """``--set`` overrides that shrink a scenario to a short real run, keeping M and the algorithm."""
    schedule = load(scenario_name).schedule
    h = min(schedule.inner_steps, DEMO_INNER_STEPS)
    outer = min(schedule.outer_steps, DEMO_OUTER_STEPS)
    sets = [f"schedule.inner_steps={h}", f"schedule.outer_steps={outer * h if schedule.algorithm == 'ddp' else outer}"]
    if schedule.algorithm == "streaming":
        fragments = 2 if h % 2 == 0 else 1
        sets += [f"schedule.fragments={fragments}", f"schedule.overlap_steps={min(schedule.overlap_steps, h // fragments - 1)}",
                 f"trainer.n_layer={max(2, fragments)}"]
    return sets + DEMO_TRAINER


def scaled_demo(scenario_name: str, out_dir: str | Path) -> tuple[dict, dict]:
    """Train the scaled scenario for real, then simulate it calibrated; (measured, predicted) summaries."""
    out_dir = Path(out_dir)
    overrides = scaled_overrides(scenario_name)
    plan = make_plan(load(scenario_name, overrides))
    arguments = [scenario_name, *[a for s in overrides for a in ("--set", s)], "--out", str(out_dir)]
    code = launch_local(arguments, plan)
    if code:
        raise UserError(f"the demo's training run failed with exit code {code} (its output is above)")
    measured = read_output(out_dir, "summary")
    parameters = read_output(out_dir, "run")["parameters"]
    step_time_s = measured["compute_s"] / measured["inner_steps"]
    calibrated = overrides + [f"island.*.step_time_s={step_time_s!r}", f"model.parameters={parameters}"]
    return measured, simulate(load(scenario_name, calibrated)).summary
