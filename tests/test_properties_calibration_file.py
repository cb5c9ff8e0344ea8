"""Generated bad calibration files (``islands validate --calibration FILE``, what it saved before): a
valid calibration drawn (2 to 4 islands, rates probed, the optional tables or not), changed at one
place (``helpers/mutations.py``) or cut at any byte. Each is read, or refused in one line naming the
file; one that reads answers every question validate asks of it (its coverage, ratios, spreads and
buckets at any rate) without an error."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from helpers.mutations import answer, cuts, json_text, mutated
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from islands.emulation import InProcessShaper
from islands.errors import UserError
from islands.validation.calibration import Calibration
from islands.validation.calibration_file import read_calibration

FIXTURES = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
RATES = (1e7, 1e8)


@st.composite
def calibrations(draw) -> dict[str, Any]:
    islands = range(2, draw(st.integers(2, 4)) + 1)
    by_rate = st.fixed_dictionaries({rate: st.sampled_from((0.5, 0.9, 1.0)) for rate in RATES})
    calibration = Calibration(
        InProcessShaper.mode,
        "drawn",
        1.0,
        (1.0, 0.98),
        {m: draw(st.sampled_from((0.0, 0.01))) for m in islands},
        {m: draw(by_rate) for m in islands},
        {m: draw(st.sampled_from((0.0, 1e-8))) for m in islands},
        end_spread_s={m: {1e7: 0.002} for m in islands} if draw(st.booleans()) else {},
        burst_fraction={m: {1e7: 0.5} for m in islands} if draw(st.booleans()) else {},
        exchange_ratio_by_bits={8: {m: draw(by_rate) for m in islands}}
        if draw(st.booleans())
        else {},
        call_s={m: 0.001 for m in islands} if draw(st.booleans()) else {},
        exchange_ratio_by_calls={40: {m: draw(by_rate) for m in islands}}
        if draw(st.booleans())
        else {},
    )
    return json.loads(calibration.to_json())


def asked(calibration: Calibration) -> None:
    """What validate asks: the numbers of islands covered, then each table at rates in and out of the probed."""
    for islands in calibration.overhead_s:
        try:
            calibration.check_covers(islands)
        except UserError:
            continue
        for rate in (1e6, 3e7, 1e9):
            for value in (
                calibration.ratio_at(islands, rate),
                calibration.ratio_at(islands, rate, 8),
                calibration.ratio_at(islands, rate, 16, 40),
                calibration.ratio_at(islands, rate, 8, 40),
                calibration.spread_at(islands, rate),
                calibration.burst_bytes(islands, rate, rate),
            ):
                assert math.isfinite(value) and value >= 0


@given(calibrations(), st.data())
@FIXTURES
def test_a_calibration_changed_at_one_place_is_read_or_refused_naming_it(tmp_path, document, data):
    changed, what = data.draw(mutated(document))
    path = tmp_path / "calibration.json"
    path.write_text(json_text(changed))
    calibration = answer(lambda: read_calibration(path), path)
    if calibration is not None:
        asked(calibration)


@given(calibrations())
@FIXTURES
def test_a_drawn_calibration_reads_back_as_written(tmp_path, document):
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(document))
    calibration = read_calibration(path)
    assert json.loads(calibration.to_json()) == document
    asked(calibration)


def test_a_calibration_cut_at_any_byte_is_refused_naming_it(tmp_path):
    calibration = Calibration(
        InProcessShaper.mode,
        "cut",
        1.0,
        (1.0,),
        {2: 0.01},
        {2: {1e7: 0.9, 1e8: 0.8}},
        {2: 1e-8},
        end_spread_s={2: {1e7: 0.002}},
        call_s={2: 0.001},
        exchange_ratio_by_calls={40: {2: {1e7: 0.93}}},
    )
    data = calibration.to_json().encode()
    path = tmp_path / "calibration.json"
    for length in cuts(len(data)):
        path.write_bytes(data[:length])
        read = answer(lambda: read_calibration(path), path)
        assert read is None or (not data[length:].strip() and read == calibration), length


# --- the failures these suites found, each as its shrunk case -------------------------------------


@pytest.mark.parametrize(
    "change, message",
    [
        (
            {"overhead_s": {"2": 0.01, "02": 0.02}},
            "overhead_s: the number of islands 2 is written twice ('2' and '02')",
        ),
        (
            {"exchange_ratio": {"2": {"1e7": 0.9, "10000000": 0.8}}},
            "exchange_ratio.2: the rate 1e+07 is written twice ('1e7' and '10000000')",
        ),
        (
            {"exchange_ratio_by_calls": {"1": {"2": {"1e7": 0.9}}}},
            "exchange_ratio_by_calls.1.2: give ratios by 2 calls or more",
        ),
        (
            {"exchange_ratio_by_calls": {"40": {"2": {"1e7": 0}}}},
            "exchange_ratio_by_calls.40.2.1e7 must be a finite number, 0.001 or more (got 0)",
        ),
    ],
)
def test_a_calibration_the_fuzzing_found_wrong_is_refused_naming_it(tmp_path, change, message):
    """Were read before, one of the two values winning silently."""
    document = json.loads(
        Calibration(
            InProcessShaper.mode, "x", 1.0, (1.0,), {2: 0.01}, {2: {1e7: 0.9}}, {2: 1e-8}
        ).to_json()
    )
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps({**document, **change}))
    with pytest.raises(UserError) as refused:
        read_calibration(path)
    assert str(refused.value).startswith(f"{path}: ") and message in str(refused.value), (
        refused.value
    )


def test_a_ratio_too_small_to_be_a_measurement_is_refused_not_priced_at_infinite_time(tmp_path):
    """Shrunk by the fuzz profile: an exchange ratio of 1e-320 passed "above 0", and the rate
    between two probed ones came out 1 / inf: NaN in every figure priced from it."""
    calibration = Calibration(
        InProcessShaper.mode, "tiny", 1.0, (1.0,), {2: 0.0}, {2: {1e7: 1e-320, 1e8: 0.5}}, {2: 0.0}
    )
    path = tmp_path / "calibration.json"
    path.write_text(calibration.to_json())
    with pytest.raises(
        UserError,
        match=r"exchange_ratio\.2\.10000000\.0 must be a finite number, 0\.001 or more \(got 1e-320\)",
    ):
        read_calibration(path)
