"""Units chosen from the magnitude of the numbers shown: text cells and plot axes alike."""

from __future__ import annotations

from islands.tables import RATE_UNITS, rate_unit
from islands.tables import rate as rate_text

__all__ = ["RATE_UNITS", "count_text", "percent_text", "rate_text", "rate_unit", "time_unit"]

# (name, seconds), largest first; a span is shown in the largest unit it covers at least twice
TIME_UNITS = (("days", 86400.0), ("hours", 3600.0), ("minutes", 60.0), ("seconds", 1.0))


def time_unit(span_s: float) -> tuple[str, float]:
    """The unit for an axis spanning ``span_s`` seconds: 90 s -> seconds, 2 h -> minutes, 5 h -> hours."""
    for name, seconds in TIME_UNITS:
        if span_s >= 2 * seconds:
            return name, seconds
    return TIME_UNITS[-1]


def percent_text(fraction: float | None) -> str:
    """0.533%, 72.8%, 100%; "cut short" for the null utilisation of a run that did not finish."""
    return "cut short" if fraction is None else f"{100 * fraction:.3g}%"


def count_text(count: float) -> str:
    """10e9 -> 10B, 350e6 -> 350M, 1200 -> 1.2k."""
    for suffix, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if count >= scale:
            return f"{count / scale:.3g}{suffix}"
    return f"{count:.3g}"
