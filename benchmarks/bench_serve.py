"""The live page's speed, measured in a real browser (headless Chromium, as tests/test_serve_browser.py):
``islands serve worked-example`` on a free port, H typed into its box again and again, and for each
change the time from the keystroke to the new figures on the page (target under 200 ms), and to
every part (the schedules side by side, the loss and the plan's least bandwidth: tens of runs more).
Also the same change through the server's API without a browser, and the simulation alone, so that a
slow figure says where its time went.

    python benchmarks/bench_serve.py [--changes 9]

Prints a line saying why where Chromium or Playwright is missing (the project's tests skip then too).
"""

from __future__ import annotations

import argparse
import statistics
import time

from islands.analysis.live import driver
from islands.analysis.live.figures import compute_figures
from islands.analysis.live.jobs import Jobs
from islands.analysis.live.server import running
from islands.analysis.live.session import Request, Session
from islands.scenarios import ScenarioSource

SCENARIO = "worked-example"
TARGET_MS = 200.0
VALUES = ("400", "600", "250", "750", "500")


def api_change_ms(jobs: Jobs, session: Session, changes: int) -> float:
    """The median time from a change to its first part through the jobs, without a browser."""
    times = []
    for index in range(changes):
        started = time.perf_counter()
        request = Request(SCENARIO, (f"schedule.inner_steps={VALUES[index % len(VALUES)]}",))
        job = jobs.submit("figures", compute_figures, (session.edited(request), 0.95))
        while "run" not in job.parts and job.status == "running":
            jobs.wait(job.id, job.version, 10)
        times.append(1000 * (time.perf_counter() - started))
        while job.status == "running":
            jobs.wait(job.id, job.version, 10)
    return statistics.median(times)


def simulation_ms(changes: int) -> float:
    """The median time of the first part computed in this process (no worker, no page)."""
    source = ScenarioSource.read(SCENARIO)
    parts: dict[str, float] = {}

    def emit(name: str, part: dict) -> None:
        parts.setdefault(name, time.perf_counter())

    times = []
    for index in range(changes):
        edited = source.with_overrides(f"schedule.inner_steps={VALUES[index % len(VALUES)]}")
        parts.clear()
        started = time.perf_counter()
        compute_figures(edited, 0.95, emit, lambda *step: None)
        times.append(1000 * (parts["run"] - started))
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=9)
    args = parser.parse_args()
    print(
        f"live page (islands serve {SCENARIO}), one change of H: in this process, the figures in "
        f"{simulation_ms(args.changes):.0f} ms (median)"
    )
    session = Session.start(SCENARIO)
    jobs = Jobs()
    with running(session, jobs) as url:
        print(
            f"  through the server's worker processes: {api_change_ms(jobs, session, args.changes):.0f} ms"
        )
        missing = driver.chromium_missing()
        if missing:
            print(f"  in the browser: not measured ({missing})")
            return
        with driver.browser() as chromium:
            page = driver.open_page(chromium, url)
            values = [VALUES[index % len(VALUES)] for index in range(args.changes)]
            times = driver.time_changes(page, "schedule.inner_steps", values)
    print(
        f"  in the browser, from the keystroke to the new figures: {times['median_ms']:.0f} ms median, "
        f"{times['slowest_ms']:.0f} ms slowest of {args.changes} (target < {TARGET_MS:g} ms); every "
        f"part (schedules, loss, least bandwidth) in {times['complete_median_ms']:.0f} ms"
    )


if __name__ == "__main__":
    main()
