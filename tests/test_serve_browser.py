"""The live page in a real browser: headless Chromium (Debian's ``chromium``) driven by Playwright,
against ``islands serve``'s application on a free port. Each control type moves the figures to what
``islands simulate`` prints for the same ``--set`` overrides, to the printed digit; a bad value is
refused beside its control with the command's line; a long run shows its progress and is cancelled;
the saved TOML simulates to the same figures; and the page fetches nothing but from its server."""

from __future__ import annotations

import random
import re
import shlex

import pytest
from helpers.serve import refused, run_cli, sets, simulated

from islands.analysis.live import driver
from islands.analysis.live.driver import choose, control, edit, shown, wait_answered
from islands.analysis.live.figures import COLUMN_FIGURES

MISSING = driver.chromium_missing()
if MISSING:
    pytest.skip(f"{MISSING}, for the live page's browser test", allow_module_level=True)

from islands.analysis.live.server import running  # noqa: E402
from islands.analysis.live.session import Session  # noqa: E402

WE = "worked-example"
# Each key of the list, its control, and a value; applied one after the other (combinations)
EDITS = [
    ("model.parameters", "5e9"),
    ("island.0.step_time_s", "2"),
    ("island.0.bandwidth_gbps", "2.5"),
    ("island.0.latency_ms", "30"),
    ("schedule.inner_steps", "250"),
    ("schedule.algorithm", "streaming"),  # a menu
    ("schedule.fragments", "5"),
    ("schedule.bits", "8"),  # a menu of numbers
    ("island.0.replicas", "4"),
]
RANDOM_KEYS = {  # values other than the file's (an edit back to it is no override)
    "schedule.inner_steps": ["50", "100", "300", "1000"],
    "schedule.outer_steps": ["2", "5", "10"],
    "island.0.bandwidth_gbps": ["0.3", "4", "10"],
    "island.0.replicas": ["2", "5", "16"],
    "schedule.algorithm": ["ddp", "eager", "streaming"],
    "schedule.bits": ["4", "8", "32"],
    "island.0.jitter_cv": ["0.05", "0.2"],
}


@pytest.fixture(scope="module")
def url():
    with running(Session.start(WE)) as address:
        yield address


@pytest.fixture(scope="module")
def chromium():
    with driver.browser() as launched:
        yield launched


@pytest.fixture
def page(chromium, url):
    page = driver.open_page(chromium, url)
    yield page
    assert page.errors == []
    page.close()


def set_value(page, key: str, value: str) -> None:
    """Set a key by its control, whatever its type."""
    if control(page, key).locator("select").count():
        choose(page, key, value)
    else:
        edit(page, key, value)


def check_figures(page, overrides: list[str]) -> None:
    """The page's figures are ``islands simulate``'s, text and value, and its command line is it."""
    printed, summary = simulated(WE, overrides)
    figures = shown(page)
    assert {key: text for key, (text, _) in figures.items()} == {
        key: printed[label] for label, key in LABELS.items()
    }
    assert {key: float(value) for key, (_, value) in figures.items()} == {
        key: float(summary[key]) for key in LABELS.values()
    }
    command = page.locator("#command").text_content()
    assert command == " ".join(
        ["islands simulate", WE, *(f"--set {shlex.quote(o)}" for o in overrides)]
    )


LABELS = COLUMN_FIGURES  # the column islands simulate prints -> the page's data-figure


def test_the_page_opens_at_the_scenario_as_islands_simulate_prints_it(page):
    wait_answered(page, "done")
    check_figures(page, [])
    assert page.locator("#bandwidth-plot g[data-schedule]").count() == 5  # every schedule
    assert int(page.locator("#timeline").get_attribute("data-spans")) > 0
    assert page.locator("#plan-headline").text_content().startswith("For 95% compute utilisation")


def test_each_key_moves_the_figures_to_the_commands_numbers(page):
    overrides: list[str] = []
    for key, value in EDITS:
        before = shown(page)
        set_value(page, key, value)
        overrides.append(f"{key}={value}")
        assert shown(page) != before, key
        check_figures(page, overrides)


def test_a_slider_moved_by_the_keyboard_sets_its_box_and_the_figures(page):
    slider = control(page, "schedule.inner_steps").locator("input.slider")
    slider.focus()
    page.keyboard.press("Home")  # a tenth of the scenario's H
    wait_answered(page)
    assert control(page, "schedule.inner_steps").locator("input.box").input_value() == "50"
    check_figures(page, ["schedule.inner_steps=50"])


def test_a_checkbox_and_a_text_box_set_their_keys(page):
    control(page, "schedule.elastic").locator("input[type=checkbox]").check()
    wait_answered(page)
    edit(page, "island.0.name", "west")
    check_figures(page, ["schedule.elastic=true", 'island.0.name="west"'])
    assert page.locator("#islands-table").text_content().splitlines()[2].startswith("west ")


@pytest.mark.parametrize("seed", range(4))
def test_random_edits_show_what_islands_simulate_answers(page, seed):
    draw = random.Random(seed)
    overrides = [
        f"{key}={draw.choice(RANDOM_KEYS[key])}" for key in draw.sample(sorted(RANDOM_KEYS), 3)
    ]
    for override in overrides:
        set_value(page, *override.split("="))
    code, _, _ = run_cli(["simulate", WE, *sets(overrides)])
    if code == 0:
        check_figures(page, overrides)
    else:  # a combination the format refuses (streaming's tau = 20 over H / P = 5 steps): refused here too
        assert page.evaluate("document.body.dataset.status") == "refused"
        errors = page.locator("[data-error-for]:not(:empty), #error:not(:empty)")
        assert errors.count() == 1 and errors.text_content() == refused(WE, overrides)


def test_a_bad_value_is_refused_beside_its_control_with_the_commands_line(page):
    before = shown(page)
    edit(page, "island.0.replicas", "0")
    assert page.evaluate("document.body.dataset.status") == "refused"
    message = control(page, "island.0.replicas").locator(".error").text_content()
    assert message == refused(WE, ["island.0.replicas=0"])
    assert shown(page) == before  # the last scenario that ran, marked stale
    assert "stale" in page.locator("#results").get_attribute("class")
    edit(page, "island.0.replicas", "6")  # fixed: the message goes, the figures come
    assert control(page, "island.0.replicas").locator(".error").text_content() == ""
    check_figures(page, ["island.0.replicas=6"])


def test_a_long_run_shows_progress_and_is_cancelled(page):
    driver.switch_scenario(page, "chaos", wait=False)  # churn: seconds of runs
    page.wait_for_function("document.getElementById('progress').classList.contains('shown')")
    page.wait_for_function(
        "document.getElementById('progress-text').textContent.includes(' done, ')"
    )
    assert re.fullmatch(
        r".+: \d+ of \d+ done, \d+\.\d s", page.locator("#progress-text").text_content()
    )
    page.locator("#cancel").click()
    assert wait_answered(page, "cancelled") == "cancelled"
    assert page.locator("#error").text_content().startswith("Cancelled: ")
    driver.switch_scenario(page, WE)  # the page goes on
    check_figures(page, [])


def test_a_change_during_a_long_run_supersedes_it(page):
    driver.switch_scenario(page, "chaos", wait=False)
    page.wait_for_function("document.getElementById('progress').classList.contains('shown')")
    first = page.evaluate("document.body.dataset.job")
    driver.switch_scenario(page, WE)
    assert page.evaluate("document.body.dataset.job") != first
    check_figures(page, [])


def test_the_saved_scenario_simulates_to_the_same_figures(page, tmp_path):
    edit(page, "schedule.inner_steps", "125")
    set_value(page, "schedule.algorithm", "eager")
    with page.expect_download() as saved:
        page.locator("#save").click()
    path = tmp_path / saved.value.suggested_filename
    saved.value.save_as(path)
    assert path.name == "seed-10b-1gbps.toml"
    printed, summary = simulated(str(path), [])
    assert {key: text for key, (text, _) in shown(page).items()} == {
        key: printed[label] for label, key in LABELS.items()
    }
    assert summary == simulated(WE, ["schedule.inner_steps=125", "schedule.algorithm=eager"])[1]


def test_the_page_fetches_nothing_from_the_network(page, url):
    edit(page, "island.0.bandwidth_gbps", "3")
    assert page.requests and all(
        request.startswith(url) or request.startswith(("data:", "blob:"))
        for request in page.requests
    )


def test_a_change_shows_its_figures_and_its_time_is_measured(page):
    """The time a change takes to show its figures is measured here (make bench prints it); not
    asserted, the machine being shared."""
    times = driver.time_changes(page, "schedule.inner_steps", ["400", "600", "400"])
    assert 0 < times["median_ms"] <= times["slowest_ms"]
    print(
        f"a change on the worked example shows its figures in {times['median_ms']:.0f} ms (median)"
    )
