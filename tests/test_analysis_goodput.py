"""The goodput grid against the table Decoupled DiLoCo published (Douillard et al. 2026, Table 1)."""

from __future__ import annotations

import pytest

from islands.analysis.sweep.goodput import METHODS, PAPER_GOODPUT_PERCENT, goodput_table, table_text
from islands.cli import main


@pytest.fixture(scope="module")
def corners():
    # the two largest fleets (the shortest runs for 100 failures) under DP both ways and M=16
    chosen = [METHODS[0], METHODS[1], METHODS[-1]]
    return goodput_table(failures=100, chips=(1_200_000, 2_400_000), methods=tuple(chosen), jobs=2)


def test_simulated_goodput_is_within_6_points_of_the_paper(corners):
    assert len(corners) == 6
    assert corners["difference_points"].abs().max() <= 6
    assert (corners["failures"] > 70).all()


def test_goodput_falls_with_the_fleet_and_rises_with_elasticity_and_learners(corners):
    at = corners.set_index(["method", "chips"])["simulated_percent"]
    assert at["DP, non-elastic", 1_200_000] > at["DP, non-elastic", 2_400_000]
    assert (
        at["DP, non-elastic", 1_200_000]
        < at["DP, elastic", 1_200_000]
        < at["Decoupled, M=16", 1_200_000]
    )


def test_the_table_shows_the_papers_number_beside_each_cell(corners):
    text = table_text(corners)
    assert "| DP, non-elastic |" in text and "(27%)" in text and "(18%)" in text
    assert PAPER_GOODPUT_PERCENT["Decoupled, M=16"][-1] == 86 and "(86%)" in text


def test_cli_refuses_a_bad_failure_count(capsys):
    assert main(["goodput", "--failures", "0"]) == 2
    assert "--failures must be in [1, 10000] (got 0)" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("scenario", "rule"),
    [
        ("worked-example", "island.0.chip_mtbf_s: is required for the goodput grid"),
        ("home-lab", "splits one island's fleet among its workers; this scenario has"),
    ],
)
def test_cli_refuses_a_scenario_the_grid_cannot_split(capsys, scenario, rule):
    assert main(["goodput", scenario]) == 2
    assert rule in capsys.readouterr().err
