"""islands/numbers.py: the number checks never raise and agree with a reference definition written
here another way, and the hand-written forms they replaced stay out of the rest of the source."""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path

import pytest
from helpers.scenarios import make_scenario
from hypothesis import given
from hypothesis import strategies as st

from islands.emulation.link_specs import Shaper
from islands.errors import UserError
from islands.numbers import (
    is_finite_number,
    is_non_negative_number,
    is_number,
    is_number_between,
    is_positive_number,
    is_whole_number,
)
from islands.trainer.runtime.spec import SPEC_VARIABLE, launch_spec
from islands.validation.external import measured_step_overrides
from islands.validation.run_folder import FIGURE_KEYS, check_figures

ROOT = Path(__file__).resolve().parents[1]

# float(n) of an integer rounds to the nearest float; from the midpoint between the largest float,
# (2 - 2**-52) * 2**1023, and 2**1024 it rounds to 2**1024, past float's range (OverflowError)
FIRST_INTEGER_PAST_FLOAT = 2**1024 - 2**970

INTEGERS = st.one_of(
    st.integers(-(10**400), 10**400),
    st.sampled_from([FIRST_INTEGER_PAST_FLOAT - 1, FIRST_INTEGER_PAST_FLOAT, 10**400, 0]),
    st.sampled_from([FIRST_INTEGER_PAST_FLOAT - 1, FIRST_INTEGER_PAST_FLOAT]).map(lambda n: -n),
)
SCALARS = st.one_of(
    INTEGERS,
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.text(max_size=5),
    st.none(),
    st.binary(max_size=3),
)
VALUES = st.one_of(
    SCALARS,
    st.lists(SCALARS, max_size=3),
    st.dictionaries(st.text(max_size=2), SCALARS, max_size=2),
)


def reference_is_finite(value: object) -> bool:
    """By type, as JSON and TOML mean it: an int within float's range or a finite float."""
    if type(value) is int:
        return abs(value) < FIRST_INTEGER_PAST_FLOAT
    return type(value) is float and value - value == 0  # inf - inf and nan - nan are nan


@given(VALUES, st.floats(allow_nan=False), st.floats(allow_nan=False))
def test_the_checks_never_raise_and_agree_with_the_reference(value, low, high):
    finite = reference_is_finite(value)
    assert is_number(value) == (type(value) in (int, float))
    assert is_whole_number(value) == (type(value) is int)
    assert is_finite_number(value) == finite
    assert is_positive_number(value) == (finite and value > 0)
    assert is_non_negative_number(value) == (finite and value >= 0)
    assert is_number_between(value, low, high) == (finite and low <= value <= high)


@pytest.mark.parametrize(
    "value, number, whole, finite",
    [
        (True, False, False, False),  # JSON's true is not 1
        (2, True, True, True),
        (2.0, True, False, True),
        (10**400, True, True, False),  # float(10**400) raises OverflowError
        (-(10**400), True, True, False),
        (2**1023, True, True, True),
        (math.nan, True, False, False),
        (-math.inf, True, False, False),
        ("2", False, False, False),
        (None, False, False, False),
        ([2], False, False, False),
    ],
)
def test_each_kind_of_value(value, number, whole, finite):
    assert (is_number(value), is_whole_number(value), is_finite_number(value)) == (
        number,
        whole,
        finite,
    )


def test_the_bounds_are_included_and_zero_is_not_positive():
    assert is_number_between(1, 1, 2000) and is_number_between(2000.0, 1, 2000)
    assert not is_number_between(2000.5, 1, 2000) and not is_number_between(True, 0, 2)
    assert (
        is_non_negative_number(0)
        and is_non_negative_number(-0.0)
        and not is_non_negative_number(-1e-300)
    )
    assert not is_positive_number(0) and is_positive_number(5e-324)


# Regressions: each check below raised OverflowError (a traceback) on an integer past float's range
# before it went through islands/numbers.py.


def test_regression_run_folder_is_number_of_10_to_the_400_is_one_line():
    """validation/run_folder.is_number(10**400) raised: math.isfinite of the int overflowed."""
    summary = {key: 1.0 for key in FIGURE_KEYS} | {
        "compute_utilisation": 0.5,
        "wall_time_s": 10**400,
    }
    with pytest.raises(UserError) as refused:
        check_figures(summary, Path("run/summary.json"))
    assert (
        str(refused.value)
        == "run/summary.json: 'wall_time_s' must be a finite number (got an integer of 401 digits)"
    )


def test_regression_a_shaper_depth_of_10_to_the_400_is_a_user_error():
    with pytest.raises(UserError, match=r"^queue depth 1000+ ms: must be 1 to 2000 ms$"):
        Shaper("fifo", 10**400)


def test_regression_a_launch_join_time_of_10_to_the_400_is_one_line():
    with pytest.raises(UserError, match=r"^ISLANDS_LAUNCH: join_at_s = 1000+ is not valid$"):
        launch_spec({SPEC_VARIABLE: json.dumps({"join_at_s": 10**400})})


def test_regression_a_measured_compute_time_of_10_to_the_400_is_one_line():
    summary = {"islands": [{"name": "a", "compute_s": 10**400, "inner_steps": 300}]}
    with pytest.raises(UserError) as refused:
        measured_step_overrides(summary, make_scenario(), "run/summary.json")
    assert str(refused.value) == (
        "run/summary.json: island 'a': compute_s and inner_steps must be finite and 0 or "
        "more (got an integer of 401 digits and 300)"
    )


# The hand-written forms islands/numbers.py replaced. A check of a value from a file, a command line
# or the Python API goes through it; these patterns elsewhere are how the OverflowError came back.
NUMBERS_MODULE = ROOT / "islands" / "numbers.py"
MATH_CHECKS = {"isfinite", "isnan", "isinf"}
# (file name, function): math checks on floats the code itself computed, kept with the reason
ALLOWED = {
    # NaN, not infinity, is what numpy leaves in the hop table for two regions joined by no backbone;
    # in simulator/, which its restructuring owns
    ("topology.py", "slowest_hop_s"),
}


def type_names(node: ast.expr) -> set[str]:
    elements = node.elts if isinstance(node, ast.Tuple) else [node]
    return {
        element.id if isinstance(element, ast.Name) else ast.unparse(element)
        for element in elements
    }


def isinstance_types(node: ast.AST) -> set[str] | None:
    is_call = (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "isinstance"
    )
    return type_names(node.args[1]) if is_call and len(node.args) == 2 else None


def hand_written_check(node: ast.AST) -> str | None:
    """What ``node`` writes by hand that islands/numbers.py holds, or None."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in MATH_CHECKS
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "math"
    ):
        return f"math.{node.func.attr}: is_finite_number"
    if isinstance_types(node) == {"int", "float"}:
        return "isinstance(_, (int, float)): is_number"
    if isinstance(node, ast.BoolOp):
        kinds = [kind for part in ast.walk(node) if (kind := isinstance_types(part)) is not None]
        if {"bool"} in kinds and any(kind & {"int", "float"} for kind in kinds):
            return "isinstance(_, bool) beside isinstance(_, int): is_whole_number or is_number"
        if any(
            isinstance(value, ast.UnaryOp)
            and isinstance(value.op, ast.Not)
            and isinstance_types(value.operand) == {"bool"}
            for value in node.values
        ):
            return "'not isinstance(_, bool)' in a condition: is_number or is_whole_number"
    return None


def found_checks(path: Path) -> list[tuple[str, str, int, str]]:
    """(file name, enclosing function, line, what) for each hand-written check in ``path``."""
    found = []

    def visit(node: ast.AST, function: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = node.name
        if (what := hand_written_check(node)) is not None:
            found.append((path.name, function, node.lineno, what))
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(ast.parse(path.read_text(encoding="utf-8")), "")
    return found


def source_paths() -> list[Path]:
    """The project's Python files outside the tests (hidden and build folders left out)."""
    skipped = {"tests", "build", "dist", "site"}
    return [
        path
        for path in sorted(ROOT.rglob("*.py"))
        if not any(
            part.startswith(".") or part.endswith(".egg-info") or part in skipped
            for part in path.relative_to(ROOT).parts
        )
    ]


def test_the_scan_finds_each_hand_written_form():
    assert {what.split(":")[0] for *_, what in found_checks(NUMBERS_MODULE)} == {
        "math.isfinite",
        "isinstance(_, (int, float))",
        "isinstance(_, bool) beside isinstance(_, int)",
    }
    sample = ast.parse("def f(v):\n    return v is None or (not isinstance(v, bool) and v >= 1)\n")
    assert [hand_written_check(node) for node in ast.walk(sample) if hand_written_check(node)] == [
        "'not isinstance(_, bool)' in a condition: is_number or is_whole_number"
    ]


def test_no_number_check_is_written_by_hand_outside_islands_numbers():
    paths = source_paths()
    assert NUMBERS_MODULE in paths and len({path.parts[len(ROOT.parts)] for path in paths}) >= 9
    found = [check for path in paths if path != NUMBERS_MODULE for check in found_checks(path)]
    allowed_seen = {
        (name, function) for name, function, _, _ in found if (name, function) in ALLOWED
    }
    assert allowed_seen == ALLOWED, "an allowed entry no longer matches: remove it"
    left = [
        f"{name}:{line} in {function}(): {what}"
        for name, function, line, what in found
        if (name, function) not in ALLOWED
    ]
    assert left == [], "\n".join(left)
