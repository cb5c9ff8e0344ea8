"""Interpolation shared by calibrations and measured profiles: linear in log x or in x, never
extrapolated."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TypeVar

X = TypeVar("X", bound=float)  # the given x: floats, or whole numbers (a profile's H)


def log_linear(by_x: Mapping[X, float], x: X) -> tuple[float, X | None]:
    """The value at ``x``: linear in log x between the two nearest given x, or the nearest given x's
    value outside them; and that nearest x when ``x`` was outside (None when inside)."""
    return interpolated(by_x, x, lambda low, high: math.log(x / low) / math.log(high / low))


def linear(by_x: Mapping[X, float], x: X) -> float:
    """The value at ``x``: linear in x between the two nearest given x, or the nearest given x's value
    outside them."""
    return interpolated(by_x, x, lambda low, high: (x - low) / (high - low))[0]


def interpolated(
    by_x: Mapping[X, float], x: X, weight: Callable[[float, float], float]
) -> tuple[float, X | None]:
    """The value at ``x`` between the two nearest given x, ``low`` and ``high``, at ``weight(low, high)``
    of the way from low's value to high's; outside them the nearest given x's value, and that x."""
    known = sorted(by_x)
    if x in by_x:
        return by_x[x], None
    if x < known[0] or x > known[-1]:
        nearest = known[0] if x < known[0] else known[-1]
        return by_x[nearest], nearest
    low = max(k for k in known if k < x)
    high = min(k for k in known if k > x)
    return by_x[low] + weight(low, high) * (by_x[high] - by_x[low]), None
