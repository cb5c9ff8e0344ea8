"""Progress on stderr: a one-line bar redrawn in place on a terminal; elsewhere (a log, a pipe, CI) a
few plain lines: the first report with the count of runs, then each further tenth (or, for long
runs, a line at least every ``LOG_INTERVAL_S``), then the end. ``Stages`` gives a command of several
long stages one bar per stage, each on its own line."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

BAR_WIDTH = 30
LOG_STEPS = 10  # plain lines per run when stderr is not a terminal, besides the first
LOG_INTERVAL_S = 30.0  # off a terminal, a line at least this often while work completes

Clock = Callable[[], float]


class ProgressBar:
    """Call it with (done, total) as work completes (``done`` = 0 announces the work); ``note(line)``
    prints a line without breaking the bar; ``close()`` ends the line."""

    def __init__(
        self,
        label: str,
        stream: TextIO | None = None,
        interactive: bool | None = None,
        clock: Clock = time.perf_counter,
    ):
        self.label = label
        self.stream = stream or sys.stderr
        self.interactive = self.stream.isatty() if interactive is None else interactive
        self.clock = clock
        self.started = clock()
        self.drawn = ""
        self.logged_step = -1
        self.logged_at = self.started

    def __call__(self, done: int, total: int) -> None:
        if self.interactive:
            self.draw(done, total)
        else:
            self.log(done, total)

    def draw(self, done: int, total: int) -> None:
        filled = BAR_WIDTH * done // max(total, 1)
        self.drawn = (
            f"\r{self.label} [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] "
            f"{done}/{total} {self.elapsed_s:.1f} s"
        )
        self.stream.write(self.drawn)
        self.stream.flush()

    def log(self, done: int, total: int) -> None:
        """A line the first time, then when ``done`` reaches a further tenth of ``total`` or
        ``LOG_INTERVAL_S`` have passed since the last line."""
        step = LOG_STEPS * done // max(total, 1)
        now = self.clock()
        if (
            self.logged_step >= 0
            and step <= self.logged_step
            and now - self.logged_at < LOG_INTERVAL_S
        ):
            return
        self.logged_step, self.logged_at = step, now
        self.stream.write(f"{self.label}: {done} of {total} done, {self.elapsed_s:.1f} s\n")
        self.stream.flush()

    def note(self, line: str) -> None:
        """A line of its own; on a terminal the bar is drawn again below it."""
        if self.drawn:
            self.stream.write("\r\033[K")
        self.stream.write(line + "\n")
        if self.drawn:
            self.stream.write(self.drawn)
        self.stream.flush()

    @property
    def elapsed_s(self) -> float:
        return self.clock() - self.started

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = ""


class Stages:
    """``stages(name)`` ends the previous stage's bar and starts one labelled ``COMMAND: NAME``."""

    def __init__(
        self,
        command: str,
        stream: TextIO | None = None,
        interactive: bool | None = None,
        clock: Clock = time.perf_counter,
    ):
        self.command, self.stream, self.interactive, self.clock = (
            command,
            stream,
            interactive,
            clock,
        )
        self.started = clock()
        self.bar: ProgressBar | None = None

    def __call__(self, name: str) -> ProgressBar:
        self.close()
        self.bar = ProgressBar(f"{self.command}: {name}", self.stream, self.interactive, self.clock)
        return self.bar

    @property
    def elapsed_s(self) -> float:
        return self.clock() - self.started

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
