"""Sweeps and plans on a Dask cluster through the executor interface: the same answers as the local
process pool, and one line when the scheduler cannot be reached."""

from __future__ import annotations

import json

import pytest

distributed = pytest.importorskip("distributed")

from islands.analysis.sweep.runner import run_sweep  # noqa: E402
from islands.cli import main  # noqa: E402
from islands.commands import common  # noqa: E402
from islands.scenarios import ScenarioSource  # noqa: E402


def test_a_sweep_on_a_local_cluster_equals_the_local_pool():
    source = ScenarioSource.read("worked-example")
    grid = {"schedule.inner_steps": [100, 500], "island.*.bandwidth_gbps": [1.0, 10.0]}
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        on_cluster = run_sweep(source, grid, executor=client.get_executor())
    local = run_sweep(source, grid, jobs=1)
    assert on_cluster.equals(local)
    # DiLoCo at H = 500, 1 Gbit/s: 750 s of compute and 280 s of all-reduce per outer step
    row = on_cluster[
        (on_cluster["schedule.inner_steps"] == 500) & (on_cluster["island.*.bandwidth_gbps"] == 1.0)
    ]
    assert float(row["compute_utilisation"].iloc[0]) == pytest.approx(750 / 1030)


def test_plan_with_dask_local_answers_as_without(capsys):
    argv = [
        "plan",
        "worked-example",
        "--no-fragments",
        "--json",
        "--targets",
        "0.9",
        "--set",
        "schedule.outer_steps=2",
    ]
    assert main(argv) == 0
    local = json.loads(capsys.readouterr().out)
    assert main([*argv, "--dask", "local"]) == 0
    assert json.loads(capsys.readouterr().out) == local


def test_an_unreachable_scheduler_is_one_line(capsys, monkeypatch):
    monkeypatch.setattr(common, "DASK_CONNECT_TIMEOUT_S", 1)
    assert (
        main(
            [
                "sweep",
                "worked-example",
                "--grid",
                "schedule.inner_steps=100",
                "--dask",
                "tcp://127.0.0.1:1",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert (
        "--dask tcp://127.0.0.1:1: cannot reach a Dask scheduler there" in err
        and len(err.splitlines()) == 1
    )
