"""A one-line progress bar on stderr, redrawn in place; silent when stderr is not a terminal."""

from __future__ import annotations

import sys
import time
from typing import TextIO

BAR_WIDTH = 30


class ProgressBar:
    """Call it with (done, total) as work completes; ``close()`` ends the line."""

    def __init__(self, label: str, stream: TextIO | None = None, enabled: bool | None = None):
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.started = time.perf_counter()
        self.drawn = False

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        filled = BAR_WIDTH * done // max(total, 1)
        elapsed = time.perf_counter() - self.started
        self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] "
                          f"{done}/{total} {elapsed:.1f} s")
        self.stream.flush()
        self.drawn = True

    @property
    def elapsed_s(self) -> float:
        return time.perf_counter() - self.started

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
