"""Chrome Trace Event export: valid JSON, one track per worker and per link, times in microseconds."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from islands.analysis.report.chrome_trace import (
    COLLECTIVES_PID,
    LINKS_PID,
    WORKERS_PID,
    chrome_trace,
)
from islands.cli import main
from islands.scenarios import load
from islands.simulator import simulate

OVERRIDES = ["schedule.outer_steps=2", "schedule.algorithm=streaming"]


def events_of(overrides: list[str]) -> list[dict]:
    scenario = load("worked-example", overrides)
    return json.loads(json.dumps(chrome_trace(simulate(scenario), scenario)))["traceEvents"]


@pytest.fixture(scope="module")
def events() -> list[dict]:
    return events_of(OVERRIDES)


def test_one_named_thread_per_worker(events):
    threads = [e for e in events if e["ph"] == "M" and e["name"] == "thread_name"]
    assert sorted((e["pid"], e["tid"], e["args"]["name"]) for e in threads) == [
        (WORKERS_PID, rank, f"dc-{rank}") for rank in range(8)
    ]


def test_one_counter_track_per_link(events):
    tracks = {e["name"] for e in events if e["ph"] == "C" and e["pid"] == LINKS_PID}
    assert tracks == {
        f"dc-{rank} {direction}link" for rank in range(8) for direction in ("up", "down")
    }


def test_worker_slices_tile_time_without_overlap(events):
    for rank in range(8):
        slices = sorted(
            (e["ts"], e["ts"] + e["dur"]) for e in events if e["ph"] == "X" and e["tid"] == rank
        )
        assert all(
            end <= next_start + 1e-3 for (_, end), (next_start, _) in zip(slices, slices[1:])
        )


def test_slices_are_in_microseconds():
    # DiLoCo: 500 steps x 1.5 s of compute, then a 280 s all-reduce stall, per interval
    diloco = events_of(["schedule.outer_steps=2", "schedule.algorithm=diloco"])
    worker0 = [(e["name"], e["dur"]) for e in diloco if e["ph"] == "X" and e["tid"] == 0]
    assert worker0 == [("compute", 750e6), ("stall", 280e6)] * 2


def test_each_all_reduce_is_one_async_slice(events):
    phases = Counter(e["ph"] for e in events if e["pid"] == COLLECTIVES_PID and e["ph"] in "be")
    assert phases == {"b": 20, "e": 20}  # 2 periods x 10 fragments
    first = next(e for e in events if e["pid"] == COLLECTIVES_PID and e["ph"] == "b")
    end = next(e for e in events if e["ph"] == "e" and e["id"] == first["id"])
    # a 2 GB fragment: 2 * 7/8 * 2 GB = 3.5 GB per worker = 28 Gbit, 28 s at 1 Gbit/s
    assert end["ts"] - first["ts"] == pytest.approx(28e6)
    assert first["args"]["bytes_per_worker"] == pytest.approx(3.5e9)


def test_weight_downloads_of_joining_workers_are_their_own_slices():
    # home-lab has churn: a worker that comes back first downloads the weights (comm rows without fragment)
    scenario = load("home-lab", ["schedule.outer_steps=6"])
    result = simulate(scenario)
    downloads = result.trace[(result.trace["kind"] == "comm") & (result.trace["fragment"] == -1)]
    events = chrome_trace(result, scenario)["traceEvents"]
    slices = [e for e in events if e["ph"] == "b" and e["cat"] == "weight download"]
    assert len(downloads) > 0 and len(slices) == len(downloads)
    assert not any(e["name"].endswith("fragment -1") for e in events)


def test_transfers_thrown_away_are_slices_with_their_bytes():
    """The worked example's 8 workers, DiLoCo: the first ring starts at 750 s (H = 500 steps of
    1.5 s) and worker 7 leaves 10 s into it; each of the 8 members had moved 10 s at 1 Gbit/s, 1.25 GB
    (the summary counts the 8 x 1.25 GB over the 8 workers)."""
    overrides = ["schedule.outer_steps=2", 'event=[{at_s = 760, island = "dc-7", kind = "leave"}]']
    scenario = load("worked-example", overrides)
    result = simulate(scenario)
    events = chrome_trace(result, scenario)["traceEvents"]
    wasted = [e for e in events if e["ph"] == "b" and e["cat"] == "wasted"]
    assert len(wasted) == 8
    assert [e["args"]["bytes"] for e in wasted] == pytest.approx([1.25e9] * 8)
    assert {e["ts"] for e in wasted} == {750e6}
    assert sum(e["args"]["bytes"] for e in wasted) == pytest.approx(
        result.summary["wasted_bytes_per_worker"] * 8
    )


def test_cli_writes_valid_json(tmp_path, capsys):
    out = tmp_path / "trace.json"
    assert (
        main(
            ["trace", "worked-example", *sum((["--set", o] for o in OVERRIDES), []), "-o", str(out)]
        )
        == 0
    )
    document = json.loads(out.read_text())
    assert document["otherData"]["workers"] == 8
    assert str(out) in capsys.readouterr().out
