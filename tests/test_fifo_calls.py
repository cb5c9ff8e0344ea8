"""benchmarks/fifo_exchange.py --calls: how one payload is cut into a layout's calls, the order the
layouts' exchanges take, and the tables computed from a result row (no emulation is run here)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "fifo_exchange.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("fifo_exchange", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# docs/how-to/ddp-buckets.md's worked example: a 19.3M-value embedding registered first, then ten
# tensors of 1.15M; PyTorch's default caps, 1 MiB and 25 MiB of fp32 values (262,144 and 6,553,600)
EXAMPLE = [19_300_000] + [1_150_000] * 10


def test_the_layouts_calls_are_a_buffer_ddps_buckets_or_the_tensors(bench):
    # reversed: one 1.15M tensor fills the first bucket (over 262,144), six the second (6.9M over
    # 6,553,600; five would be 5.75M), the other three and the embedding the last: 22.75M
    assert bench.model_calls("flat", EXAMPLE) == [30_800_000.0]
    assert bench.model_calls("buckets", EXAMPLE) == [1_150_000.0, 6_900_000.0, 22_750_000.0]
    assert bench.model_calls("tensors", EXAMPLE) == [float(v) for v in EXAMPLE]


def test_calls_are_scaled_to_the_cells_values_at_the_nearest_edge(bench):
    # [3, 1, 4] of 8 into 16 values: edges at 6, 8, 16; [1, 1, 1] into 10: edges at 3.33 -> 3 and
    # 6.67 -> 7
    assert bench.scaled_calls([3.0, 1.0, 4.0], 16) == [6, 2, 8]
    assert bench.scaled_calls([1.0, 1.0, 1.0], 10) == [3, 4, 3]
    # the ddp-buckets example's buckets into 308 values: edges at 11.5 -> 12 (Python rounds half to
    # even: 11.5 -> 12), 80.5 -> 80, 308
    assert bench.scaled_calls([1_150_000.0, 6_900_000.0, 22_750_000.0], 308) == [12, 68, 228]


def test_a_payload_too_small_for_its_calls_is_refused_in_one_line(bench):
    # a tensor of 1 in 1,001 of 2 values: its edge at 0.002 -> 0, an empty call
    with pytest.raises(SystemExit, match="2 values are too few to cut into 2 calls"):
        bench.scaled_calls([1.0, 1000.0], 2)


def test_the_layouts_take_each_place_in_turn_each_repeat_ending_with_the_probe(bench):
    assert bench.exchange_order(["flat", "buckets", "tensors"], 2) == [
        "flat",
        "buckets",
        "tensors",
        "probe",
        "buckets",
        "tensors",
        "flat",
        "probe",
    ]


def test_calls_are_refused_beside_another_exchange(bench, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        bench.main(["--out", str(tmp_path / "x.json"), "--calls", "flat", "--exchange", "stepped"])
    assert stop.value.code == 2
    assert "--calls cuts gloo's all-reduce" in capsys.readouterr().err


def row(calls: str, values: list[int], ends: list[float], fraction: float) -> dict:
    return {
        "islands": 2,
        "rate_bits_per_s": 8e6,
        "gpt_layers": 6,
        "shaper": "fair",
        "queue_ms": None,
        "congestion_control": "cubic",
        "calls": calls,
        "call_values": values,
        "call_end_s": [ends],
        "fraction_of_rate": [fraction],
        "probe_call_s": [0.003],
    }


def test_the_calls_tables_are_computed_from_the_rows(bench, tmp_path):
    # two islands at 8 Mbit/s: a call's ring bytes are 2(M-1)/M = 1 x its values x 32 bits. The flat
    # call of 1,100 values (35,200 bits) took 5.5 ms: 0.8 of the rate, 6.4 Mbit/s. The per-tensor
    # exchange's calls of 1,000 and 100 values (32,000 and 3,200 bits: 5 ms and 0.5 ms at 6.4 Mbit/s)
    # ended at 5.1 ms and 7.6 ms: excess 0.1 ms (a call of 1-10 ms) and 2.0 ms (under 1 ms); its
    # largest call (1,000 / 1,100 = 0.91 of the bytes) alone got 32,000 / 8e6 / 0.0051 = 0.784
    path = tmp_path / "calls.json"
    rows = [
        row("flat", [1100], [0.0055], 0.8),
        row("tensors", [1000, 100], [0.0051, 0.0076], 0.6),
    ]
    path.write_text(json.dumps({"cells": rows}))
    excess = bench.call_excess_table([str(path)]).splitlines()
    assert excess[2] == "| 6 | 8 | fair | 3.00 | 1, 2.00 | 1, 0.10 | - | - |"
    largest = bench.largest_call_table([str(path)]).splitlines()
    assert largest[2] == (
        "| cubic | 6 | 8 | fair | flat | 1.00 | 0.800 (0.800-0.800) | 0.800 (0.800-0.800) |"
    )
    assert largest[3] == (
        "| cubic | 6 | 8 | fair | tensors | 0.91 | 0.784 (0.784-0.784) | 0.600 (0.600-0.600) |"
    )
