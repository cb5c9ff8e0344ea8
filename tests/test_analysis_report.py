"""The HTML report is one self-contained page; demo_outputs writes the plot and the report."""

from __future__ import annotations

import base64
import re

import pytest

from islands.analysis import demo_outputs
from islands.analysis.report.html_report import build_report, scenario_table
from islands.cli import main
from islands.scenarios import ScenarioSource

SMALL = ["schedule.outer_steps=1"]


@pytest.fixture(scope="module")
def page() -> str:
    return build_report(
        "worked-example", SMALL, target=0.95, targets=(0.95,), fragments=False, jobs=1
    )


def test_report_embeds_its_five_plots_as_png(page):
    images = re.findall(r"src='data:image/png;base64,([^']+)'", page)
    assert len(images) == 5  # bandwidth, timeline, breakdown, loss against time, heatmap
    assert all(base64.b64decode(data)[:8] == b"\x89PNG\r\n\x1a\n" for data in images)


def test_report_is_self_contained(page):
    # its only scripts are inline: the what-if panel's data and the code that reads it
    assert not re.search(r"(src|href)=['\"](?!data:)", page)
    assert re.findall(r"<script[^>]*>", page) == [
        "<script type='application/json' id='whatif-data'>",
        "<script>",
    ]
    assert not re.search(r"<link|@import|url\(", page)


def test_report_compares_the_schedules_at_equal_work(page):
    # one outer step of H = 500: DDP runs 500 steps beside DiLoCo's one interval
    assert "Equal work: every schedule runs 500 inner steps per worker." in page
    for schedule in ("DDP", "DiLoCo", "Streaming DiLoCo"):
        assert f"<tr><td>{schedule}</td><td>500</td>" in page


def test_report_has_the_summary_and_the_plan(page):
    # DiLoCo at 1 Gbit/s: 750 / (750 + 280); for 95%: 280 / (750 * (1/0.95 - 1)) = 7.09 Gbit/s
    assert f"{100 * 750 / 1030:.1f}%" in page
    assert f"{280 / (750 * (1 / 0.95 - 1)):.3g} Gbit/s" in page
    assert "Smallest H reaching 95%" in page


def test_demo_outputs_writes_the_bandwidth_plot_and_the_report(tmp_path, scenario_file):
    # tau = 60 of H = 100 leaves P = 1 as the only fragment count, which keeps the plan's search small
    small = scenario_file(
        'name = "small"\n[model]\nparameters = 1e9\n[schedule]\nalgorithm = "diloco"\ninner_steps = 100\n'
        "outer_steps = 1\noverlap_steps = 60\n"
        '[[island]]\nname = "a"\nreplicas = 2\nstep_time_s = 1.0\nbandwidth_gbps = 1.0\n'
    )
    paths = demo_outputs(str(small), tmp_path / "out")
    assert paths == {
        "bandwidth": tmp_path / "out" / "small-bandwidth.png",
        "report": tmp_path / "out" / "small-report.html",
    }
    assert paths["bandwidth"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert paths["report"].read_text().startswith("<!DOCTYPE html>")


def test_demo_outputs_keep_a_hostile_scenario_name_inside_the_folder(tmp_path, scenario_file):
    small = scenario_file(
        'name = "../../escaped/x"\n[model]\nparameters = 1e9\n[schedule]\nalgorithm = "diloco"\n'
        "inner_steps = 100\nouter_steps = 1\noverlap_steps = 60\n"
        '[[island]]\nname = "a"\nreplicas = 2\nstep_time_s = 1.0\nbandwidth_gbps = 1.0\n'
    )
    out = tmp_path / "deep" / "out"
    paths = demo_outputs(str(small), out)
    assert {path.parent for path in paths.values()} == {out}
    assert paths["bandwidth"].name == "escaped_x-bandwidth.png"
    assert not (tmp_path / "escaped").exists()


def test_cli_report_refuses_where_without_a_sweep_and_other_extensions(tmp_path, capsys):
    assert main(["report", "worked-example", "--where", "schedule.inner_steps=100"]) == 2
    assert "--where picks rows of a sweep table" in capsys.readouterr().err
    assert main(["report", "worked-example", "-o", str(tmp_path / "r.pdf")]) == 2
    assert (
        "r.pdf: '.pdf' is not a format this writes; end the name with .html, .htm"
        in capsys.readouterr().err
    )


def test_cli_report(tmp_path, capsys):
    out = tmp_path / "report.html"
    code = main(
        [
            "report",
            "worked-example",
            "--set",
            "schedule.outer_steps=1",
            "--no-fragments",
            "--jobs",
            "1",
            "-o",
            str(out),
        ]
    )
    assert code == 0 and out.stat().st_size > 0
    assert str(out) in capsys.readouterr().out


def test_the_heatmap_bandwidth_axis_moves_asymmetric_links_too():
    # home-lab's fibre island: 1 Gbit/s down, 100 Mbit/s up; upload_gbps / download_gbps would
    # override island.*.bandwidth_gbps, so the report's sweep source drops them (keeping the slower one)
    symmetric = ScenarioSource.read("home-lab").with_symmetric_links()
    fibre = symmetric.scenario.islands[0]
    assert (fibre.upload_gbps, fibre.download_gbps) == (0.1, 0.1)
    moved = symmetric.variant("island.*.bandwidth_gbps=5").islands
    assert {(i.upload_gbps, i.download_gbps) for i in moved} == {(5.0, 5.0)}


def test_the_scenario_table_shows_step_times_to_three_digits_and_both_ways_of_unequal_links():
    source = ScenarioSource.read(
        "mixed-fleet", ["island.0.upload_gbps=0.05", "island.0.download_gbps=0.5"]
    )
    cells = re.findall(r"<td>([^<]*)</td>", scenario_table(source))
    row = cells[cells.index("h100-dc") : cells.index("h100-dc") + 5]
    assert row == ["h100-dc", "2", "11.4 s", "up 50 Mbit/s, down 500 Mbit/s", "15 ms"]
    assert "31.1 s" in cells and "10 Gbit/s" in cells  # l40s-cloud: 31.0773 s, 10 Gbit/s both ways
