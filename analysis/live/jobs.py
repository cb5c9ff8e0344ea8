"""The live page's jobs: each change's figures (or a report) computed in a worker process.

A worker is a process forked from a server process that has already imported the simulator
(multiprocessing's "forkserver", preloaded), so it starts in tens of milliseconds; it then computes
one change of the worked example on its own (``warm_up``), since a process's first run pays for its
lazy imports and caches, and waits for jobs. Workers are reused, and one spare is kept ready. A
worker makes itself a process group, and cancelling its job kills the group: the run stops at once,
with any pool of processes it started, and nothing it held stays behind. A newer job of the same
kind supersedes the one running (a newer change makes the older one's figures moot). The server's
threads only wait on the workers' pipes, so a request is answered at once however long a run
takes; the page polls ``wait``, which returns as soon as the job moved on (a part ready, a step of
progress) or after a timeout.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from islands.errors import UserError

PRELOADED = [  # imported once by the fork server: a worker starts with them in memory
    "islands.analysis.live.jobs",
    "islands.analysis.live.figures",
    "islands.analysis.report.html_report",
]
WARM_UP_SCENARIO = "worked-example"
SPARE_WORKERS = 1  # started ahead of need
KEPT_SPARES = (
    2  # a stopped job's worker is kept up to this many spares (warm: quick to start a job)
)
STOP_GRACE_S = 0.5  # a job not stopped this long after it was asked to is killed with its worker
KEPT_JOBS = 32  # finished jobs kept for the page to read, the newest
QUIET_S = (
    0.2  # a job's steps of progress wake no waiter before this: a quick job's parts come first
)
RUNNING, DONE, FAILED, CANCELLED = "running", "done", "failed", "cancelled"
Task = Callable[..., None]  # task(*args, emit, progress)


@dataclass
class Job:
    """A job as the page sees it: its parts so far, the step it is at, and how it ended.
    ``version`` grows with every change, so a waiter knows when there is news."""

    id: int
    kind: str
    started_s: float
    status: str = RUNNING
    version: int = 0
    step: dict[str, Any] | None = None
    parts: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    ended_s: float | None = None

    def snapshot(self) -> dict[str, Any]:
        """What the page reads: everything but a download's content (fetched by ``download``)."""
        return {
            "id": self.id,
            "kind": self.kind,
            "status": self.status,
            "version": self.version,
            "step": self.step,
            "parts": {name: without_content(part) for name, part in self.parts.items()},
            "error": self.error,
            "elapsed_s": (self.ended_s or time.monotonic()) - self.started_s,
        }


def without_content(part: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in part.items() if key != "content"}


def warm_up() -> None:
    """One change of the worked example, its parts thrown away (module docstring)."""
    from islands.scenarios import ScenarioSource

    from .figures import compute_figures

    compute_figures(
        ScenarioSource.read(WARM_UP_SCENARIO), 0.95, lambda *part: None, lambda *step: None
    )


class Stopped(Exception):
    """The server asked the worker to stop its job (cancelled, or superseded by a newer one)."""


def worker_main(connection: Connection) -> None:
    """A worker: its own process group (so that a kill takes whatever it starts), warmed up, then each
    job ``("job", task, args)`` received run as ``task(*args, emit, progress)``, each part and step sent
    back, and its end: ``("done",)``, ``("failed", one line)`` or, where the server sent ``("stop",)``
    during the job (seen at its next part or step), ``("stopped",)``."""
    os.setpgrp()
    warm_up()
    connection.send(("ready",))

    def stop_asked() -> None:
        if connection.poll():  # during a job the server sends nothing but a stop
            connection.recv()
            raise Stopped

    def emit(name: str, part: dict[str, Any]) -> None:
        stop_asked()
        connection.send(("part", name, part))

    def progress(stage: str, done: int, total: int) -> None:
        stop_asked()
        connection.send(("step", {"stage": stage, "done": done, "total": total}))

    while True:
        try:
            message = connection.recv()
        except EOFError:  # the server closed its end: it is stopping
            return
        if message[0] != "job":  # a stop that came after its job had ended
            continue
        try:
            message[1](*message[2], emit, progress)
        except Stopped:
            connection.send(("stopped",))
        except UserError as error:
            connection.send(("failed", str(error)))
        except (
            Exception
        ) as error:  # a bug: its traceback on the server's terminal, one line on the page
            traceback.print_exc()
            connection.send(("failed", f"internal error ({type(error).__name__}: {error})"))
        else:
            connection.send(("done",))


@dataclass
class Worker:
    process: Any
    connection: Connection
    # one thread at a time waits for the process: under "forkserver" its exit status is read once
    # from a pipe, and a second reader at the same moment reads nothing (exit code 255)
    reaping: threading.Lock = field(default_factory=threading.Lock)

    def exit_code(self, timeout_s: float | None = None) -> int | None:
        """Wait at most ``timeout_s`` for the process to end: its exit code (None while it runs)."""
        with self.reaping:
            self.process.join(timeout_s)
            return self.process.exitcode

    def kill(self) -> None:
        """Kill the worker and whatever it started (its process group)."""
        if self.process.pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)  # the group, once the worker made it
        self.process.kill()  # the process itself, if it had not yet
        self.connection.close()


class Jobs:
    """The jobs of one server and their workers; thread-safe."""

    def __init__(self) -> None:
        self.context = multiprocessing.get_context("forkserver")
        self.context.set_forkserver_preload(PRELOADED)
        self.changed = threading.Condition()
        self.jobs: dict[int, Job] = {}
        self.workers: dict[int, Worker] = {}  # job id -> the worker running it
        self.spares: list[Worker] = []
        self.running: dict[str, int] = {}  # kind -> the job of that kind running
        self.next_id = 1
        self.closed = False

    def start_worker(self) -> Worker:
        mine, theirs = self.context.Pipe()
        process = self.context.Process(target=worker_main, args=(theirs,))
        process.start()
        theirs.close()
        return Worker(process, mine)

    def warm(self, wait: bool = False) -> None:
        """Top the spare workers up; ``wait``: until they are warm (when the server starts)."""
        with self.changed:
            while len(self.spares) < SPARE_WORKERS:
                worker = self.start_worker()
                if wait and worker.connection.recv() != ("ready",):
                    raise RuntimeError("a worker did not start")
                self.spares.append(worker)

    def submit(self, kind: str, task: Task, args: tuple) -> Job:
        """Run ``task`` on a spare worker; the job of ``kind`` running is cancelled."""
        with self.changed:
            if kind in self.running:
                self.cancel(self.running[kind], "superseded by a newer change")
            job = Job(self.next_id, kind, time.monotonic())
            self.next_id += 1
            worker = self.spares.pop(0) if self.spares else self.start_worker()
            worker.connection.send(("job", task, args))
            self.jobs[job.id], self.workers[job.id], self.running[kind] = job, worker, job.id
            self.forget_old()
        threading.Thread(target=self.follow, args=(job, worker), daemon=True).start()
        self.warm()  # a spare for the next change (one that stops its job becomes one too)
        return job

    def follow(self, job: Job, worker: Worker) -> None:
        """Read a job's messages until it ends, or its worker does (killed, or crashed)."""
        while True:
            try:
                message = worker.connection.recv()
            except (EOFError, OSError):
                message = None
            if message is None or message[0] in ("done", "failed", "stopped"):
                break
            if message[0] != "ready":  # a spare's, read here when it is used before it said so
                self.update(job, message)
        with self.changed:
            del self.workers[job.id]
            if message is None:
                worker.kill()
                code = worker.exit_code()
                if job.status == RUNNING:
                    self.end(job, FAILED, f"the worker ended without an answer (exit code {code})")
                return
            if job.status == RUNNING:
                self.end(job, DONE) if message[0] == "done" else self.end(job, FAILED, message[1])
            if self.closed or len(self.spares) >= KEPT_SPARES:
                worker.kill()
            else:
                self.spares.append(worker)

    def update(self, job: Job, message: tuple) -> None:
        with self.changed:
            if job.status != RUNNING:
                return
            what, *rest = message
            if what == "step":
                job.step = rest[0]
                if time.monotonic() - job.started_s < QUIET_S:
                    return
            else:
                job.parts[rest[0]] = rest[1]
            job.version += 1
            self.changed.notify_all()

    def end(self, job: Job, status: str, error: str | None = None) -> None:
        """Mark ``job`` ended (the caller holds the lock)."""
        job.status, job.error, job.ended_s = status, error, time.monotonic()
        job.version += 1
        if self.running.get(job.kind) == job.id:
            del self.running[job.kind]
        self.changed.notify_all()

    def cancel(self, job_id: int, reason: str = "cancelled") -> Job | None:
        """End a running job now: its worker is asked to stop it (it does at its next part or step,
        and stays, warm), and killed if it has not within ``STOP_GRACE_S`` (a long single run)."""
        with self.changed:
            job = self.jobs.get(job_id)
            if job is None or job.status != RUNNING:
                return job
            self.end(job, CANCELLED, reason)
            worker = self.workers.get(job_id)
            if worker is not None:
                with contextlib.suppress(OSError):
                    worker.connection.send(("stop",))
                timer = threading.Timer(STOP_GRACE_S, self.kill_if_busy, (job_id, worker))
                timer.daemon = True  # a server stopping does not wait for it
                timer.start()
            return job

    def kill_if_busy(self, job_id: int, worker: Worker) -> None:
        with self.changed:
            if self.workers.get(job_id) is worker:
                worker.kill()

    def wait(self, job_id: int, version: int, timeout_s: float) -> Job | None:
        """The job once its version passes ``version`` or it ended, or after ``timeout_s``."""
        with self.changed:
            job = self.jobs.get(job_id)
            if job is None:
                return None
            self.changed.wait_for(lambda: job.version > version or job.status != RUNNING, timeout_s)
            return job

    def get(self, job_id: int) -> Job | None:
        with self.changed:
            return self.jobs.get(job_id)

    def forget_old(self) -> None:
        """Keep the newest ``KEPT_JOBS`` jobs (the caller holds the lock); running ones stay."""
        ended = [i for i, job in self.jobs.items() if job.status != RUNNING]
        for job_id in ended[: max(0, len(self.jobs) - KEPT_JOBS)]:
            del self.jobs[job_id]

    def close(self) -> None:
        """Cancel every running job and stop every worker (the server is stopping)."""
        with self.changed:
            self.closed = True
            for job_id in list(self.running.values()):
                self.cancel(job_id, "the server stopped")
            for worker in [*self.workers.values(), *self.spares]:
                worker.kill()
            self.spares.clear()
