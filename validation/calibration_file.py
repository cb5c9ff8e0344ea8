"""A calibration saved by ``islands validate`` (``--calibration FILE``), read back checked.

It is read before any measuring or training, so a broken file, a folder, a network profile (what
``islands calibrate`` writes, for ``--network-profile``) or a value outside its physical range is
refused in one line naming the file and the key, never after a run, never as a traceback; so is a
calibration of a shaper this version no longer builds (``kernel-tbf``; ``kernel-htb``, one FIFO
per direction, before issue 29's third round; ``islands validate`` also refuses one measured under
another shaper than the run's, ``--shaper``). A value
saved as null (``io.json_text`` writes a NaN so) is refused as not a number.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from islands.emulation import InProcessShaper
from islands.emulation.link_specs import is_kernel_mode
from islands.errors import UserError
from islands.io import read_bounded_json
from islands.numbers import is_finite_number
from islands.scenarios.spec import shown_value
from islands.trainer.exchange.quantize import WIRE_BITS

from .calibration import Calibration

PROFILE_KIND = "islands network profile"  # scenarios/profile.py's KIND
REQUIRED = (
    "mode",
    "label",
    "link_ratio",
    "link_ratios",
    "overhead_s",
    "exchange_ratio",
    "exchange_cpu_s_per_value",
)
# measured later than the others: absent from older files
OPTIONAL = (
    "end_spread_s",
    "burst_fraction",
    "exchange_ratio_by_bits",
    "call_s",
    "exchange_ratio_by_calls",
)
ISLAND_TABLES = ("overhead_s", "exchange_cpu_s_per_value", "call_s")  # by number of islands
RATE_TABLES = (
    "exchange_ratio",
    "end_spread_s",
    "burst_fraction",
)  # by number of islands, then by rate
# each key's shape (``leaves``): the keys of its levels of objects, down to its numbers
LEVELS: dict[str, tuple[str, ...]] = {
    "link_ratio": (),
    "link_ratios": ("list",),
    "overhead_s": ("number of islands",),
    "exchange_cpu_s_per_value": ("number of islands",),
    "call_s": ("number of islands",),
    "exchange_ratio": ("number of islands", "rate"),
    "end_spread_s": ("number of islands", "rate"),
    "burst_fraction": ("number of islands", "rate"),
    "exchange_ratio_by_bits": ("bits", "number of islands", "rate"),
    "exchange_ratio_by_calls": ("number of calls", "number of islands", "rate"),
}
KEY_RULES = {
    "number of islands": "whole number of islands",
    "bits": "whole number of bits",
    "number of calls": "whole number of calls",
    "rate": "finite rate in bits/s",
}
# A measured share of a link's rate below this is not a measurement of the link (a stalled probe);
# 1e-320 used to pass as "above 0" and price a transfer at an infinite time (NaN in every figure).
MIN_RATIO = 1e-3
RATIO_RULE = (f"{MIN_RATIO:g} or more", lambda value: value >= MIN_RATIO)
# what each key's numbers must be, in words and as a test of a finite float
RULES: dict[str, tuple[str, Callable[[float], bool]]] = {
    "link_ratio": RATIO_RULE,
    "link_ratios": RATIO_RULE,
    "overhead_s": ("0 or more", lambda value: value >= 0),
    "exchange_ratio": RATIO_RULE,
    "exchange_cpu_s_per_value": ("0 or more", lambda value: value >= 0),
    "end_spread_s": ("0 or more", lambda value: value >= 0),
    "burst_fraction": ("0 to 1", lambda value: 0 <= value <= 1),
    "exchange_ratio_by_bits": RATIO_RULE,
    "call_s": ("0 or more", lambda value: value >= 0),
    "exchange_ratio_by_calls": RATIO_RULE,
}


def read_calibration(path: Path) -> Calibration:
    """The calibration in ``path``, or one ``UserError`` naming the file and what is wrong."""
    document = parse(path)
    if document.get("kind") == PROFILE_KIND:
        raise UserError(
            f"{path}: is a network profile (islands calibrate writes it for --network-profile), not a "
            "calibration: --calibration takes the calibration.json islands validate writes"
        )
    missing = [key for key in REQUIRED if key not in document]
    unknown = sorted(set(document) - set(REQUIRED) - set(OPTIONAL))
    if missing or unknown:
        problem = f"no {', '.join(missing)}" if missing else f"unknown key {', '.join(unknown)}"
        raise UserError(f"{path}: {problem}: not a calibration islands validate wrote")
    for key, (rule, holds) in RULES.items():
        for where, value in leaves(document.get(key, {}), LEVELS[key], key, path):
            if not (is_finite_number(value) and holds(value)):
                raise UserError(
                    f"{path}: {where} must be a finite number, {rule} (got {shown_value(value)})"
                )
    if not all(isinstance(document[key], str) for key in ("mode", "label")):
        raise UserError(f"{path}: mode and label must be text")
    if not (is_kernel_mode(document["mode"]) or document["mode"] == InProcessShaper.mode):
        raise UserError(
            f"{path}: measured with {document['mode']} shaping, which this version no longer builds: "
            "give --calibration a new file"
        )
    try:
        calibration = Calibration.from_json(json.dumps(document))
    except (
        ValueError,
        TypeError,
        AttributeError,
    ) as error:  # a key that is no number of islands or rate
        raise UserError(f"{path}: not a calibration islands validate wrote ({error})") from None
    check_keys(calibration, path)
    return calibration


def check_keys(calibration: Calibration, path: Path) -> None:
    """Numbers of islands 2 or more (each with one number in ``ISLAND_TABLES``, ``leaves`` checked),
    each with its values by rate in ``RATE_TABLES``: rates above 0 and finite, at least one."""
    for key in ISLAND_TABLES + RATE_TABLES:
        for islands, by_rate in getattr(calibration, key).items():
            if islands < 2:
                raise UserError(f"{path}: {key}.{islands}: an exchange has 2 islands or more")
            if key in RATE_TABLES and not probed(by_rate):
                raise UserError(
                    f"{path}: {key}.{islands}: give its values by probed rates, in bits/s above 0"
                )
    for bits, by_islands in calibration.exchange_ratio_by_bits.items():
        if bits not in WIRE_BITS:
            raise UserError(
                f"{path}: exchange_ratio_by_bits.{bits}: a wire format is one of "
                f"{', '.join(map(str, WIRE_BITS))} bits"
            )
        for islands, by_rate in by_islands.items():
            if islands < 2 or not probed(by_rate):
                raise UserError(
                    f"{path}: exchange_ratio_by_bits.{bits}.{islands}: give ratios by 2 islands or "
                    "more, then by probed rates in bits/s above 0"
                )
    for calls, by_islands in calibration.exchange_ratio_by_calls.items():
        for islands, by_rate in by_islands.items():
            if calls < 2 or islands < 2 or not probed(by_rate):
                raise UserError(
                    f"{path}: exchange_ratio_by_calls.{calls}.{islands}: give ratios by 2 calls or "
                    "more, then by 2 islands or more, then by probed rates in bits/s above 0"
                )


def probed(by_rate: dict[float, float]) -> bool:
    """Values given by probed rates: at least one, each in bits/s above 0 and finite."""
    return bool(by_rate) and all(0 < rate < math.inf for rate in by_rate)


def parse(path: Path) -> dict[str, Any]:
    document = read_bounded_json(path, "calibration")
    if not isinstance(document, dict):
        raise UserError(
            f"{path}: must hold one JSON object, the calibration islands validate wrote"
        )
    return document


def leaves(
    value: Any, levels: tuple[str, ...], where: str, path: Path
) -> Iterator[tuple[str, Any]]:
    """Every value of a table with its dotted key, the table's shape checked: an object keyed by
    each of ``levels`` in turn (a number of islands or of bits: a whole number; a rate: a number),
    each key once as a number (``2`` and ``02`` are one key, and one value would win), down to the
    values; ``("list",)``, a list of them; ``()``, the value itself."""
    if not levels:
        yield where, value
        return
    if levels == ("list",):
        if not isinstance(value, list):
            raise UserError(f"{path}: {where} must list its values (got {shown_value(value)})")
        for index, item in enumerate(value):
            yield f"{where}.{index}", item
        return
    if not isinstance(value, dict):
        raise UserError(
            f"{path}: {where} must be an object keyed by {levels[0]} (got {shown_value(value)})"
        )
    seen: dict[float, str] = {}
    for key, item in value.items():
        number = key_number(key, levels[0])
        if number is None:
            raise UserError(f"{path}: {where}.{key}: a key must be a {KEY_RULES[levels[0]]}")
        if number in seen:
            raise UserError(
                f"{path}: {where}: the {levels[0]} {number:g} is written twice ({seen[number]!r} and "
                f"{key!r})"
            )
        seen[number] = key
        yield from leaves(item, levels[1:], f"{where}.{key}", path)


def key_number(key: str, level: str) -> float | None:
    """The number a table's key names, or None where it names none of its kind (a rate: finite)."""
    try:
        number = float(key)
    except ValueError:
        return None
    if not is_finite_number(number) or (level != "rate" and number != int(number)):
        return None
    return number
