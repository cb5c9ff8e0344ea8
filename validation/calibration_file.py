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
from islands.trainer.core.quantize import WIRE_BITS

from .calibration import Calibration

PROFILE_KIND = "islands network profile"  # scenarios/profile.py's KIND
REQUIRED = ("mode", "label", "link_ratio", "link_ratios", "overhead_s", "exchange_ratio", "exchange_cpu_s_per_value")
# measured later than the others: absent from older files
OPTIONAL = ("end_spread_s", "burst_fraction", "exchange_ratio_by_bits", "call_s")
ISLAND_TABLES = ("overhead_s", "exchange_cpu_s_per_value", "call_s")  # by number of islands
RATE_TABLES = ("exchange_ratio", "end_spread_s", "burst_fraction")  # by number of islands, then by rate
# what each key's numbers must be, in words and as a test of a finite float
RULES: dict[str, tuple[str, Callable[[float], bool]]] = {
    "link_ratio": ("above 0", lambda value: value > 0),
    "link_ratios": ("above 0", lambda value: value > 0),
    "overhead_s": ("0 or more", lambda value: value >= 0),
    "exchange_ratio": ("above 0", lambda value: value > 0),
    "exchange_cpu_s_per_value": ("0 or more", lambda value: value >= 0),
    "end_spread_s": ("0 or more", lambda value: value >= 0),
    "burst_fraction": ("0 to 1", lambda value: 0 <= value <= 1),
    "exchange_ratio_by_bits": ("above 0", lambda value: value > 0),
    "call_s": ("0 or more", lambda value: value >= 0),
}


def read_calibration(path: Path) -> Calibration:
    """The calibration in ``path``, or one ``UserError`` naming the file and what is wrong."""
    document = parse(path)
    if document.get("kind") == PROFILE_KIND:
        raise UserError(f"{path}: is a network profile (islands calibrate writes it for --network-profile), not a "
                        "calibration: --calibration takes the calibration.json islands validate writes")
    missing = [key for key in REQUIRED if key not in document]
    unknown = sorted(set(document) - set(REQUIRED) - set(OPTIONAL))
    if missing or unknown:
        problem = f"no {', '.join(missing)}" if missing else f"unknown key {', '.join(unknown)}"
        raise UserError(f"{path}: {problem}: not a calibration islands validate wrote")
    for key, (rule, holds) in RULES.items():
        for where, value in numbers(document.get(key, {}), key):
            if not (is_finite_number(value) and holds(value)):
                raise UserError(f"{path}: {where} must be a finite number, {rule} (got {shown_value(value)})")
    if not all(isinstance(document[key], str) for key in ("mode", "label")):
        raise UserError(f"{path}: mode and label must be text")
    if not (is_kernel_mode(document["mode"]) or document["mode"] == InProcessShaper.mode):
        raise UserError(f"{path}: measured with {document['mode']} shaping, which this version no longer builds: "
                        "give --calibration a new file")
    try:
        calibration = Calibration.from_json(json.dumps(document))
    except (ValueError, TypeError, AttributeError) as error:  # a key that is no number of islands or rate
        raise UserError(f"{path}: not a calibration islands validate wrote ({error})") from None
    check_keys(calibration, path)
    return calibration


def check_keys(calibration: Calibration, path: Path) -> None:
    """Numbers of islands 2 or more, each with one number (``ISLAND_TABLES``) or its values by rate
    (``RATE_TABLES``): rates above 0 and finite, at least one per number of islands."""
    for key in ISLAND_TABLES + RATE_TABLES:
        for islands, by_rate in getattr(calibration, key).items():
            if islands < 2:
                raise UserError(f"{path}: {key}.{islands}: an exchange has 2 islands or more")
            if key in ISLAND_TABLES and not is_finite_number(by_rate):
                raise UserError(f"{path}: {key}.{islands}: give one number of seconds (got {shown_value(by_rate)})")
            if key in RATE_TABLES and not probed(by_rate):
                raise UserError(f"{path}: {key}.{islands}: give its values by probed rates, in bits/s above 0")
    for bits, by_islands in calibration.exchange_ratio_by_bits.items():
        if bits not in WIRE_BITS:
            raise UserError(f"{path}: exchange_ratio_by_bits.{bits}: a wire format is one of "
                            f"{', '.join(map(str, WIRE_BITS))} bits")
        for islands, by_rate in by_islands.items():
            if islands < 2 or not probed(by_rate):
                raise UserError(f"{path}: exchange_ratio_by_bits.{bits}.{islands}: give ratios by 2 islands or "
                                "more, then by probed rates in bits/s above 0")


def probed(by_rate: dict[float, float]) -> bool:
    """Values given by probed rates: at least one, each in bits/s above 0 and finite."""
    return bool(by_rate) and all(0 < rate < math.inf for rate in by_rate)


def parse(path: Path) -> dict[str, Any]:
    document = read_bounded_json(path, "calibration")
    if not isinstance(document, dict):
        raise UserError(f"{path}: must hold one JSON object, the calibration islands validate wrote")
    return document


def numbers(value: Any, where: str) -> Iterator[tuple[str, Any]]:
    """Every leaf of ``value`` (a number, or lists and objects of them) with its dotted key."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from numbers(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from numbers(item, f"{where}.{index}")
    else:
        yield where, value
