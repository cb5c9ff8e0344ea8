"""What counts as a number, in one place: every check of a value read from a file, a command line or
the Python API goes through these.

A boolean is never a number (Python makes ``True`` an int, JSON and TOML do not), and an integer past
float's range (``10**400``) is not a finite number: ``float()`` of it raises ``OverflowError``, which
these checks answer with False. None of them raises, whatever the value; tests/test_numbers.py holds
them to a reference definition and keeps the hand-written forms out of the rest of the source.
"""

from __future__ import annotations

import math
from typing import Any, TypeGuard


def is_number(value: Any) -> TypeGuard[int | float]:
    """An int or a float, not a bool; NaN and the infinities count."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_whole_number(value: Any) -> bool:
    """An int, not a bool (a float such as 2.0 is not)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_finite_number(value: Any) -> TypeGuard[float]:
    """A number that is finite as a float (an integer past float's range is not)."""
    if not is_number(value):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def is_positive_number(value: Any) -> bool:
    """A finite number > 0."""
    return is_finite_number(value) and value > 0


def is_non_negative_number(value: Any) -> bool:
    """A finite number >= 0."""
    return is_finite_number(value) and value >= 0


def is_number_between(value: Any, low: float, high: float) -> bool:
    """A finite number from ``low`` to ``high``, both included."""
    return is_finite_number(value) and low <= value <= high
