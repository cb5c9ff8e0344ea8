"""Run independent tasks on any ``concurrent.futures`` executor, with a progress callback.

With no executor, tasks run in a local process pool of ``jobs`` processes (default: every core), or
in this process when ``jobs`` is 1 or there is a single task. Any other executor (a Dask or Ray
cluster's ``concurrent.futures`` adapter) can be passed instead; it needs only ``submit``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor, as_completed
from typing import Any

Progress = Callable[[int, int], None]


def default_jobs() -> int:
    return (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    )


def run_tasks(
    function: Callable[..., Any],
    arguments: Sequence[tuple],
    weights: Sequence[int] | None = None,
    executor: Executor | None = None,
    jobs: int | None = None,
    progress: Progress | None = None,
) -> list[Any]:
    """``[function(*args) for args in arguments]``, possibly in parallel, results in input order.

    ``progress(done, total)`` is called after each task, counting ``weights`` (e.g. runs per task).
    """
    weights = list(weights) if weights is not None else [1] * len(arguments)
    total = sum(weights)
    if progress:
        progress(0, total)  # a start line with the count of runs, before the first one ends
    if executor is None:
        jobs = min(jobs or default_jobs(), len(arguments))
        if jobs <= 1:
            return run_inline(function, arguments, weights, total, progress)
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            return collect(function, arguments, weights, total, pool, progress)
    return collect(function, arguments, weights, total, executor, progress)


def run_inline(
    function: Callable[..., Any],
    arguments: Sequence[tuple],
    weights: list[int],
    total: int,
    progress: Progress | None,
) -> list[Any]:
    results, done = [], 0
    for args, weight in zip(arguments, weights):
        results.append(function(*args))
        done += weight
        if progress:
            progress(done, total)
    return results


def collect(
    function: Callable[..., Any],
    arguments: Sequence[tuple],
    weights: list[int],
    total: int,
    executor: Executor,
    progress: Progress | None,
) -> list[Any]:
    futures: dict[Future, int] = {
        executor.submit(function, *args): index for index, args in enumerate(arguments)
    }
    results: list[Any] = [None] * len(arguments)
    done = 0
    try:
        for future in as_completed(futures):
            index = futures[future]
            results[index] = future.result()
            done += weights[index]
            if progress:
                progress(done, total)
    finally:
        for future in futures:
            future.cancel()
    return results
