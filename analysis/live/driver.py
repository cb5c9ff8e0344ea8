"""The live page driven in a real browser (headless Chromium through Playwright, a development
dependency): what the browser tests, ``make bench`` and the docs' screenshots share. Each function
takes a Playwright page; ``open_page`` records every request the page makes and every script error.

    >>> with running(Session.start("worked-example")) as url, browser() as chromium:  # doctest: +SKIP
    ...     page = open_page(chromium, url)
    ...     edit(page, "schedule.inner_steps", "250")
    ...     shown(page)["compute_utilisation"]      # ("57.3%", "0.5725190839694656")
"""

from __future__ import annotations

import contextlib
import shutil
import statistics
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ANSWER_TIMEOUT_MS = 60_000
VIEWPORT = {"width": 1400, "height": 1000}


def chromium_missing() -> str | None:
    """Why the browser cannot run here, or None."""
    if not Path(CHROMIUM).exists():
        return "no chromium browser (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install playwright)"
    return None


@contextlib.contextmanager
def browser() -> Iterator[Any]:
    """Headless Chromium (Debian's), for the block's duration."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


def open_page(chromium: Any, url: str) -> Any:
    """A new page at ``url`` once its first figures are in; ``page.requests`` and ``page.errors``
    record every request it makes and every script error from then on."""
    page = chromium.new_page(viewport=VIEWPORT, accept_downloads=True)
    page.requests, page.errors = [], []
    page.on("request", lambda request: page.requests.append(request.url))
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    page.goto(url)
    wait_answered(page)
    return page


def wait_answered(page: Any, status: str | None = None) -> str:
    """Wait until the page has answered its latest change: its figures shown (its later parts may
    still be coming: status "running"), or refused, failed or cancelled; with ``status``, until the
    page is in that state too (e.g. "done": every part shown). Return the page's status."""
    page.wait_for_function(
        "([status]) => document.body.dataset.answered === document.body.dataset.change"
        " && (status === null || document.body.dataset.status === status)",
        arg=[status],
        timeout=ANSWER_TIMEOUT_MS,
    )
    return page.evaluate("document.body.dataset.status")


def control(page: Any, key: str) -> Any:
    """A key's control, opened where it is among the "more keys" (a closed ``<details>``)."""
    found = page.locator(f".control[data-key='{key}']")
    folded = found.locator("xpath=ancestor::details[not(@open)]")
    if folded.count():
        folded.locator("summary").first.click()
    return found


def edit(page: Any, key: str, text: str, wait: bool = True) -> None:
    """Type ``text`` into a key's box (Enter), as a user does, and wait for the page's answer."""
    box = control(page, key).locator("input.box")
    box.fill(text)
    box.press("Enter")
    if wait:
        wait_answered(page)


def choose(page: Any, key: str, value: str) -> None:
    control(page, key).locator("select").select_option(value)
    wait_answered(page)


def switch_scenario(page: Any, scenario: str, wait: bool = True) -> None:
    """Pick another scenario in the page's menu; its controls come from the server first, then its
    figures (``wait``: until they are shown)."""
    before = int(page.evaluate("document.body.dataset.change"))
    page.locator("#scenario").select_option(scenario)
    page.wait_for_function(
        f"Number(document.body.dataset.change) > {before}", timeout=ANSWER_TIMEOUT_MS
    )
    if wait:
        wait_answered(page)


def shown(page: Any, scope: str = "#figures") -> dict[str, tuple[str, str]]:
    """Each figure under ``scope``: its key -> (the text shown, the exact value it holds)."""
    cells = page.locator(f"{scope} [data-figure]")
    found = {}
    for index in range(cells.count()):
        cell = cells.nth(index)
        found[cell.get_attribute("data-figure")] = (
            cell.text_content(),
            cell.get_attribute("data-value"),
        )
    return found


def change_ms(page: Any) -> tuple[float, float]:
    """How long the last change took to show its figures, and all its parts (milliseconds)."""
    times = page.evaluate("[document.body.dataset.shownMs, document.body.dataset.completeMs]")
    return float(times[0]), float(times[1])


def time_changes(page: Any, key: str, values: Sequence[str]) -> dict[str, float]:
    """Type each of ``values`` into a key's box, each once the last one's parts are all in: the
    median and the slowest time to the figures, and the median to every part (milliseconds)."""
    shown_ms, complete_ms = [], []
    for value in values:
        edit(page, key, value, wait=False)
        wait_answered(page, "done")
        first, last = change_ms(page)
        shown_ms.append(first)
        complete_ms.append(last)
    return {
        "median_ms": statistics.median(shown_ms),
        "slowest_ms": max(shown_ms),
        "complete_median_ms": statistics.median(complete_ms),
    }
