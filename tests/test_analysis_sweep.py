"""Sweeps: the tidy table's shape and values against single runs, invalid combinations, bad input."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

import pandas as pd
import pytest

from islands.analysis.sweep.runner import flatten_summary, run_sweep
from islands.analysis.sweep.sweep_table import (
    best_rows,
    parameter_columns,
    parquet_available,
    read_sweep,
    write_sweep,
)
from islands.cli import main
from islands.errors import UserError
from islands.scenarios import load
from islands.simulator import simulate

# Worked example: S = 20 GB, 8 workers -> 35 GB per worker per all-reduce, 280 s at 1 Gbit/s; 1.5 s/step.
RING_GB = 2 * 7 / 8 * 20
BASE = ["schedule.outer_steps=2"]
GRID = {"schedule.algorithm": ["diloco", "streaming"], "schedule.inner_steps": [100, 500]}


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return run_sweep("worked-example", GRID, overrides=BASE, jobs=1)


def test_one_row_per_combination_with_parameters_first(table):
    assert len(table) == 4
    assert list(table.columns[:6]) == [
        "run",
        "schedule.algorithm",
        "schedule.inner_steps",
        "seed",
        "valid",
        "error",
    ]
    assert list(table["schedule.algorithm"]) == ["diloco", "diloco", "streaming", "streaming"]
    assert list(table["schedule.inner_steps"]) == [100, 500, 100, 500]


def test_streaming_at_h100_is_invalid_with_the_loaders_reason(table):
    # P = 10 and tau = 20 need H / P > 20, so H = 100 (H / P = 10) cannot run.
    row = table.iloc[2]
    assert not row["valid"]
    assert "overlap_steps" in row["error"] and "10" in row["error"]
    assert pd.isna(row["compute_utilisation"])


def test_every_valid_row_equals_a_single_run(table):
    for _, row in table[table["valid"]].iterrows():
        overrides = [
            *BASE,
            f"schedule.algorithm={row['schedule.algorithm']}",
            f"schedule.inner_steps={row['schedule.inner_steps']}",
        ]
        single = flatten_summary(simulate(load("worked-example", overrides)).summary)
        for key, value in single.items():
            if value is None:
                assert pd.isna(row[key]), key
            else:
                assert row[key] == (pytest.approx(value) if isinstance(value, float) else value), (
                    key
                )


def test_diloco_utilisation_matches_the_closed_form(table):
    # H = 100: 150 s of compute, then a 280 s all-reduce.
    h100 = table[
        (table["schedule.algorithm"] == "diloco") & (table["schedule.inner_steps"] == 100)
    ].iloc[0]
    assert h100["compute_utilisation"] == pytest.approx(150 / (150 + RING_GB * 8))
    assert h100["islands.dc.compute_utilisation"] == pytest.approx(150 / 430)
    assert h100["wall_time_s"] == pytest.approx(2 * 430)


def test_seeds_multiply_rows_and_any_executor_can_run_them():
    with ThreadPoolExecutor(max_workers=2) as executor:
        seeded = run_sweep(
            "worked-example",
            ["schedule.inner_steps=100,500"],
            seeds=3,
            overrides=BASE,
            executor=executor,
        )
    assert len(seeded) == 6
    assert list(seeded["seed"]) == [0, 1, 2, 0, 1, 2]
    assert seeded["valid"].all()


def test_a_process_pool_gives_the_same_table(table):
    pooled = run_sweep("worked-example", GRID, overrides=BASE, jobs=2)
    pd.testing.assert_frame_equal(pooled, table)


def test_best_rows_rank_by_utilisation_then_cheaper_network(table):
    best = best_rows(table, "compute_utilisation", top=2)
    # streaming H=500 hides every transfer (100%); DiLoCo H=500: 750 / (750 + 280).
    assert best["compute_utilisation"].tolist() == pytest.approx([1.0, 750 / 1030])
    assert best["schedule.algorithm"].tolist() == ["streaming", "diloco"]
    assert best_rows(table, "wall_time_s", top=1)["wall_time_s"].iloc[0] == pytest.approx(2 * 430)


def test_flatten_keeps_scalars_and_names_list_entries():
    flat = flatten_summary(
        {"a": 1, "b": {"c": 2.5}, "islands": [{"name": "eu", "x": 3}], "skip": [1, 2]}
    )
    assert flat == {"a": 1, "b.c": 2.5, "islands.eu.x": 3}


def test_written_tables_read_back(table, tmp_path):
    written = write_sweep(table, tmp_path / "out.csv")
    assert [path.name for path in written] == ["out.csv", "out.parquet"][: 1 + parquet_available()]
    for path in written:
        back = read_sweep(path)
        assert back.shape == table.shape
        assert parameter_columns(back) == ["schedule.algorithm", "schedule.inner_steps", "seed"]


@pytest.mark.parametrize(
    "grid, message",
    [
        (
            ["schedule.inner_stepz=1,2"],
            "schedule.inner_stepz: unknown key (did you mean 'schedule.inner_steps'?)",
        ),
        (["schedule.inner_steps="], "schedule.inner_steps: no values"),
        (["schedule.inner_steps=1,,2"], "empty value"),
        (["schedule.inner_steps=0,100"], "schedule.inner_steps: must be >= 1"),
        (["island.9.bandwidth_gbps=1"], "no island 9"),
        (["schedule.fragments=1", "schedule.fragments=2"], "given twice"),
        (
            ["schedule.algorithm=streaming", "schedule.inner_steps=30"],
            "no combination of the grid is a valid scenario",
        ),
    ],
)
def test_bad_grids_are_one_line_errors(grid, message):
    with pytest.raises(UserError, match=re.escape(message)):
        run_sweep("worked-example", grid, overrides=BASE, jobs=1)


def test_unreadable_sweep_table(tmp_path):
    junk = tmp_path / "junk.csv"
    junk.write_text("a,b\n1,2\n")
    with pytest.raises(UserError, match="junk.csv: not a sweep table"):
        read_sweep(junk)
    with pytest.raises(
        UserError, match="missing.parquet: cannot read this sweep table: No such file"
    ):
        read_sweep(tmp_path / "missing.parquet")


def test_cli_writes_the_table_and_prints_the_best(tmp_path, capsys):
    out = tmp_path / "sweep.csv"
    code = main(
        [
            "sweep",
            "worked-example",
            "--set",
            "schedule.outer_steps=2",
            "--grid",
            "island.*.bandwidth_gbps=1,10",
            "--jobs",
            "1",
            "-o",
            str(out),
            "--top",
            "1",
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0
    assert len(pd.read_csv(out)) == 2
    # 10 Gbit/s: the all-reduce takes 28 s against 750 s of compute.
    assert f"{100 * 750 / 778:.1f}%" in printed.splitlines()[-1]


def test_cli_bad_grid_exits_2_with_one_line(capsys):
    assert main(["sweep", "worked-example", "--grid", "nope=1"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and "nope" in error


def test_a_mean_over_seeds_carries_its_spread_and_the_sweep_prints_it():
    """Two seeds per H: utilisation 0.5 and 0.7 at H = 100 (mean 0.6, sample sd sqrt(2 x 0.1^2 / 1) =
    0.1414), 0.8 and 0.8 at H = 500 (sd 0)."""
    from islands.commands.sweep import best_table

    table = pd.DataFrame(
        {
            "schedule.inner_steps": [100, 100, 500, 500],
            "seed": [1, 2, 1, 2],
            "valid": [True] * 4,
            "compute_utilisation": [0.5, 0.7, 0.8, 0.8],
        }
    )
    best = best_rows(table, "compute_utilisation")
    assert best["schedule.inner_steps"].tolist() == [500, 100] and best["seeds"].tolist() == [2, 2]
    assert best["compute_utilisation"].tolist() == pytest.approx([0.8, 0.6])
    assert best["compute_utilisation_sd"].tolist() == pytest.approx([0.0, 0.1 * 2**0.5])
    text = best_table(best, "compute_utilisation", seeds=2)
    assert "sd of compute_utilisation over seeds" in text.splitlines()[0]
    assert text.splitlines()[-1].split()[-1] == "14.1%"
    assert "over seeds" not in best_table(best)  # one seed: no spread to show
