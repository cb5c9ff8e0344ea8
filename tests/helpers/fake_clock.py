"""Shared fixtures of the trainer's paced pieces: a shaper whose clock only its sleeps move, and an
object store host served on loopback for the length of a ``with``."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from islands.emulation import LinkSpec
from islands.emulation.shaper import InProcessShaper
from islands.trainer.runtime.object_store_host import StoreServer


def fake_clock_shaper(links: list[LinkSpec]) -> tuple[InProcessShaper, list[float], list[float]]:
    """An in-process shaper over ``links`` whose clock (``now[0]``, seconds) moves only by what it
    sleeps, each sleep appended to ``slept``: (shaper, now, slept)."""
    now: list[float] = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    return InProcessShaper(links, clock=lambda: now[0], sleep=sleep), now, slept


@contextmanager
def serving(server: StoreServer) -> Iterator[str]:
    """``server`` answering on its own thread; yields its URL, then shuts it down."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
