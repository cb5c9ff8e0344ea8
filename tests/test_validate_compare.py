"""Predicted beside measured: relative errors, negligible values, per-sync alignment, and how the
calibration reaches the simulator (scenario keys only)."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from islands.scenarios.loader import from_dict
from islands.simulator import simulate
from islands.trace import to_frame
from islands.trainer.exchange.quantize import encoded_bytes, padded_length
from islands.validation.calibration import (
    Calibration,
    calls_ratio,
    exchange_costs,
    in_series,
    screening_s_per_value,
    simulator_overrides,
    trainer_latency_s,
    wire_ratio,
)
from islands.validation.compare import relative_error, sync_rows
from islands.validation.exchange_probe import (
    MAX_PROBE_VALUES,
    calls_of_size,
    large_probe_values,
    medium_values,
    probe_sizes,
    tiny_values,
    wire_values,
)
from islands.validation.scaling import MODEL_PARAMETERS, ring_volume_bytes


def test_relative_error_is_signed_and_skips_negligible_measurements():
    assert relative_error(9.5, 10.0) == pytest.approx(-0.05)
    assert relative_error(0.0, 0.003, scale=12.0) is None  # 3 ms of stall in a 12 s run
    assert relative_error(1.0, None) is None


def test_learners_on_their_own_clocks_are_compared_by_their_own_exchanges():
    """Two learners exchange fragment 0 of outer step 0 an hour apart, 2 s and 4 s each: the sync
    is their mean, 3 s, not the 3604 s span from the first start to the last end."""
    predicted = to_frame(
        [(0.0, 2.0, 0, "a", "comm", 10.0, 0, 0), (3600.0, 3604.0, 1, "b", "comm", 10.0, 0, 0)]
    )
    measured = to_frame(
        [(0.0, 2.2, 0, "a", "comm", 10.0, 0, 0), (3500.0, 3504.4, 1, "b", "comm", 10.0, 0, 0)]
    )
    [row] = sync_rows(predicted, measured, per_worker=True)
    assert (row["predicted_s"], row["measured_s"]) == pytest.approx((3.0, 3.3))
    assert sync_rows(predicted, measured)[0]["predicted_s"] == pytest.approx(3604.0)


def test_sync_rows_pair_the_same_collective():
    predicted = to_frame(
        [(1.0, 3.0, 0, "a", "comm", 10.0, 0, 0), (1.0, 3.5, 1, "b", "comm", 10.0, 0, 0)]
    )
    measured = to_frame(
        [(1.1, 3.4, 0, "a", "comm", 10.0, 0, 0), (1.2, 4.1, 1, "b", "comm", 10.0, 0, 0)]
    )
    [row] = sync_rows(predicted, measured)
    assert (row["outer_step"], row["fragment"]) == (0, 0)
    assert row["predicted_s"] == pytest.approx(2.5)
    assert row["measured_s"] == pytest.approx(3.0)
    assert row["error"] == pytest.approx(-0.5 / 3.0)


def test_the_calibrated_simulator_pays_the_trainer_s_overhead_latency_screening_and_achieved_rate():
    calibration = Calibration(
        "kernel-htb-fq-cubic",
        "test",
        0.958,
        (0.958,),
        {3: 0.012},
        {3: {10e6: 0.5, 100e6: 0.7}},
        {3: 2e-8},
        {3: {10e6: 0.05, 100e6: 0.02}},
    )
    islands = [
        {
            "name": f"i{n}",
            "step_time_s": 0.2,
            "upload_gbps": 0.05,
            "download_gbps": 0.05,
            "latency_ms": latency,
        }
        for n, latency in enumerate((1.0, 2.0, 4.0))
    ]
    document = {
        "name": "t",
        "model": {"parameters": 1e6, "bytes_per_param": 4},
        "schedule": {"algorithm": "diloco", "inner_steps": 5, "outer_steps": 1, "bits": 32},
        "island": islands,
    }
    scenario = from_dict(document, "t", simulator_overrides(calibration, islands))
    summary = simulate(scenario).summary
    latency_s = trainer_latency_s([0.001, 0.002, 0.004])
    assert latency_s == pytest.approx(
        3 * (0.004 + 0.002)
    )  # three phases, slowest member + farthest peer
    # 50 Mbit/s, between the probed 10 and 100: 1 / ratio linear in the rate (CPU work per byte in series)
    ratio = 1 / (1 / 0.5 + (50 - 10) / (100 - 10) * (1 / 0.7 - 1 / 0.5))
    assert calibration.ratio_at(3, 50e6) == pytest.approx(ratio)
    assert calibration.ratio_at(3, 1e9) == 0.7
    data_s = ring_volume_bytes(3, 4e6) * 8 / (0.05e9 * ratio)
    spread_s = 0.05 - 0.03 * math.log(5) / math.log(10)  # at 50 Mbit/s, as the ratio
    assert calibration.spread_at(3, 50e6) == pytest.approx(spread_s)
    # the first member ends this long before the last: the sync's span stays the last one's
    assert summary["mean_sync_s"] == pytest.approx(0.012 + latency_s + data_s)
    screening_s = 2e-8 * 1e6  # every member screens the 1e6 values before the bytes move: idle
    assert summary["idle_s"] == pytest.approx(screening_s)
    assert summary["wall_time_s"] == pytest.approx(5 * 0.2 + screening_s + summary["mean_sync_s"])


def test_a_calibration_saved_before_the_end_spread_was_measured_reads_as_no_spread():
    calibration = Calibration(
        "in-process", "test", 1.0, (), {3: 0.01}, {3: {1e7: 0.9}}, {3: 1e-8}, {3: {1e7: 0.02}}
    )
    old = json.loads(calibration.to_json())
    del old["end_spread_s"]
    assert Calibration.from_json(calibration.to_json()).spread_at(3, 1e8) == 0.02
    assert Calibration.from_json(json.dumps(old)).spread_at(3, 1e8) == 0.0


def test_with_kernel_shaping_every_link_sends_its_share_of_its_bucket_at_once():
    calibration = Calibration(
        "kernel-htb-fq-cubic",
        "test",
        0.958,
        (0.958,),
        {3: 0.012},
        {3: {10e6: 0.9}},
        {3: 0.0},
        burst_fraction={3: {10e6: 0.5, 100e6: 1.0}},
    )
    islands = [
        {
            "name": f"i{n}",
            "step_time_s": 0.2,
            "upload_gbps": 0.0316,
            "download_gbps": rate_gbps,
            "latency_ms": 0.0,
        }
        for n, rate_gbps in enumerate((0.5, 0.166, 0.166))
    ]
    document = {
        "name": "t",
        "model": {"parameters": 1e6, "bytes_per_param": 4},
        "schedule": {"algorithm": "diloco", "inner_steps": 5, "outer_steps": 1, "bits": 32},
        "island": islands,
    }
    overrides = simulator_overrides(calibration, islands)
    # at the ring's 31.6 Mbit/s, half-way in log between 10 and 100: 0.75 of each link's bucket,
    # 4 ms at its rate (31.6 Mbit/s: 15 800 B; 500 Mbit/s: 250 kB)
    fraction = 0.5 + 0.5 * math.log10(3.16)
    assert calibration.burst_bytes(3, 31.6e6, 500e6) == pytest.approx(fraction * 250_000)
    assert f"island.0.upload_burst_bytes={fraction * 15_800!r}" in overrides
    assert f"island.0.download_burst_bytes={fraction * 250_000!r}" in overrides
    summary = simulate(from_dict(document, "t", overrides)).summary
    # that much of the ring volume at once on every link, the rest at 90% of the slowest uplink
    data_s = (ring_volume_bytes(3, 4e6) - fraction * 15_800) * 8 / (0.0316e9 * 0.9)
    assert summary["mean_sync_s"] == pytest.approx(0.012 + data_s)
    old = json.loads(calibration.to_json())
    del old["burst_fraction"]
    assert Calibration.from_json(calibration.to_json()).burst_fraction == calibration.burst_fraction
    assert (
        Calibration.from_json(json.dumps(old)).burst_bytes(3, 33e6, 33e6) == 0.0
    )  # saved before: none


def probe_timings(large_values: int, rate: float, ratio: float, burst_bytes: float) -> dict:
    """What two islands' probe reports over links that send ``burst_bytes`` at once, then move at ratio x rate."""

    def data_s(values: int) -> float:
        return (
            (ring_volume_bytes(2, encoded_bytes(padded_length(values, 2), 16)) - burst_bytes)
            * 8
            / (ratio * rate)
        )

    return {
        "large_values": large_values,
        "screen": {size: {"2": 0.001} for size in ("tiny", "medium", "large")},
        "average": {
            "tiny": {"2": 0.003},
            "calls": {"2": 0.003 + data_s(medium_values(large_values)) + 15 * 0.0015},
            "medium": {"2": 0.003 + data_s(medium_values(large_values))},
            "large": {"2": 0.003 + data_s(large_values)},
        },
        "spread": {size: {"2": 0.0} for size in ("tiny", "medium", "large")},
    }


def test_the_medium_and_large_exchanges_tell_the_rate_from_what_the_links_sent_at_once():
    timings = probe_timings(5_000_000, 10e6, 0.85, 30_000)
    costs = exchange_costs(2, timings, 10e6, bucket_bytes=65536)
    assert (costs.ratio, costs.burst_fraction, costs.call_s) == pytest.approx(
        (0.85, 30_000 / 65536, 0.0015)
    )
    # a burst beyond the bucket is noise: kept at one bucket, the rate refitted to it
    beyond = exchange_costs(
        2, probe_timings(5_000_000, 10e6, 0.85, 100_000), 10e6, bucket_bytes=65536
    )
    assert beyond.burst_fraction == 1.0
    large_bytes = ring_volume_bytes(2, encoded_bytes(padded_length(5_000_000, 2), 16))
    assert beyond.ratio == pytest.approx(0.85 * (large_bytes - 65536) / (large_bytes - 100_000))
    # no bucket (in-process shaping): the large exchange's rate, the burst in it
    alone = exchange_costs(2, timings, 10e6)
    assert (alone.ratio, alone.burst_fraction) == pytest.approx(
        (0.85 * large_bytes / (large_bytes - 30_000), 0.0)
    )


def test_screening_cost_is_the_slope_in_values_and_the_fixed_cost_keeps_none_of_it():
    cpu_s, fixed_s, large_values, rate, spread_s = 1e-8, 0.004, 5_000_000, 100e6, 0.019
    tiny = tiny_values(2)
    data_s = (
        ring_volume_bytes(2, encoded_bytes(padded_length(large_values, 2), 16)) * 8 / (0.9 * rate)
    )
    timings = {
        "large_values": large_values,  # screening: 1 ms fixed; the average: 3 ms fixed + bytes
        "screen": {
            "tiny": {"2": 0.001 + cpu_s * tiny},
            "large": {"2": 0.001 + cpu_s * large_values},
        },
        "average": {
            "tiny": {"2": fixed_s - 0.001},
            "medium": {"2": fixed_s - 0.001 + data_s / 4},
            "calls": {"2": fixed_s - 0.001 + data_s / 4 + 15 * 0.002},
            "large": {"2": fixed_s - 0.001 + data_s},
        },
        "spread": {"tiny": {"2": 0.0002}, "large": {"2": spread_s}},
    }
    measured_cpu_s, overhead_s, ratio, measured_spread_s, _, call_s = exchange_costs(
        2, timings, rate
    )
    assert call_s == pytest.approx(0.002)  # the medium tensor in 16 calls: 15 more than in one
    assert measured_cpu_s == pytest.approx(cpu_s)
    assert overhead_s == pytest.approx(
        fixed_s
    )  # the tiny exchange's few values are priced per value
    assert ratio == pytest.approx(
        0.9
    )  # the last member's: the others finish up to the spread before
    assert measured_spread_s == pytest.approx(spread_s)
    assert (
        screening_s_per_value(0.003, 0.002, tiny, large_values) == 0.0
    )  # below resolution, never negative


def test_an_int8_exchange_is_probed_at_the_bytes_of_the_bf16_one_and_priced_at_its_own_rate():
    """Issue 29: int8 carries twice the values of bf16 per byte, and the exchange's CPU work goes by
    values: a bf16 calibration priced every int8 sync short."""
    sizes = probe_sizes(2, 1_000_000, [8, 32])
    assert sizes["large@8"] == (2_000_000, 8, sizes["large"][2]) and sizes["large@32"][:2] == (
        500_000,
        32,
    )
    # 100 Mbit/s: no larger than the replica's model, as the trainer's exchanges are
    assert (
        probe_sizes(2, 6_250_000, [8])["large@8"][0] == MAX_PROBE_VALUES == round(MODEL_PARAMETERS)
    )
    # and the bf16 exchange too: a second of bytes at 10 Mbit/s, the replica's model at 100 Mbit/s
    assert (large_probe_values(1_250_000), large_probe_values(12_500_000)) == (
        625_000,
        MAX_PROBE_VALUES,
    )
    large_values, rate, burst_bytes = 1_000_000, 10e6, 20_000
    int8_bytes = ring_volume_bytes(
        2, encoded_bytes(padded_length(wire_values(large_values, 8), 2), 8)
    )
    timings = probe_timings(large_values, rate, 0.9, burst_bytes)
    timings["average"]["large@8"] = {"2": 0.003 + (int8_bytes - burst_bytes) * 8 / (0.8 * rate)}
    assert wire_ratio(2, timings, rate, 8, burst_bytes) == pytest.approx(0.8)
    calibration = Calibration(
        "kernel-htb-fq-cubic",
        "test",
        0.958,
        (0.958,),
        {2: 0.004},
        {2: {10e6: 0.92, 100e6: 0.91}},
        {2: 0.0},
        exchange_ratio_by_bits={8: {2: {10e6: 0.93, 100e6: 0.82}}},
    )
    assert calibration.ratio_at(2, 100e6, 8) == pytest.approx(0.82)
    assert calibration.ratio_at(2, 100e6, 32) == pytest.approx(0.91)  # not measured in fp32: bf16's
    assert calibration.ratio_at(2, 100e6) == pytest.approx(0.91)
    assert (calibration.measured_bits(8, 2), calibration.measured_bits(16, 2)) == (True, True)
    assert (calibration.measured_bits(32, 2), calibration.measured_bits(8, 3)) == (False, False)
    islands = [
        {
            "name": f"i{n}",
            "step_time_s": 0.2,
            "upload_gbps": 0.1,
            "download_gbps": 0.1,
            "latency_ms": 0.0,
        }
        for n in range(2)
    ]

    def upload_gbps(wire_bits: int) -> float:
        overrides = dict(o.split("=") for o in simulator_overrides(calibration, islands, wire_bits))
        return float(overrides["island.0.upload_gbps"])

    assert (upload_gbps(8), upload_gbps(32)) == pytest.approx((0.1 * 0.82, 0.1 * 0.91))
    assert Calibration.from_json(calibration.to_json()) == calibration


def test_an_exchange_in_calls_is_priced_at_the_rate_measured_in_its_own_calls():
    """Issue 44: two islands at 219 Mbit/s behind one FIFO moved 2.5M values at 84% of the rate in one
    call and 93% in 40 (their per-value work overlapped with the bytes in flight), so the calibration
    times the case's own exchange in its calls and the simulator prices that rate, with no cost per
    call beside it (it is in the rate); a number of calls not measured keeps the one call's rate and
    ``call_s`` per call."""
    sizes = probe_sizes(2, 2_500_000, [], (40,))
    assert sizes["large/40"] == (2_500_000, 16, sizes["large"][2])
    assert (calls_of_size("large/40")(9), calls_of_size("calls")(9), calls_of_size("large")(9)) == (
        40,
        16,
        1,
    )
    large_values, rate, burst_bytes = 2_500_000, 218.88e6, 20_000
    large_bytes = ring_volume_bytes(2, encoded_bytes(padded_length(large_values, 2), 16))
    timings = probe_timings(large_values, rate, 0.84, burst_bytes)
    timings["average"]["large/40"] = {"2": 0.003 + (large_bytes - burst_bytes) * 8 / (0.93 * rate)}
    assert calls_ratio(2, timings, rate, 40, burst_bytes) == pytest.approx(0.93)
    calibration = Calibration(
        "kernel-tbf-fifo-200ms-cubic",
        "test",
        0.956,
        (0.956,),
        {2: 0.004},
        {2: {10e6: 0.84, rate: 0.84}},
        {2: 0.0},
        exchange_ratio_by_bits={8: {2: {10e6: 0.80, rate: 0.80}}},
        call_s={2: 0.0015},
        exchange_ratio_by_calls={40: {2: {10e6: 0.90, rate: 0.93}}},
    )
    assert (calibration.measured_calls(40, 2), calibration.measured_calls(80, 2)) == (True, False)
    assert (calibration.measured_calls(1, 2), calibration.measured_calls(40, 3)) == (False, False)
    islands = [
        {"name": f"i{n}", "step_time_s": 0.2, "upload_gbps": 0.21888, "download_gbps": 0.21888}
        | {"latency_ms": 0.0}
        for n in range(2)
    ]

    def priced(bits: int, calls: int) -> tuple[float, float, float]:
        """(upload Gbit/s, the exchange's fixed cost once, each hop's latency in ms)"""
        overrides = dict(
            o.split("=") for o in simulator_overrides(calibration, islands, bits, calls)
        )
        return tuple(
            float(overrides[key])
            for key in ("island.0.upload_gbps", "exchange.sync_overhead_s", "island.0.latency_ms")
        )

    # in 40 calls: the calls' rate; the whole fixed cost once, no call cost (it is in the rate)
    assert priced(16, 40) == pytest.approx((0.21888 * 0.93, 0.004, 0.0))
    # int8 in 40 calls: int8's rate, times what the calls gained over one call in bf16
    assert priced(8, 40)[0] == pytest.approx(0.21888 * 0.80 * 0.93 / 0.84)
    # 80 calls were not measured: the one call's rate, and 1.5 ms a call over 2 hops of sender + receiver
    assert priced(16, 80) == pytest.approx((0.21888 * 0.84, 0.004 - 0.0015, 1.5 / 2 / 2))
    assert Calibration.from_json(calibration.to_json()) == calibration


def test_validate_probes_each_number_of_calls_its_cases_exchange_in():
    from islands.commands.validate import split_calls
    from islands.scenarios.loader import load

    flat = load("worked-example")
    split = [
        load("worked-example", ['exchange.calls="per_tensor"', f"exchange.tensors={tensors}"])
        for tensors in (80, 40, 80)
    ]
    assert split_calls([flat, *split]) == (40, 80)
    assert split_calls([flat]) == ()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["validate"], "give a scenario FILE or --suite"),
        (["validate", "worked-example", "--suite"], "give a scenario FILE or --suite"),
        (["validate", "worked-example", "--quick"], "--quick goes with --suite"),
        (["validate", "worked-example", "--workers", "9"], "--workers 9: must be 2 to 8"),
    ],
)
def test_bad_validate_arguments_get_one_line(argv, message, capsys):
    from islands.cli import main

    assert main(argv) == 2
    assert message in capsys.readouterr().err


@given(st.floats(0.05, 1.0), st.floats(0.05, 1.0), st.floats(1e6, 1e9))
def test_a_ratio_between_the_probed_rates_is_the_link_and_cpu_work_in_series(
    at_10, at_100, bits_per_s
):
    """1 / ratio is linear in the rate (time per byte: the link's plus CPU work per byte): between
    the probes it lies between their ratios, at a probe it is that probe's, outside the nearest's."""
    probed = {10e6: at_10, 100e6: at_100}
    ratio = in_series(probed, bits_per_s)
    if bits_per_s <= 10e6 or bits_per_s >= 100e6:
        assert ratio == probed[10e6 if bits_per_s <= 10e6 else 100e6]
    else:
        assert min(at_10, at_100) - 1e-12 <= ratio <= max(at_10, at_100) + 1e-12
        weight = (bits_per_s - 10e6) / 90e6
        assert 1 / ratio == pytest.approx((1 - weight) / at_10 + weight / at_100)


def test_each_suite_case_is_read_once_however_often_it_is_asked_for(monkeypatch):
    """``islands validate --suite`` asks for every case's scenario twice (the wire formats to
    calibrate, then the run): one read each."""
    from islands.scenarios import ScenarioSource
    from islands.validation import suite

    reads = []
    read = ScenarioSource.read

    def counted(*args, **kwargs):
        reads.append(args)
        return read(*args, **kwargs)

    monkeypatch.setattr(ScenarioSource, "read", counted)
    suite.case_scenario.cache_clear()
    first = [suite.case_scenario(case) for case in suite.CASES]
    again = [suite.case_scenario(case) for case in suite.CASES]
    assert len(reads) == len(suite.CASES) == 19
    assert all(a is b for a, b in zip(first, again))
    dense = {s.schedule.bits for s in first if s.schedule.compression == "none"}
    topk = {s.schedule.bits for s in first if s.schedule.compression == "topk"}
    assert (dense, topk) == ({8, 16, 32}, {2, 8})  # the dense formats are calibrated
    suite.case_scenario.cache_clear()


def test_the_suite_table_shows_a_missing_utilisation_as_a_dash():
    """A case whose run gives no compute utilisation (an incomplete run) is a row with "-" there,
    and the statistics come from the cases that have one (the table raised a TypeError on None)."""
    from islands.validation.compare import Comparison, Figure
    from islands.validation.suite import CASES, suite_table

    def comparison(util_measured):
        util_error = relative_error(0.5, util_measured)
        return Comparison(
            "c",
            [
                Figure("wall time", "s", 11.0, 10.0, relative_error(11.0, 10.0)),
                Figure("compute utilisation", "fraction", 0.5, util_measured, util_error),
                Figure("mean sync", "s", None, None, None),
            ],
            [],
        )

    table = suite_table([(CASES[0], comparison(0.4)), (CASES[1], comparison(None))])
    rows = [line.split() for line in table.splitlines()]
    assert rows[3][-5:] == [
        "50.0%",
        "-",
        "-",
        "-",
        "-",
    ]  # the second case: predicted 50%, the rest missing (its mean and worst sync too)
    assert rows[4][-2:] == ["10.0%", "25.0%"]  # median |error|: wall 11/10, utilisation 0.5/0.4
    assert table.count("25.0%") == 3  # the first case's utilisation error, and its median and worst


VALID_BITS_KEYS, BAD_BITS_KEYS = (
    st.sampled_from(["4", "8", "16", "32"]),
    st.sampled_from(["12", "0", "-8", "x", "8.0"]),
)
VALID_ISLANDS_KEYS, BAD_ISLANDS_KEYS = (
    st.sampled_from(["2", "3", "4"]),
    st.sampled_from(["1", "2.5", "", "a", "-3"]),
)
VALID_RATE_KEYS = st.sampled_from(
    ["5e7", "10000000.0", "100000000.0", "2.5e8"]
)  # one spelling per rate
BAD_RATE_KEYS = st.sampled_from(["0", "-5", "nan", "inf", "x"])
RATIOS = st.floats(0.05, 1.5)
NOT_RATIOS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-10, 10),
    st.booleans(),
    st.none(),
    st.text(max_size=3),
)
VALID_BY_BITS = st.dictionaries(
    VALID_BITS_KEYS,
    st.dictionaries(
        VALID_ISLANDS_KEYS,
        st.dictionaries(VALID_RATE_KEYS, RATIOS, min_size=1, max_size=3),
        min_size=1,
        max_size=3,
    ),
    max_size=4,
)
LEAVES = st.one_of(RATIOS, NOT_RATIOS)
RATES = st.one_of(
    st.dictionaries(st.one_of(VALID_RATE_KEYS, BAD_RATE_KEYS), LEAVES, max_size=3),
    LEAVES,
    st.lists(LEAVES, max_size=2),
)
BY_ISLANDS = st.one_of(
    st.dictionaries(st.one_of(VALID_ISLANDS_KEYS, BAD_ISLANDS_KEYS), RATES, max_size=3), LEAVES
)
ANY_BY_BITS = st.one_of(
    VALID_BY_BITS,
    st.dictionaries(st.one_of(VALID_BITS_KEYS, BAD_BITS_KEYS), BY_ISLANDS, max_size=3),
    LEAVES,
    st.lists(LEAVES, max_size=2),
)


def calibration_with_ratios_by_bits(by_bits):
    """``read_calibration`` of a saved calibration whose ``exchange_ratio_by_bits`` is ``by_bits``."""
    return calibration_with(exchange_ratio_by_bits=by_bits)


def calibration_with(**values):
    """``read_calibration`` of a saved calibration with these keys set to ``values``: the calibration,
    or the ``UserError``, and the file's path."""
    import tempfile
    from pathlib import Path

    from islands.errors import UserError
    from islands.validation.calibration_file import read_calibration

    base = Calibration(
        "kernel-htb-fq-cubic", "test", 0.958, (0.958,), {2: 0.004}, {2: {10e6: 0.92}}, {2: 0.0}
    )
    document = json.loads(base.to_json()) | values
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "calibration.json"
        path.write_text(json.dumps(document))
        try:
            return read_calibration(path), path
        except UserError as error:
            return error, path


@given(VALID_BY_BITS)
def test_a_saved_calibrations_ratios_by_wire_format_are_read_back_as_written(by_bits):
    calibration, _ = calibration_with_ratios_by_bits(by_bits)
    assert calibration.exchange_ratio_by_bits == {
        int(bits): {
            int(m): {float(rate): ratio for rate, ratio in by_rate.items()}
            for m, by_rate in by_m.items()
        }
        for bits, by_m in by_bits.items()
    }


@given(ANY_BY_BITS)
def test_any_exchange_ratio_by_bits_is_read_as_physical_ratios_or_refused_in_one_line(by_bits):
    """The per-wire-format ratios of a saved calibration, whatever a user or an old file put there:
    every ratio the reader keeps is of a wire format, 2 islands or more, a probed rate and above 0,
    all finite; anything else is one ``UserError`` line naming the file (never another exception)."""
    from islands.errors import UserError
    from islands.trainer.exchange.quantize import WIRE_BITS

    calibration, path = calibration_with_ratios_by_bits(by_bits)
    if isinstance(calibration, UserError):
        assert str(calibration).startswith(str(path)) and "\n" not in str(calibration)
        return
    for bits, by_islands in calibration.exchange_ratio_by_bits.items():
        assert bits in WIRE_BITS
        for islands, by_rate in by_islands.items():
            assert islands >= 2 and by_rate
            assert all(
                0 < rate < math.inf and 0 < ratio < math.inf for rate, ratio in by_rate.items()
            )


@pytest.mark.parametrize(
    "weights_broadcast, expected", [(True, 4_000 - 3 / 4 * 4 * 1_000), (False, 4_000)]
)
def test_interface_bytes_less_the_start_up_broadcast_only_where_the_run_made_one(
    weights_broadcast, expected
):
    """Four islands sent 5, 5, 1 (it died) and 5 kB: 4 kB each on average. A run that broadcast the
    1,000 fp32 weights at its start sent 3/4 x 4 kB of that per island; the elastic trainer builds
    every island from the seed and broadcasts nothing (subtracting it read 34% low at M = 4)."""
    import pandas as pd

    from islands.validation.run import Measured, interface_bytes_per_worker

    measured = Measured(
        {},
        pd.DataFrame(),
        {"algorithm": "diloco", "parameters": 1_000},
        [5_000, 5_000, 1_000, 5_000],
        "kernel",
        weights_broadcast,
    )
    assert interface_bytes_per_worker(measured) == pytest.approx(expected)


CALL_COSTS = st.one_of(
    st.dictionaries(
        st.one_of(
            st.sampled_from(["2", "3", "4", "17"]),
            st.sampled_from(["1", "0", "-2", "x", "2.5", ""]),
        ),
        st.one_of(
            st.floats(allow_nan=True, allow_infinity=True),
            st.integers(-(10**400), 10**400),
            st.text(max_size=3),
            st.none(),
            st.booleans(),
            st.lists(st.floats(), max_size=2),
        ),
        max_size=4,
    ),
    st.floats(),
    st.text(max_size=3),
    st.none(),
    st.lists(st.integers(), max_size=2),
)


@given(CALL_COSTS)
def test_any_saved_call_cost_is_read_as_seconds_by_islands_or_refused_in_one_line(call_s):
    """A saved calibration's ``call_s`` (one more collective call's seconds, by number of islands),
    whatever a user or an old file put there: kept only as finite seconds >= 0 for 2 islands or more,
    else one ``UserError`` line naming the file."""
    from islands.errors import UserError

    calibration, path = calibration_with(call_s=call_s)
    if isinstance(calibration, UserError):
        assert str(calibration).startswith(str(path)) and "\n" not in str(calibration)
        return
    assert all(
        islands >= 2 and 0 <= seconds < math.inf for islands, seconds in calibration.call_s.items()
    )


def test_a_saved_calibration_with_a_number_past_floats_range_or_a_list_for_a_cost_is_refused_in_one_line(
    tmp_path,
):
    """Found by the property above: ``math.isfinite`` of a 309-digit integer raised OverflowError
    instead of one line, and an empty list for a number of islands' cost was read as a cost."""
    from islands.errors import UserError
    from islands.validation.calibration_file import read_calibration

    base = Calibration(
        "kernel-htb-fq-cubic", "test", 0.958, (0.958,), {2: 0.004}, {2: {10e6: 0.92}}, {2: 0.0}
    )
    for digits, message in (
        (310, r"call_s\.2 must be a finite number, 0 or more \(got an integer of 310 digits\)"),
        (5001, r"not valid JSON \(Exceeds the limit \(4300 digits\)"),
    ):
        document = json.loads(base.to_json()) | {"call_s": {"2": "HUGE"}}
        (tmp_path / "calibration.json").write_text(
            json.dumps(document).replace('"HUGE"', "1" + "0" * (digits - 1))
        )
        with pytest.raises(UserError, match=message):
            read_calibration(tmp_path / "calibration.json")
    for key in ("call_s", "overhead_s"):
        (tmp_path / "calibration.json").write_text(
            json.dumps(json.loads(base.to_json()) | {key: {"2": []}})
        )
        with pytest.raises(
            UserError, match=rf"{key}\.2 must be a finite number, 0 or more \(got \[\]\)"
        ):
            read_calibration(tmp_path / "calibration.json")
