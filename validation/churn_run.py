"""Churn in a validation: the scaled elastic run with its events played, and lost compute and join
time predicted beside measured.

The real run is started by the elastic launcher (``islands.trainer.elastic.launch``), which hosts the run's
store and plays the ``[[event]]`` entries. It runs inside island 0's namespace (the islands'
namespaces reach each other over the emulated bridge, not the host), as
``python -m islands.validation.churn_run SCENARIO OUT SPEC``; each island's process is started in
its own namespace with the pacer in its environment, as ``run`` does for fixed membership.

Predicted join time: the joining worker's first compute start at or after the event, in the
simulator's trace, minus the event's time; measured: ``join_s`` in the run's ``churn.json`` (from
the join request to the island's first compute). Both are trace seconds.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

from islands.emulation.link_specs import Shaper
from islands.trainer.elastic.launch import launch_elastic
from islands.trainer.runtime.processes import IslandLaunch, rank_environment

from .compare import Figure, relative_error
from .run import VALIDATE_STEM, Measured, rendezvous, run_all, sent_bytes
from .run_folder import read_json, read_run


def island_launches(wan, islands: int) -> list[dict]:
    return [
        {
            "prefix": wan.command_prefix(i),
            "env": {"TORCH_CPP_LOG_LEVEL": "ERROR", **wan.environment(i)},
            "wan_pacer": wan.pacer_config(),
        }
        for i in range(islands)
    ]


def train_elastic(
    scenario_path: Path,
    plan,
    out_dir: Path,
    kernel: bool | None,
    stem: str = VALIDATE_STEM,
    shaper: Shaper = Shaper(),
) -> Measured:
    """Train ``scenario_path`` (scaled, with events) under emulation; outputs go to ``out_dir``."""
    from islands.emulation import links_from_workers, open_wan

    with open_wan(
        links_from_workers(plan.workers), prefix=f"{stem}churn", kernel=kernel, shaper=shaper
    ) as wan:
        before = sent_bytes(wan, plan.islands)
        address, port = rendezvous(wan)
        spec = {"address": address, "port": port, "islands": island_launches(wan, plan.islands)}
        command = [
            *wan.command_prefix(0),
            sys.executable,
            "-m",
            "islands.validation.churn_run",
            str(scenario_path),
            str(out_dir),
            json.dumps(spec),
        ]
        run_all([subprocess.Popen(command, stdout=subprocess.DEVNULL)], "the scaled elastic run")
        after = sent_bytes(wan, plan.islands)
        label = wan.label
    moved = (
        [a - b for a, b in zip(after, before)] if before is not None and after is not None else None
    )
    run = read_run(out_dir)
    summary = {**run.summary, "churn": read_json(out_dir / "churn.json")}
    return Measured(
        summary=summary,
        trace=run.trace,
        run_info=run.run_info,
        interface_bytes=moved,
        wan_label=label,
        weights_broadcast=False,
    )  # trainer.elastic: every island from the seed


def predicted_join_s(
    trace: pd.DataFrame, events: list[dict], names: list[str]
) -> list[float | None]:
    """Per join event: the joiner's first compute start at or after it, minus the event's time."""
    joins = []
    for event in (e for e in events if e["kind"] == "join"):
        worker = names.index(event["island"])
        starts = trace[
            (trace.worker == worker)
            & (trace.kind == "compute")
            & (trace.time_start_s >= event["at_s"])
        ]
        joins.append(float(starts.time_start_s.min()) - event["at_s"] if len(starts) else None)
    return joins


def mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def churn_figures(
    predicted: dict, predicted_trace: pd.DataFrame, measured: dict, document: dict
) -> list[Figure]:
    """Leaves, joins, lost compute (seconds, all departures) and mean join time, both sides."""
    names = [island["name"] for island in document["island"]]
    join_p = mean(predicted_join_s(predicted_trace, document["event"], names))
    join_m = mean([join["join_s"] for join in measured["churn"]["joins"]])
    rows = [
        ("leaves", "count", predicted["leaves"], measured["leaves"]),
        ("joins", "count", predicted["joins"], measured["joins"]),
        ("lost compute", "s", predicted["lost_compute_s"], measured["lost_compute_s"]),
        ("join time (event to first compute)", "s", join_p, join_m),
    ]
    return [
        Figure(name, unit, p, m, relative_error(p, m) if p is not None else None)
        for name, unit, p, m in rows
    ]


def main(argv: list[str]) -> int:
    """The launcher inside island 0's namespace: ``SCENARIO OUT SPEC`` (SPEC: JSON from ``train_elastic``)."""
    from islands.scenarios import ScenarioSource
    from islands.trainer.kinds import make_run_plan
    from islands.trainer.launch import PLAN_FILE
    from islands.trainer.runtime.spec import LaunchSpec

    scenario_path, out_dir, spec = argv[0], argv[1], json.loads(argv[2])
    plan = make_run_plan(ScenarioSource.read(scenario_path).scenario)
    with tempfile.TemporaryDirectory(prefix="islands-churn-") as folder:
        plan_file = Path(folder) / PLAN_FILE
        plan_file.write_bytes(pickle.dumps(plan))
        run = LaunchSpec(plan_file=str(plan_file), out_dir=out_dir)

        def environment(island: int, **process: Any) -> tuple[list[str], dict]:
            launch = IslandLaunch(**spec["islands"][island])
            return list(launch.prefix), rank_environment(
                island, plan, spec["address"], spec["port"], launch, replace(run, **process)
            )

        return launch_elastic(plan, spec["address"], spec["port"], environment)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
