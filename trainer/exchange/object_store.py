"""The object store that ``network.gather = "store"`` exchanges top-k payloads through: a directory,
or the same directory served over HTTP.

Each PUT writes one file atomically (``islands.io.write_bytes``: a temporary file beside it, renamed
into place), so a reader sees a payload whole or not at all; each GET reads files. Covenant-72B's
peers use an S3-compatible bucket; a directory is the same contract (an object appears whole once
its PUT completes, and stays until deleted) with nothing to install or start, and on one machine it
is what ``islands train`` and the tests use (``trainer/fixed.py``: ``<out>/store/<run>``). Islands on
several machines need a directory they all mount (NFS, or a bucket mounted by s3fs or gcsfuse).

``ObjectStore`` is what the exchange asks of a store, one request per call (a GET of several objects:
one each, at once), the requests of ``schedules/store_round.py``; ``wait_for`` polls its LIST
(``listing``).
``runtime/paced.py``'s ``PacedStore`` wraps one in the emulated WAN, as ``PacedGroup`` wraps a group.

``HttpStore`` is a client of such a directory served by ``runtime/object_store_host.py`` (plain
HTTP/1.1: PUT, GET and DELETE of ``/<name>``, and ``GET /?list=<prefix>``, the names there that begin
with it): what ``islands validate`` runs a store through, so that the store is a host of its own
behind a shaped link, its payloads crossing the islands' links and its own as TCP streams
(docs/validation.md). As an S3 client does, it keeps its connections open between requests (a request
pays its round trip, not a new connection's handshake too) and fetches several objects at once, one
request each.
"""

from __future__ import annotations

import http.client
import queue
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

from islands.io import write_bytes
from islands.schedules.store_round import POLL_S


class ObjectStore(Protocol):
    def put(self, name: str, data: bytes) -> None:
        """Store ``data`` under ``name``, whole, replacing what was there."""

    def listing(self, prefix: str) -> list[str]:
        """The names of the objects there that begin with ``prefix``."""

    def get(self, names: list[str]) -> list[bytes | None]:
        """The objects of ``names``, fetched together (None for one that is not there)."""

    def delete(self, name: str) -> None:
        """Remove the object (nothing if it is not there)."""


def wait_for(store: ObjectStore, prefix: str, names: list[str], deadline_s: float) -> bool:
    """LIST ``prefix`` every ``POLL_S`` until every object of ``names`` is there (True), or until
    ``deadline_s`` (``time.monotonic``; False)."""
    while True:
        if set(names) <= set(store.listing(prefix)):
            return True
        if time.monotonic() >= deadline_s:
            return False
        time.sleep(POLL_S)


class DirectoryStore:
    """An object store in the directory ``root`` (made if missing): one file per object."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def put(self, name: str, data: bytes) -> None:
        write_bytes(self.root / name, data)

    def listing(self, prefix: str) -> list[str]:
        """Every file's name that begins with ``prefix``, but a PUT's temporary (``.<name>.*``)."""
        return sorted(
            path.name
            for path in self.root.iterdir()
            if path.name.startswith(prefix) and not path.name.startswith(".")
        )

    def get(self, names: list[str]) -> list[bytes | None]:
        return [self.read(name) for name in names]

    def read(self, name: str) -> bytes | None:
        try:
            return (self.root / name).read_bytes()
        except FileNotFoundError:
            return None

    def delete(self, name: str) -> None:
        (self.root / name).unlink(missing_ok=True)


HTTP_TIMEOUT_S = 120.0  # a request that takes longer than this is a dead store


class HttpStore:
    """A client of the directory store served at ``url`` (``http://host:port``), its connections kept
    open for the next request (one per request in flight)."""

    def __init__(self, url: str, timeout_s: float = HTTP_TIMEOUT_S):
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme != "http" or parsed.hostname is None or parsed.port is None:
            raise ValueError(f"{url}: not an http://host:port address")
        self.host, self.port, self.timeout_s = parsed.hostname, parsed.port, timeout_s
        self.idle: queue.SimpleQueue[http.client.HTTPConnection] = queue.SimpleQueue()

    def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        """One request, on an idle connection where there is one: (status, body). One the host has
        closed since is replaced by a new one, once."""
        try:
            connection = self.idle.get_nowait()
        except queue.Empty:
            return self.exchange(self.connect(), method, path, body)
        try:
            return self.exchange(connection, method, path, body)
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            return self.exchange(self.connect(), method, path, body)

    def connect(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)

    def exchange(
        self, connection: http.client.HTTPConnection, method: str, path: str, body: bytes | None
    ) -> tuple[int, bytes]:
        """Send one request on ``connection`` and read its answer; keep the connection for the next
        unless either side closes it."""
        try:
            connection.request(method, path, body=body)
            response = connection.getresponse()
            answer = response.status, response.read()
        except BaseException:
            connection.close()
            raise
        if response.will_close:
            connection.close()
        else:
            self.idle.put(connection)
        return answer

    def close(self) -> None:
        """Close the idle connections."""
        while not self.idle.empty():
            self.idle.get_nowait().close()

    def put(self, name: str, data: bytes) -> None:
        status, _ = self.request("PUT", "/" + urllib.parse.quote(name), data)
        if status != http.client.NO_CONTENT:
            raise OSError(f"the object store refused PUT {name}: HTTP {status}")

    def listing(self, prefix: str) -> list[str]:
        status, body = self.request("GET", "/?" + urllib.parse.urlencode({"list": prefix}))
        if status != http.client.OK:
            raise OSError(f"the object store refused LIST {prefix}: HTTP {status}")
        return body.decode().splitlines()

    def get(self, names: list[str]) -> list[bytes | None]:
        if len(names) < 2:
            return [self.read(name) for name in names]
        with ThreadPoolExecutor(len(names), thread_name_prefix="islands-get") as pool:
            return list(pool.map(self.read, names))

    def read(self, name: str) -> bytes | None:
        status, body = self.request("GET", "/" + urllib.parse.quote(name))
        return body if status == http.client.OK else None

    def delete(self, name: str) -> None:
        self.request("DELETE", "/" + urllib.parse.quote(name))
