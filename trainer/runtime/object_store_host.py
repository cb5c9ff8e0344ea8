"""Serve a directory object store over HTTP, for ``network.gather = "store"`` runs whose store is a host.

    python -m islands.trainer.runtime.object_store_host --root DIR --host ADDR --port PORT [--request-ms MS]

``exchange/object_store.py``'s ``HttpStore`` is its client: ``PUT /<name>`` stores the body
(``DirectoryStore.put``: a file written whole, then renamed into place), ``GET /<name>`` answers it
(404 where it is not there), ``DELETE /<name>`` removes it, and ``GET /?list=<prefix>`` answers the
names there that begin with it, one a line (S3's ListObjectsV2 with a prefix): the requests of a round
(``schedules/store_round.py``), a worker learning that every PUT is in by listing again until it is.
It speaks HTTP/1.1, a connection kept open for the client's next request, as an S3 endpoint does.
Each request waits ``--request-ms`` (the scenario's ``store.request_ms``, default 0) before it is
served, as a real store takes its own time to answer past the network's: a PUT's once its body is
read (the object is there after it), a LIST's and a GET's before their first byte; requests on
several connections (a member's K GETs) wait it at once, each on its thread.
``islands validate`` starts it inside a network namespace of its own, behind a link shaped as the
scenario's ``[store]`` (``validation/run.py``). It prints one line, ``listening on ADDR:PORT``, once it
takes requests; SIGTERM or Ctrl+C ends it.
"""

from __future__ import annotations

import argparse
import http.client
import signal
import threading
import time
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from islands.numbers import is_finite_number
from islands.units import MS_PER_S

from ..exchange.object_store import DirectoryStore


class StoreServer(ThreadingHTTPServer):
    """An HTTP server over one ``DirectoryStore`` that takes ``request_s`` to answer each request
    (``sleep``: how it waits it)."""

    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        root: Path,
        request_s: float = 0.0,
        sleep: Callable[[float], None] = time.sleep,
    ):
        super().__init__(address, StoreHandler)
        self.store = DirectoryStore(root)
        self.request_s, self.sleep = request_s, sleep

    def serve_request(self) -> None:
        """Wait the store's own time to answer one request (none where it takes none)."""
        if self.request_s > 0:
            self.sleep(self.request_s)


def object_name(path: str) -> str | None:
    """The object a request's path names; None for a path outside the store (``/``, ``..``, ``a/b``)."""
    name = urllib.parse.unquote(urllib.parse.urlsplit(path).path.removeprefix("/"))
    return name if name and "/" not in name and name not in (".", "..") else None


class StoreHandler(BaseHTTPRequestHandler):
    server: StoreServer
    protocol_version = "HTTP/1.1"  # connections stay open between requests
    # An answer's headers and body are two writes: with Nagle's algorithm a small body waits for the
    # headers' ACK, which the client delays (40 ms on Linux) on a connection kept open.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: object) -> None:
        """Silent: a round makes M (K + 3) requests."""

    def reply(self, status: int, body: bytes = b"") -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def refuse(self) -> None:
        """400, and the connection closed: what is left of the request is not read."""
        self.close_connection = True
        self.reply(http.client.BAD_REQUEST)

    def do_PUT(self) -> None:
        name = object_name(self.path)
        length = self.headers.get("Content-Length", "")
        if name is None or not length.isdigit():
            return self.refuse()
        data = self.rfile.read(int(length))
        self.server.serve_request()
        self.server.store.put(name, data)
        self.reply(http.client.NO_CONTENT)

    def do_GET(self) -> None:
        self.server.serve_request()
        query = urllib.parse.parse_qs(
            urllib.parse.urlsplit(self.path).query, keep_blank_values=True
        )
        if "list" in query:
            names = self.server.store.listing(query["list"][0])
            return self.reply(http.client.OK, "".join(f"{name}\n" for name in names).encode())
        name = object_name(self.path)
        data = None if name is None else self.server.store.read(name)
        self.reply(http.client.NOT_FOUND) if data is None else self.reply(http.client.OK, data)

    def do_DELETE(self) -> None:
        self.server.serve_request()
        name = object_name(self.path)
        if name is not None:
            self.server.store.delete(name)
        self.reply(http.client.NO_CONTENT)


def request_ms(text: str) -> float:
    """``--request-ms``: a number of milliseconds, finite and at least 0."""
    value = float(text)
    if not is_finite_number(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0 (got {text})")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True, help="the store's directory (made if missing)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=0, help="port (0: any free one)")
    parser.add_argument(
        "--request-ms",
        type=request_ms,
        default=0.0,
        help="the store's own time to answer each request, in ms (store.request_ms)",
    )
    args = parser.parse_args()
    server = StoreServer((args.host, args.port), Path(args.root), args.request_ms / MS_PER_S)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    print(f"listening on {args.host}:{server.server_port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
