"""docs/explanation/covenant.md against the bundled covenant-72b scenario: every islands figure the page
shows is recomputed here, and the exchange is held to its closed form by hand, so the page cannot go
stale."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from islands.analysis.planner.search import least_bandwidth
from islands.scenarios import as_source, load
from islands.schedules.compression import TopK
from islands.schedules.store_round import ROUND_ONE_WAYS
from islands.simulator import simulate

PAGE = Path(__file__).resolve().parent.parent / "docs" / "explanation" / "covenant.md"
TEXT = PAGE.read_text()
PARAMETERS, CHUNK, KEPT, BITS = 72e9, 4096, 64, 2
UP_BPS, DOWN_BPS, PEERS, LATENCY_S, STEP_S, H = 110e6, 500e6, 20, 0.05, 40.0, 30


def rows() -> list[tuple[str, list[str], list[str]]]:
    """The "What would make 70 s hold" table: (case, overrides, the figures it shows)."""
    table = TEXT.split("| case | overrides |", 1)[1].split("\n\n", 1)[0]
    found = []
    for line in table.splitlines()[2:]:
        case, overrides, *figures = (cell.strip() for cell in line.strip("|").split("|"))
        found.append((case, re.findall(r"[\w.]+=[\w.]+", overrides), figures))
    return found


def payload_bytes() -> int:
    return TopK(CHUNK, KEPT, BITS).payload_bytes(int(PARAMETERS))


def test_the_page_shows_every_case_it_explains():
    assert [case for case, _, _ in rows()][0].startswith("as published")
    assert len(rows()) == 8


@pytest.mark.parametrize("case", rows(), ids=[case for case, _, _ in rows()])
def test_each_row_is_what_islands_computes(case):
    _, overrides, figures = case
    summary = simulate(load("covenant-72b", overrides)).summary
    computed = [
        f"{summary['mean_sync_s']:.1f} s",
        f"{summary['stall_s'] / summary['syncs']:.1f} s",
        f"{100 * summary['compute_utilisation']:.1f}%",
    ]
    assert figures == computed


def test_the_payload_is_the_closed_form_by_hand():
    chunks = PARAMETERS / CHUNK
    assert chunks == 17_578_125
    by_hand = int(chunks) * KEPT * (BITS + 12) // 8 + 2**BITS * 4  # 112 bytes a chunk, the table
    assert payload_bytes() == by_hand == 1_968_750_016
    assert "1,968,750,016 bytes" in TEXT
    summary = simulate(load("covenant-72b")).summary
    assert summary["bytes_per_worker"] / summary["syncs"] == by_hand  # one PUT a round


def test_a_round_is_one_put_twenty_gets_and_three_round_trips():
    bits = payload_bytes() * 8
    put_s, get_s = bits / UP_BPS, PEERS * bits / DOWN_BPS
    assert f"**{put_s:.1f} s**" in TEXT and f"**{get_s:.1f} s**" in TEXT  # 143.2 s, 630.0 s
    latency_s = 3 * 2 * LATENCY_S  # the PUT, the LIST, the GETs: a round trip each
    assert latency_s == ROUND_ONE_WAYS * LATENCY_S
    assert f"3 x 2 x 50 ms = {latency_s:.1f} s" in TEXT
    summary = simulate(load("covenant-72b")).summary
    # the first round also opens the connections: the PUT's, then the GETs', a TCP round trip each
    handshakes_s = 2 * 2 * LATENCY_S
    assert f"2 x 2 x 50 ms = {handshakes_s:.1f} s once" in TEXT
    assert summary["mean_sync_s"] == pytest.approx(
        put_s + get_s + latency_s + handshakes_s / summary["syncs"], rel=1e-9
    )
    assert f"the {summary['syncs']} rounds it simulates" in TEXT
    tls = simulate(load("covenant-72b", ["store.handshake_round_trips=3"])).summary
    assert f"3 round trips it would be {3 * handshakes_s:.1f} s once" in TEXT
    assert tls["mean_sync_s"] - summary["mean_sync_s"] == pytest.approx(
        2 * handshakes_s / summary["syncs"], rel=1e-6
    )
    share = 100 * latency_s / summary["mean_sync_s"]
    assert f"{latency_s:.1f} s\na round, {share:.2f}% of its {summary['mean_sync_s']:.1f} s" in TEXT
    compute_s = H * STEP_S
    assert summary["compute_utilisation"] == pytest.approx(
        compute_s / (compute_s + summary["mean_sync_s"]), rel=1e-9
    )


def test_overlapping_tau_steps_hides_tau_steps_of_the_exchange():
    exchange_s = simulate(load("covenant-72b")).summary["mean_sync_s"]
    for tau in (17, 18):
        summary = simulate(
            load("covenant-72b", ["schedule.algorithm=streaming", f"schedule.overlap_steps={tau}"])
        ).summary
        assert summary["stall_s"] / summary["syncs"] == pytest.approx(
            exchange_s - tau * STEP_S, rel=1e-9
        )


def test_the_plan_finds_the_bandwidth_the_closed_form_gives_for_94_5_percent():
    # 1200 / (1200 + T) = 0.945 at T = 21 payloads / b + 0.3 s, every link at b both ways
    allowed_s = H * STEP_S * (1 / 0.945 - 1)
    assert f"{allowed_s:.2f} s a round" in TEXT  # 69.84 s
    by_hand_gbps = (1 + PEERS) * payload_bytes() * 8 / 1e9 / (allowed_s - 6 * LATENCY_S)
    assert by_hand_gbps == pytest.approx(4.756, abs=1e-3)
    found = least_bandwidth(as_source("covenant-72b"), 0.945)
    assert found.value == pytest.approx(by_hand_gbps, rel=2e-3)
    assert "DiLoCo 4.76 Gbit/s" in TEXT and f"= {by_hand_gbps:.2f} Gbit/s" in TEXT
