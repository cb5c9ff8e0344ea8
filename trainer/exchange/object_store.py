"""The object store that ``network.gather = "store"`` exchanges top-k payloads through: a directory,
or the same directory served over HTTP.

Each PUT writes one file atomically (``islands.io.write_bytes``: a temporary file beside it, renamed
into place), so a reader sees a payload whole or not at all; each GET reads files. Covenant-72B's
peers use an S3-compatible bucket; a directory is the same contract (an object appears whole once
its PUT completes, and stays until deleted) with nothing to install or start, and on one machine it
is what ``islands train`` and the tests use (``trainer/fixed.py``: ``<out>/store/<run>``). Islands on
several machines need a directory they all mount (NFS, or a bucket mounted by s3fs or gcsfuse).

``ObjectStore`` is what the exchange asks of a store; ``runtime/paced.py``'s ``PacedStore`` wraps one
in the emulated WAN, as ``PacedGroup`` wraps a group.

``HttpStore`` is a client of such a directory served by ``runtime/object_store_host.py`` (plain
HTTP: PUT, GET and DELETE of ``/<name>``, and ``GET /?wait=<names>&timeout_s=<s>``, which answers once
every object named is there): what ``islands validate`` runs a store through, so that the store is a
host of its own behind a shaped link, its payloads crossing the islands' links and its own as
TCP streams (docs/validation.md). A GET of several objects fetches them together, one request each
at once, as an S3 client does.
"""

from __future__ import annotations

import http.client
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
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


HTTP_TIMEOUT_S = 120.0  # a request that takes longer than this is a dead store


class HttpStore:
    """A client of the directory store served at ``url`` (``http://host:port``)."""

    def __init__(self, url: str, timeout_s: float = HTTP_TIMEOUT_S):
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme != "http" or parsed.hostname is None or parsed.port is None:
            raise ValueError(f"{url}: not an http://host:port address")
        self.host, self.port, self.timeout_s = parsed.hostname, parsed.port, timeout_s

    def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        """One request on a connection of its own: (status, body)."""
        connection = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
        try:
            connection.request(method, path, body=body)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def put(self, name: str, data: bytes) -> None:
        status, _ = self.request("PUT", "/" + urllib.parse.quote(name), data)
        if status != http.client.NO_CONTENT:
            raise OSError(f"the object store refused PUT {name}: HTTP {status}")

    def get(self, names: list[str]) -> list[bytes | None]:
        if len(names) < 2:
            return [self.read(name) for name in names]
        with ThreadPoolExecutor(len(names), thread_name_prefix="islands-get") as pool:
            return list(pool.map(self.read, names))

    def read(self, name: str) -> bytes | None:
        status, body = self.request("GET", "/" + urllib.parse.quote(name))
        return body if status == http.client.OK else None

    def wait_for(self, names: list[str], deadline_s: float) -> None:
        query = urllib.parse.urlencode(
            {"wait": ",".join(names), "timeout_s": max(0.0, deadline_s - time.monotonic())}
        )
        self.request("GET", "/?" + query)

    def delete(self, name: str) -> None:
        self.request("DELETE", "/" + urllib.parse.quote(name))
