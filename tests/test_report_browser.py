"""The report's what-if panel in a real browser: headless Chromium (Debian's ``chromium``) driven by
Playwright. Each slider, moved with the keyboard, must show the simulator's own figures for that grid
point (simulated here, apart from the page), and the page must fetch nothing from the network."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from islands.analysis.link_rates import rate_steps
from islands.analysis.report.html_report import build_report
from islands.scenarios import ScenarioError, ScenarioSource
from islands.simulator import simulate

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
if not Path(CHROMIUM).exists():
    pytest.skip(
        "no chromium browser (apt-get install chromium) for the report's browser test",
        allow_module_level=True,
    )
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (pip install playwright)"
)

# Streaming DiLoCo, so that every axis has a slider (P too); one outer step keeps the grid quick.
SMALL = ["schedule.algorithm=streaming", "schedule.outer_steps=1"]
FIGURES = (
    "compute_utilisation",
    "stall_s",
    "bytes_per_worker",
    "wall_time_s",
    "avg_bandwidth_gbps",
)
# worked-example: H = 500, P = 10, 16 bits, 1 Gbit/s each way, one island of 8 replicas. Each slider's
# first stop, and the overrides that make it (bandwidth x0.1, half the replicas), worked out by hand.
FIRST_STOPS = {
    "inner_steps": (
        "250",
        ["schedule.inner_steps=250", "schedule.outer_steps=2"],
    ),  # equal work: 500 steps
    "fragments": ("1", ["schedule.fragments=1"]),
    "bits": ("4", ["schedule.bits=4"]),
    "bandwidth_scale": ("x0.1", ["island.0.upload_gbps=0.1", "island.0.download_gbps=0.1"]),
    "workers": ("4", ["island.0.replicas=4"]),
}


@pytest.fixture(scope="module")
def source() -> ScenarioSource:
    return ScenarioSource.read("worked-example", SMALL)


@pytest.fixture(scope="module")
def report_file(source, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("report") / "r.html"
    path.write_text(
        build_report(source, target=0.95, targets=(0.95,), fragments=False, jobs=2),
        encoding="utf-8",
    )
    return path


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser
        browser.close()


@pytest.fixture
def page(browser, report_file):
    """The report opened from its file, with every request and script error it makes recorded."""
    page = browser.new_page()
    page.requests, page.errors = [], []
    page.on("request", lambda request: page.requests.append(request.url))
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    page.goto(report_file.as_uri())
    yield page
    page.close()


def shown(page) -> dict[str, str]:
    """Each figure's exact value, as the page holds it."""
    return {
        key: page.locator(f"[data-figure='{key}']").get_attribute("data-value") for key in FIGURES
    }


def expected_point(source: ScenarioSource, overrides: list[str]) -> dict:
    result = simulate(source.variant(*overrides), source.max_events)
    times, rates = rate_steps(result.links, 0, "up")
    return {"summary": result.summary, "points": len(times), "peak_gbps": rates.max()}


def check_figures(page, source: ScenarioSource, overrides: list[str]) -> None:
    expected = expected_point(source, overrides)
    summary = expected["summary"]
    assert {key: float(value) for key, value in shown(page).items()} == {
        key: summary[key] for key in FIGURES
    }
    utilisation = page.locator("[data-figure='compute_utilisation']").text_content()
    assert utilisation == f"{100 * summary['compute_utilisation']:.1f}%"
    plot = page.locator("#whatif-plot")
    # one outer step: the plot spans the whole run, every step of worker 0's uplink
    assert int(plot.get_attribute("data-points")) == expected["points"]
    assert float(plot.get_attribute("data-peak-gbps")) == pytest.approx(
        expected["peak_gbps"], rel=1e-4
    )
    assert page.locator("#whatif-error").text_content() == ""


def move_to_first_stop(page, key: str) -> None:
    slider = page.locator(f"#whatif-{key}")
    slider.focus()
    page.keyboard.press("Home")
    assert slider.input_value() == "0"


def test_the_page_opens_at_the_scenario_as_written(page, source):
    check_figures(page, source, [])
    assert page.locator("#whatif-overrides").text_content() == "none (the scenario above)"
    assert page.errors == []


def test_each_slider_moves_the_figures_to_the_simulators_numbers(page, source):
    overrides: list[str] = []
    for key, (label, stop_overrides) in FIRST_STOPS.items():
        before = shown(page)
        move_to_first_stop(page, key)
        overrides += (
            stop_overrides  # the earlier sliders stay where they were moved: combinations too
        )
        assert page.locator(f"#whatif-{key}-value").text_content() == label
        assert shown(page) != before, key
        check_figures(page, source, overrides)
    assert page.locator("#whatif-overrides").text_content() == " ".join(
        f"--set {o}" for o in overrides
    )
    assert page.errors == []


def test_a_combination_the_format_refuses_shows_the_rule(page, source):
    # H = 250 in P = 20 fragments leaves 12.5 steps per fragment, not more than tau = 20
    move_to_first_stop(page, "inner_steps")
    fragments = page.locator("#whatif-fragments")
    fragments.focus()
    page.keyboard.press("End")
    assert page.locator("#whatif-fragments-value").text_content() == "20"
    with pytest.raises(ScenarioError) as refused:
        source.variant("schedule.inner_steps=250", "schedule.fragments=20")
    error = page.locator("#whatif-error").text_content()
    assert error == f"Not a valid scenario: {refused.value.key}: {refused.value.rule}"
    assert set(shown(page).values()) == {""}
    assert page.locator("#whatif-plot").get_attribute("data-points") == "0"
    assert page.locator("#whatif-plot").get_attribute("data-peak-gbps") == ""
    assert page.locator("[data-figure='compute_utilisation']").text_content() == "n/a"


def test_the_page_fetches_nothing_from_the_network(page, report_file):
    move_to_first_stop(page, "bandwidth_scale")
    assert page.requests and all(
        url == report_file.as_uri() or url.startswith("data:") for url in page.requests
    )
