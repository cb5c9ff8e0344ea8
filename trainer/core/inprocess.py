"""A whole run's ranks as threads of this process: for unit tests, the benchmark and debugging.

The threads talk through ``comm.ThreadGroup``s laid out exactly as the processes' groups are
(``fixed.torch_groups``): world, per-island intra groups, per-local-rank cross groups.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ..exchange.comm import ThreadHub
from .world import Groups


def thread_groups(islands: int, ranks_per_island: int, timeout_s: float = 60.0) -> list[Groups]:
    """The ``Groups`` of every rank, indexed by global rank (island * ranks_per_island + local rank)."""
    world = ThreadHub(islands * ranks_per_island, timeout_s).members()
    cross = [ThreadHub(islands, timeout_s).members() for _ in range(ranks_per_island)]
    groups = []
    for rank in range(islands * ranks_per_island):
        island, local = divmod(rank, ranks_per_island)
        groups.append(Groups(world=world[rank], cross=cross[local][island]))
    if ranks_per_island > 1:
        for island in range(islands):
            grad = ThreadHub(ranks_per_island, timeout_s).members()
            sync = ThreadHub(ranks_per_island, timeout_s).members()
            for local in range(ranks_per_island):
                groups[island * ranks_per_island + local].intra_grad = grad[local]
                groups[island * ranks_per_island + local].intra_sync = sync[local]
    return groups


def run_threads(count: int, target: Callable[[int], Any], timeout_s: float = 120.0) -> list[Any]:
    """Run ``target(rank)`` in ``count`` threads; return the results; re-raise the first failure."""
    results: list[Any] = [None] * count
    errors: list[BaseException] = []

    def body(rank: int) -> None:
        try:
            results[rank] = target(rank)
        except BaseException as exc:  # handed to the caller below
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(rank,), daemon=True) for rank in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout_s)
    if errors:
        raise errors[0]
    if any(thread.is_alive() for thread in threads):
        raise TimeoutError(f"ranks still running after {timeout_s} s")
    return results
