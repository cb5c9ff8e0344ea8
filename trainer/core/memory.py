"""A rank process's start: one compute thread, and freed memory kept mapped between syncs.

Every exchange allocates and frees the same few buffers, a few times the model's size (``quantize``:
the padded tensor, the encoded chunks, the decoded ones, the gathered mean). glibc gives large freed
blocks back to the kernel: a block of at least ``M_MMAP_THRESHOLD`` is unmapped when freed, and a
heap's free top beyond ``M_TRIM_THRESHOLD`` is dropped. Both thresholds also move with what was last
freed (glibc's dynamic threshold), so whether a sync's buffers come back as fresh pages depended on
the syncs before it. Fresh pages cost a page fault each, on the exchange's critical path after its
last byte arrived: 10 MB is 2,540 faults, measured at 5-20 µs each in this sandbox with four ranks
on two cores (0.05-0.1 s CPU per sync); the first sync of a validation run at 8:4:2:1 (2.6M int8
values) measured 7-10% long, and later ones up to 3% at random.

``keep_freed_pages`` fixes both thresholds (which also turns the dynamic adjustment off): blocks up
to 32 MiB (glibc's largest; a model of 8M fp32 values) come from the heap, and no heap is trimmed.
A process then keeps its peak of freed memory, as a caching allocator does. Elsewhere than glibc
there is nothing to set. The heap still grows over the first few exchanges (each finds the holes
the last one left a little too small), so ``Exchanger.warm_up`` repeats its exchange until a round
faults in almost no fresh page (``fresh_pages_of``).
"""

from __future__ import annotations

import ctypes
import platform
import resource
from collections.abc import Callable
from typing import Any

import torch

M_TRIM_THRESHOLD = -1  # mallopt's parameter numbers, from glibc's malloc.h
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_MAX_BYTES = 32 * 1024 * 1024  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit
NEVER_TRIM = -1


def keep_freed_pages() -> bool:
    """Freed blocks up to ``MMAP_THRESHOLD_MAX_BYTES`` stay in the heap and no heap is trimmed;
    returns whether glibc took both settings (False elsewhere)."""
    if platform.libc_ver()[0] != "glibc":
        return False
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX_BYTES)) and bool(
        mallopt(M_TRIM_THRESHOLD, NEVER_TRIM)
    )


def fresh_pages_of(work: Callable[..., Any], *args: Any) -> int:
    """Run ``work(*args)`` and return the pages it faulted in on this thread (minor faults: fresh
    pages, none read from disk); 0 where the system counts no thread's faults."""
    if not hasattr(resource, "RUSAGE_THREAD"):
        work(*args)
        return 0
    before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    work(*args)
    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before


def start_rank_process() -> None:
    """What every process that trains or exchanges does first: one intra-op thread (the islands of
    a replica share the machine's cores), and its freed pages kept (``keep_freed_pages``)."""
    torch.set_num_threads(1)
    keep_freed_pages()
