"""Freed memory kept between exchanges (``trainer/core/memory.py``) and the warm-up that repeats until
the exchange path's heap stops growing (issue 29: a run's first sync measured 7-10% long)."""

import json
import mmap
import platform
import subprocess
import sys

import pytest

from islands.trainer.core.memory import fresh_pages_of
from islands.trainer.core.tracing import Clock
from islands.trainer.exchange import sync
from islands.trainer.exchange.sync import STEADY_FRESH_PAGES, WARM_UP_ROUNDS, Exchanger

PAGE_BYTES = mmap.PAGESIZE
BUFFER_BYTES = 10_400_000  # about one sync's decoded model at validation scale (2.6M fp32 values)
glibc_linux = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="mallopt and per-thread fault counts are glibc's and Linux's",
)

TWO_BUFFERS_THREE_TIMES = f"""
import ctypes, json, sys
from islands.trainer.core.memory import fresh_pages_of, keep_freed_pages
kept = keep_freed_pages() if sys.argv[1] == "keep" else None
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
def round_trip():
    buffers = [libc.malloc({BUFFER_BYTES}) for _ in range(2)]
    for buffer in buffers:
        libc.memset(buffer, 1, {BUFFER_BYTES})
    for buffer in buffers:
        libc.free(buffer)
print(json.dumps({{"kept": kept, "pages": [fresh_pages_of(round_trip) for _ in range(3)]}}))
"""


def fresh_pages_of_rounds(mode: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", TWO_BUFFERS_THREE_TIMES, mode],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)


@glibc_linux
def test_fresh_pages_of_counts_every_page_first_written():
    pages = 256
    region = mmap.mmap(-1, pages * PAGE_BYTES)

    def touch_every_page():
        for page in range(pages):
            region[page * PAGE_BYTES] = 1

    assert pages <= fresh_pages_of(touch_every_page) < pages + 32
    assert fresh_pages_of(touch_every_page) < 32  # written already: no fresh page
    region.close()


@glibc_linux
def test_kept_pages_let_the_same_buffers_come_back_without_a_fault():
    """Two 10.4 MB buffers, written whole and freed, three times: glibc's defaults map them afresh each
    time (2 x ceil(10.4e6 / 4096) = 5,080 pages a round); with freed pages kept, only the first round
    faults them in."""
    expected = 2 * -(-BUFFER_BYTES // PAGE_BYTES)
    default = fresh_pages_of_rounds("default")["pages"]
    kept = fresh_pages_of_rounds("keep")
    assert kept["kept"] is True
    assert kept["pages"][0] >= 0.9 * expected and max(kept["pages"][1:]) < STEADY_FRESH_PAGES
    assert min(default) >= 0.9 * expected


@pytest.mark.parametrize(
    "faults, rounds", [([20_000, 3_000, 10, 0], 3), ([0], 1), ([9_999] * 9, WARM_UP_ROUNDS)]
)
def test_the_warm_up_repeats_until_a_round_faults_in_almost_no_fresh_page(
    monkeypatch, faults, rounds
):
    calls = []

    def counted(work, *args):
        work(*args)
        calls.append(len(calls))
        return faults[len(calls) - 1]

    monkeypatch.setattr(sync, "fresh_pages_of", counted)
    exchanger = Exchanger(None, None, 8, Clock())
    exchanger.warm_up(1000, members=2)
    exchanger.close()
    assert len(calls) == rounds
