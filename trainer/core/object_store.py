"""The object store that ``network.gather = "store"`` exchanges top-k payloads through: a directory.

Each PUT writes one file atomically (``islands.io.write_bytes``: a temporary file beside it, renamed
into place), so a reader sees a payload whole or not at all; each GET reads files. Covenant-72B's
peers use an S3-compatible bucket; a directory is the same contract (an object appears whole once
its PUT completes, and stays until deleted) with nothing to install or start, and on one machine it
is what ``islands train`` and the tests use (``trainer/fixed.py``: ``<out>/store/<run>``). Islands on
several machines need a directory they all mount (NFS, or a bucket mounted by s3fs or gcsfuse).

``ObjectStore`` is what the exchange asks of a store; ``runtime/paced.py``'s ``PacedStore`` wraps one
in the emulated WAN, as ``PacedGroup`` wraps a group.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Protocol

from islands.io import write_bytes

POLL_S = 0.002  # how often a reader looks for the payloads it waits for


class ObjectStore(Protocol):
    def put(self, name: str, data: bytes) -> None:
        """Store ``data`` under ``name``, whole, replacing what was there."""

    def get(self, names: list[str]) -> list[bytes | None]:
        """The objects of ``names``, fetched together (None for one that is not there)."""

    def wait_for(self, names: list[str], deadline_s: float) -> None:
        """Return once every object of ``names`` is there, or at ``deadline_s`` (``time.monotonic``)."""

    def delete(self, name: str) -> None:
        """Remove the object (nothing if it is not there)."""


class DirectoryStore:
    """An object store in the directory ``root`` (made if missing): one file per object."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def put(self, name: str, data: bytes) -> None:
        write_bytes(self.root / name, data)

    def get(self, names: list[str]) -> list[bytes | None]:
        return [self.read(name) for name in names]

    def read(self, name: str) -> bytes | None:
        try:
            return (self.root / name).read_bytes()
        except FileNotFoundError:
            return None

    def wait_for(self, names: list[str], deadline_s: float) -> None:
        waiting = list(names)
        while True:
            waiting = [name for name in waiting if not (self.root / name).exists()]
            if not waiting or time.monotonic() >= deadline_s:
                return
            time.sleep(POLL_S)

    def delete(self, name: str) -> None:
        (self.root / name).unlink(missing_ok=True)
