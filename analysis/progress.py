"""Progress on stderr: a one-line bar redrawn in place on a terminal; elsewhere (a log, a pipe, CI) a
few plain lines: the first report with the count of runs, then each further tenth, then the end."""

from __future__ import annotations

import sys
import time
from typing import TextIO

BAR_WIDTH = 30
LOG_STEPS = 10  # plain lines per run when stderr is not a terminal, besides the first


class ProgressBar:
    """Call it with (done, total) as work completes (``done`` = 0 announces the work); ``close()``
    ends the line."""

    def __init__(self, label: str, stream: TextIO | None = None, interactive: bool | None = None):
        self.label = label
        self.stream = stream or sys.stderr
        self.interactive = self.stream.isatty() if interactive is None else interactive
        self.started = time.perf_counter()
        self.drawn = False
        self.logged_step = -1

    def __call__(self, done: int, total: int) -> None:
        if self.interactive:
            self.draw(done, total)
        else:
            self.log(done, total)

    def draw(self, done: int, total: int) -> None:
        filled = BAR_WIDTH * done // max(total, 1)
        self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] "
                          f"{done}/{total} {self.elapsed_s:.1f} s")
        self.stream.flush()
        self.drawn = True

    def log(self, done: int, total: int) -> None:
        """A line the first time, then only when ``done`` reaches a further tenth of ``total``."""
        step = LOG_STEPS * done // max(total, 1)
        if self.logged_step >= 0 and step <= self.logged_step:
            return
        self.logged_step = step
        self.stream.write(f"{self.label}: {done} of {total} done, {self.elapsed_s:.1f} s\n")
        self.stream.flush()

    @property
    def elapsed_s(self) -> float:
        return time.perf_counter() - self.started

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
