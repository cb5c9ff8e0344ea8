"""Run the live page's application with uvicorn on a socket already bound (so that a port in use is
refused in one line before anything is served), in the foreground (``islands serve``) or in a thread
(``running``: tests, the benchmark and the docs' screenshots).

    >>> with running(Session.start("worked-example")) as url:   # doctest: +SKIP
    ...     print(url)     # http://127.0.0.1:PORT/
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator

import uvicorn

from .app import create_app
from .jobs import Jobs
from .session import Session

STARTUP_TIMEOUT_S = 30.0


def server_of(session: Session, jobs: Jobs, sock: socket.socket) -> uvicorn.Server:
    host = sock.getsockname()[0]
    app = create_app(session, jobs, None if host in ("0.0.0.0", "::") else [host])
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    return uvicorn.Server(config)


def serve(session: Session, sock: socket.socket, ready: Callable[[], None]) -> None:
    """Serve until interrupted (Ctrl-C); ``ready()`` once the page can be opened."""
    jobs = Jobs()
    jobs.warm(wait=True)
    server = server_of(session, jobs, sock)
    ready()
    try:
        server.run(sockets=[sock])
    finally:
        jobs.close()
        sock.close()


@contextlib.contextmanager
def running(session: Session, jobs: Jobs | None = None) -> Iterator[str]:
    """The application served on a free port of 127.0.0.1 in a thread, for the block's duration."""
    jobs = jobs or Jobs()
    jobs.warm(wait=True)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    server = server_of(session, jobs, sock)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/"
    finally:
        server.should_exit = True
        thread.join(STARTUP_TIMEOUT_S)
        jobs.close()
        sock.close()
