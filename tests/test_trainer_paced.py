"""Cross-island collectives paced by an in-process emulated link: bytes booked and time taken."""

from __future__ import annotations

import time

import pytest
import torch

from islands.emulation.link_specs import LinkSpec
from islands.emulation.shaper import InProcessShaper, pacer_config
from islands.trainer.core.inprocess import run_threads, thread_groups
from islands.trainer.runtime.paced import PacedGroup, paced

RATE_BITS_PER_S = 80e6
LATENCY_S = 0.01


def links(count: int) -> list[LinkSpec]:
    return [LinkSpec(i, RATE_BITS_PER_S, RATE_BITS_PER_S, LATENCY_S) for i in range(count)]


def test_all_reduce_books_a_ring_and_waits_for_it():
    groups = thread_groups(3, 1)

    def body(rank: int):
        pacer = InProcessShaper(links(3))
        group = PacedGroup(groups[rank].cross, pacer)
        tensor = torch.full((300_000,), float(rank))  # 1.2 MB
        start = time.monotonic()
        group.all_reduce_sum_(tensor)
        return time.monotonic() - start, pacer.counters(rank), float(tensor[0])

    for elapsed_s, counters, value in run_threads(3, body):
        ring_bytes = 2 * 2 / 3 * 1.2e6  # 2(M-1)/M * S
        assert counters == {"tx_bytes": int(ring_bytes), "rx_bytes": int(ring_bytes)}
        expected_s = 2 * LATENCY_S + ring_bytes * 8 / RATE_BITS_PER_S  # 0.18 s
        assert expected_s <= elapsed_s < expected_s + 0.15
        assert value == 0 + 1 + 2


def test_all_to_all_counts_only_what_leaves_the_island():
    groups = thread_groups(2, 1)

    def body(rank: int):
        pacer = InProcessShaper(links(2))
        group = PacedGroup(groups[rank].cross, pacer)
        group.all_to_all(
            [torch.zeros(1000, dtype=torch.uint8), torch.zeros(1000, dtype=torch.uint8)]
        )
        return pacer.counters(rank)

    assert run_threads(2, body) == [{"tx_bytes": 1000, "rx_bytes": 1000}] * 2


def test_the_launch_specs_pacer_switches_pacing_on():
    group = thread_groups(2, 1)[0].cross
    assert paced(group, None) is group
    wrapped = paced(group, pacer_config(links(2), "in-process", "in-process"))
    assert isinstance(wrapped, PacedGroup)
    assert wrapped.latency_s == pytest.approx(2 * LATENCY_S)


def test_members_are_paced_on_their_own_islands_links():
    """After island 1 left, an elastic epoch's group is islands [0, 2]: member 1 must book island 2's
    link (80 Mbit/s) and pay its latency, not island 1's (8 Mbit/s, ten times slower)."""
    specs = [
        LinkSpec(0, RATE_BITS_PER_S, RATE_BITS_PER_S, LATENCY_S),
        LinkSpec(1, RATE_BITS_PER_S / 10, RATE_BITS_PER_S / 10, 10 * LATENCY_S),
        LinkSpec(2, RATE_BITS_PER_S, RATE_BITS_PER_S, LATENCY_S),
    ]
    groups = thread_groups(2, 1)

    def body(rank: int):
        pacer = InProcessShaper(specs)
        group = PacedGroup(groups[rank].cross, pacer, [0, 2])
        start = time.monotonic()
        group.all_gather(torch.zeros(100_000, dtype=torch.uint8))  # 100 kB each way
        return group.island, group.peers, time.monotonic() - start, pacer.counters(group.island)

    expected_s = 2 * LATENCY_S + 100_000 * 8 / RATE_BITS_PER_S  # 0.03 s (island 1's link: 0.3 s)
    results = run_threads(2, body)
    assert [(island, peers) for island, peers, _, _ in results] == [(0, [2]), (2, [0])]
    for _, _, elapsed_s, counters in results:
        assert expected_s <= elapsed_s < expected_s + 0.1
        assert counters == {"tx_bytes": 100_000, "rx_bytes": 100_000}


def test_member_islands_must_match_the_group():
    group = thread_groups(2, 1)[0].cross
    with pytest.raises(ValueError, match="3 member islands given for a group of 2"):
        PacedGroup(group, InProcessShaper(links(3)), [0, 1, 2])
