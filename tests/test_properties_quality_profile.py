"""Generated bad quality profiles (``--profile FILE`` of ``islands quality`` and ``islands plan``, what
``islands quality --grid --save`` writes): a valid profile drawn (points of the schedules compared
with DDP at several H, M, bits and fragments), changed at one place (``helpers/mutations.py``) or cut
at any byte. Each is read, or refused in one line naming the file; one that reads prices every
schedule of a scenario (``loss_prior.estimate``) without an error, and ``islands quality`` answers 0
or 2 in one line, never a traceback."""

from __future__ import annotations

import contextlib
import io
import json
import math
from typing import Any

import pytest
from helpers.mutations import answer, cuts, json_text, mutated
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from islands.analysis.quality.loss_prior import estimate
from islands.analysis.quality.quality_profile import COMPARED, QualityProfile
from islands.cli import main
from islands.errors import UserError
from islands.scenarios import load
from islands.schedules import SCHEDULES

FIXTURES = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
SCENARIO = "worked-example"


@st.composite
def profiles(draw) -> dict[str, Any]:
    """A profile as ``QualityProfile.to_json`` writes one: 1 to 6 points, each setting once."""
    settings = draw(
        st.lists(
            st.tuples(
                st.sampled_from(COMPARED),
                st.sampled_from((10, 30, 100)),
                st.sampled_from((2, 4, 8)),
                st.sampled_from((16, 8)),
                st.sampled_from((1, 2)),
            ),
            min_size=1,
            max_size=6,
            unique=True,
        )
    )
    points = [
        {
            "algorithm": algorithm,
            "inner_steps": h,
            "workers": m,
            "bits": bits,
            "fragments": fragments,
            "steps": 300,
            "eval_loss": draw(st.sampled_from((3.9, 4.0, 4.2))),
            "ddp_eval_loss": 4.0,
            "outer_lr": draw(st.sampled_from((None, 0.7))),
        }
        for algorithm, h, m, bits, fragments in settings
    ]
    return {
        "scenario": "drawn",
        "model_parameters": draw(st.sampled_from((120_576, 10**9))),
        "points": points,
    }


def priced(profile: QualityProfile) -> None:
    """Every schedule of the worked example priced with the profile: finite losses."""
    scenario = load(SCENARIO)
    for name in SCHEDULES:
        assert math.isfinite(estimate(scenario, name, profile).loss)


def quality_answers(path) -> None:
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(["quality", SCENARIO, "--profile", str(path)])
    assert code in (0, 2) and len(err.getvalue().splitlines()) == (code == 2), err.getvalue()


@given(profiles(), st.data())
@FIXTURES
def test_a_profile_changed_at_one_place_is_read_or_refused_naming_it(tmp_path, document, data):
    changed, what = data.draw(mutated(document))
    path = tmp_path / "profile.json"
    path.write_text(json_text(changed))
    profile = answer(lambda: QualityProfile.read(path), path)
    if profile is not None:
        priced(profile)
    quality_answers(path)


@given(profiles())
@FIXTURES
def test_a_drawn_profile_reads_back_as_written(tmp_path, document):
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(document))
    profile = QualityProfile.read(path)
    assert json.loads(profile.to_json()) == document
    priced(profile)


def test_a_profile_cut_at_any_byte_is_refused_naming_it(tmp_path):
    document = {
        "scenario": "toy",
        "model_parameters": 120_576,
        "points": [
            {
                "algorithm": "diloco",
                "inner_steps": 10,
                "workers": 2,
                "bits": 16,
                "fragments": 1,
                "steps": 300,
                "eval_loss": 4.01,
                "ddp_eval_loss": 4.0,
                "outer_lr": None,
            },
            {
                "algorithm": "streaming",
                "inner_steps": 30,
                "workers": 4,
                "bits": 8,
                "fragments": 2,
                "steps": 300,
                "eval_loss": 4.05,
                "ddp_eval_loss": 4.0,
                "outer_lr": 0.7,
            },
        ],
    }
    data = json.dumps(document, indent=2).encode() + b"\n"
    path = tmp_path / "profile.json"
    for length in cuts(len(data)):
        path.write_bytes(data[:length])
        read = answer(lambda: QualityProfile.read(path), path)
        assert read is None or not data[length:].strip(), length


# --- the failures these suites found, each as its shrunk case -------------------------------------

POINT = {
    "algorithm": "diloco",
    "inner_steps": 10,
    "workers": 2,
    "bits": 16,
    "fragments": 1,
    "steps": 300,
    "eval_loss": 4.01,
    "ddp_eval_loss": 4.0,
}


@pytest.mark.parametrize(
    "change, message",
    [
        ({"model_parameters": 0}, "model_parameters: must be a whole number >= 1 (got 0)"),
        ({"model_parameters": -5}, "model_parameters: must be a whole number >= 1 (got -5)"),
        ({"model_parameters": "5"}, "model_parameters: must be a whole number >= 1 (got '5')"),
        (
            {"points": [{**POINT, "algorithm": "dilocco"}]},
            "points.0.algorithm: must be a schedule compared with DDP",
        ),
        (
            {"points": [{**POINT, "algorithm": "ddp"}]},
            "points.0.algorithm: must be a schedule compared with DDP",
        ),
        (
            {"points": [POINT, {**POINT, "eval_loss": 4.5}]},
            "points.1: measures diloco at H = 10, M = 2, 16 bits, 1 "
            "fragments, as points.0 does: each setting once",
        ),
        (
            {"points": [{**POINT, "workers": True}]},
            "points.0.workers: must be a whole number, 1 to",
        ),
        (
            {"points": [{**POINT, "bits": 7}]},
            "points.0.bits: a wire format is one of 32, 16, 8, 4 bits (got 7)",
        ),
        (
            {"points": [{**POINT, "bits": "\x85"}]},
            "points.0.bits: a wire format is one of 32, 16, 8, 4 bits (got '\\x85')",
        ),
        (
            {"points": [{**POINT, "bits": 16.0}]},
            "points.0.bits: a wire format is one of 32, 16, 8, 4 bits (got 16.0)",
        ),
        (
            {"points": [{**POINT, "steps": 25}]},
            "points.0.steps: 25 steps do not end on an outer step of 10",
        ),
        ({"points": [{**POINT, "eval_los": 4.0}]}, "points.0: must hold algorithm"),
    ],
)
def test_a_profile_the_fuzzing_found_wrong_is_refused_naming_the_key(tmp_path, change, message):
    """Were read before: a size of 0 divided by zero in the estimate, a negative size, an unknown or
    DDP algorithm and two points at one setting (the later silently ignored) were priced; counts of
    text ("5"), a float 16.0 as bits; a control character in bits split the one line (this suite's
    first fuzzing of its own fix)."""
    path = tmp_path / "p.json"
    path.write_text(
        json.dumps({"scenario": "toy", "model_parameters": 120_576, "points": [POINT], **change})
    )
    with pytest.raises(UserError) as refused:
        QualityProfile.read(path)
    assert str(refused.value).startswith(f"{path}: ") and message in str(refused.value), (
        refused.value
    )
