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
request each. It holds them by the kind ``schedules/store_round.py`` declares for each request (the
PUT's and LIST's own, the GETs' one each, the DELETEs'), so a member's first round opens exactly the
declared ones: its PUT's, then its K GETs' at once; its first DELETE one more, off the critical path.
Each is opened before its request is written (``on_open`` hears of it: where the emulation sleeps
the latency, a handshake's round trips), and counted in ``opened``.
"""

from __future__ import annotations

import http.client
import queue
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

from islands.io import write_bytes
from islands.schedules.store_round import (
    CRITICAL_PATH,
    DELETE,
    GET,
    LIST,
    OFF_PATH,
    POLL_S,
    PUT,
    StoreRequest,
)


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


def no_wait() -> None:
    """Nothing to wait when a connection opens: its handshake took what it took."""


class HttpStore:
    """A client of the directory store served at ``url`` (``http://host:port``), its connections kept
    open for the next request, by kind (one per request of the kind in flight); ``on_open``: called
    once each opens, before its first request."""

    def __init__(
        self, url: str, timeout_s: float = HTTP_TIMEOUT_S, on_open: Callable[[], None] = no_wait
    ):
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme != "http" or parsed.hostname is None or parsed.port is None:
            raise ValueError(f"{url}: not an http://host:port address")
        self.host, self.port, self.timeout_s = parsed.hostname, parsed.port, timeout_s
        self.on_open = on_open
        kinds = {request.connection for request in CRITICAL_PATH + OFF_PATH}
        self.idle: dict[str, queue.SimpleQueue[http.client.HTTPConnection]] = {
            kind: queue.SimpleQueue() for kind in kinds
        }
        self.opened: Counter[str] = Counter()  # connections opened, by kind
        self.counting = threading.Lock()

    def request(
        self, declared: StoreRequest, path: str, body: bytes | None = None
    ) -> tuple[int, bytes]:
        """One request (``declared``'s; a LIST is an HTTP GET), on an idle connection of its kind
        where there is one, else a new one: (status, body)."""
        return self.on(self.idle_ones(declared, 1)[0], declared, path, body)

    def idle_ones(
        self, declared: StoreRequest, count: int
    ) -> list[http.client.HTTPConnection | None]:
        """``count`` connections of ``declared``'s kind for as many requests at once: the idle ones,
        None for each it lacks (each of those requests opens its own)."""
        idle = self.idle[declared.connection]
        taken: list[http.client.HTTPConnection | None] = []
        while len(taken) < count and not idle.empty():
            taken.append(idle.get_nowait())
        return taken + [None] * (count - len(taken))

    def on(
        self,
        connection: http.client.HTTPConnection | None,
        declared: StoreRequest,
        path: str,
        body: bytes | None = None,
    ) -> tuple[int, bytes]:
        """One request on ``connection`` (a new one where None): (status, body). One the host has
        closed since is replaced, once."""
        method = "GET" if declared is LIST else declared.method
        idle = self.idle[declared.connection]
        if connection is None:
            return self.exchange(self.connect(declared), idle, method, path, body)
        try:
            return self.exchange(connection, idle, method, path, body)
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            return self.exchange(self.connect(declared), idle, method, path, body)

    def connect(self, declared: StoreRequest) -> http.client.HTTPConnection:
        """A new connection of ``declared``'s kind, its handshake done (``on_open`` after it)."""
        connection = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
        connection.connect()
        self.on_open()
        with self.counting:
            self.opened[declared.connection] += 1
        return connection

    def exchange(
        self,
        connection: http.client.HTTPConnection,
        idle: queue.SimpleQueue[http.client.HTTPConnection],
        method: str,
        path: str,
        body: bytes | None,
    ) -> tuple[int, bytes]:
        """Send one request on ``connection`` and read its answer; keep the connection in ``idle``
        for the next unless either side closes it."""
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
            idle.put(connection)
        return answer

    def close(self) -> None:
        """Close the idle connections."""
        for idle in self.idle.values():
            while not idle.empty():
                idle.get_nowait().close()

    def put(self, name: str, data: bytes) -> None:
        status, _ = self.request(PUT, "/" + urllib.parse.quote(name), data)
        if status != http.client.NO_CONTENT:
            raise OSError(f"the object store refused PUT {name}: HTTP {status}")

    def listing(self, prefix: str) -> list[str]:
        status, body = self.request(LIST, "/?" + urllib.parse.urlencode({"list": prefix}))
        if status != http.client.OK:
            raise OSError(f"the object store refused LIST {prefix}: HTTP {status}")
        return body.decode().splitlines()

    def get(self, names: list[str]) -> list[bytes | None]:
        """One GET per name, all at once, each on a connection of its own (taken before any starts,
        so that the same connections serve every round's)."""
        connections = self.idle_ones(GET, len(names))
        if len(names) < 2:
            return [self.read(connection, name) for connection, name in zip(connections, names)]
        with ThreadPoolExecutor(len(names), thread_name_prefix="islands-get") as pool:
            return list(pool.map(self.read, connections, names))

    def read(self, connection: http.client.HTTPConnection | None, name: str) -> bytes | None:
        status, body = self.on(connection, GET, "/" + urllib.parse.quote(name))
        return body if status == http.client.OK else None

    def delete(self, name: str) -> None:
        self.request(DELETE, "/" + urllib.parse.quote(name))
