"""The screenshots of docs/how-to/serve.md, taken of the live page in headless Chromium: each step of
the tutorial done on the page as a user does it, and the page (or the part of it the step is about)
saved as a PNG beside the how-to. ``make docs-screenshots`` runs this, and ``make docs`` runs that
first; without Chromium or Playwright it says so and leaves the committed images.

    python docs/serve_screenshots.py [FOLDER]      # default docs/how-to/serve
"""

from __future__ import annotations

import sys
from pathlib import Path

from islands.analysis.live import driver
from islands.analysis.live.server import running
from islands.analysis.live.session import Session

FOLDER = Path(__file__).resolve().parent / "how-to" / "serve"
CLIP_HEIGHT_PX = 900  # the top of the page: controls and figures


def take(folder: Path) -> list[Path]:
    """Every screenshot of the tutorial, in its order."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []

    def save(page, name: str, selector: str | None = None) -> None:
        path = folder / f"{name}.png"
        if selector is None:
            page.screenshot(
                path=path, clip={"x": 0, "y": 0, "width": 1400, "height": CLIP_HEIGHT_PX}
            )
        else:
            page.locator(selector).screenshot(path=path)
        paths.append(path)

    with running(Session.start("worked-example")) as url, driver.browser() as chromium:
        page = driver.open_page(chromium, url)
        page.add_style_tag(content="header { position: static; }")  # not over a part's picture
        driver.wait_answered(page, "done")
        save(page, "1-opened")
        driver.choose(page, "schedule.algorithm", "streaming")
        driver.edit(page, "island.0.bandwidth_gbps", "0.3")
        driver.wait_answered(page, "done")
        save(page, "2-streaming-at-300-mbits")
        save(page, "3-schedules-side-by-side", "#schedules-part")
        save(page, "4-loss", "#loss-part")
        save(page, "5-plan", "#plan-part")
        driver.edit(page, "schedule.fragments", "40")
        page.evaluate("window.scrollTo(0, 0)")
        save(page, "6-refused", "[data-section='schedule']")
        page.close()
    return paths


def main() -> int:
    missing = driver.chromium_missing()
    if missing:
        print(f"docs screenshots not retaken ({missing}): the committed ones stay")
        return 0
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else FOLDER
    for path in take(folder):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
