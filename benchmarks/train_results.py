"""The results table of docs/tutorials/train.md: DDP, DiLoCo, Streaming DiLoCo and plain averaging,
trained for real on the same scenario with the same token budget, evaluated at the same token counts.

    python benchmarks/train_results.py --out runs/results [--workers 2] [--inner-steps 50] [--outer-steps 20]

prints a Markdown table: eval loss at a quarter, half and all of the tokens, bytes each worker sent
(measured, on the wire) and measured compute utilisation.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from islands.errors import UserError
from islands.scenarios import ScenarioSource
from islands.tables import size
from islands.trainer.core.tracing import read_output
from islands.trainer.kinds import make_run_plan
from islands.trainer.launch import TrainOptions
from islands.trainer.launch import train as train_plan

SCENARIO = "worked-example"


def variants(h: int, outer: int) -> dict[str, list[str]]:
    """The four runs, as ``--set`` overrides; every one trains h * outer inner steps per island."""
    diloco = [
        "schedule.algorithm=diloco",
        f"schedule.inner_steps={h}",
        f"schedule.outer_steps={outer}",
    ]
    return {
        "DDP": [
            "schedule.algorithm=ddp",
            f"schedule.inner_steps={h}",
            f"schedule.outer_steps={h * outer}",
        ],
        "DiLoCo (Nesterov 0.7/0.9)": diloco,
        "Streaming DiLoCo (P=2, tau=5)": [
            "schedule.algorithm=streaming",
            f"schedule.inner_steps={h}",
            f"schedule.outer_steps={outer}",
            "schedule.fragments=2",
            "schedule.overlap_steps=5",
        ],
        "plain averaging (lr 1, no momentum)": diloco + ["trainer.outer_optimizer=average"],
    }


def train(label: str, overrides: list[str], workers: int, out_dir: Path) -> dict:
    plan = make_run_plan(ScenarioSource.read(SCENARIO, overrides).scenario, workers)
    if train_plan(plan, TrainOptions(out_dir=out_dir)).exit_code:
        raise UserError(f"the {label} run failed (its output is above)")
    return {name: read_output(out_dir, name) for name in ("summary", "run")}


def loss_at(run: dict, tokens: int) -> float:
    """The eval loss recorded at the last evaluation with at most ``tokens`` tokens trained."""
    per_step = run["tokens"] / run["steps"]
    return [loss for step, loss in run["eval_losses"] if step * per_step <= tokens][-1]


def table(results: dict[str, dict]) -> str:
    total = next(iter(results.values()))["run"]["tokens"]
    marks = [total // 4, total // 2, total]
    header = [
        "run",
        *(f"eval loss @ {t / 1e6:.2f}M tokens" for t in marks),
        "sent per worker",
        "utilisation",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for label, result in results.items():
        run, summary = result["run"], result["summary"]
        cells = [
            label,
            *(f"{loss_at(run, t):.3f}" for t in marks),
            size(summary["bytes_per_worker"]),
            f"{100 * summary['compute_utilisation']:.1f}%",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/results", help="folder for the four runs")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--inner-steps", type=int, default=50)
    parser.add_argument("--outer-steps", type=int, default=20)
    args = parser.parse_args()
    results = {}
    for index, (label, overrides) in enumerate(
        variants(args.inner_steps, args.outer_steps).items()
    ):
        results[label] = train(label, overrides, args.workers, Path(args.out) / f"run-{index}")
    print(table(results))


if __name__ == "__main__":
    main()
