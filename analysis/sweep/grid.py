"""Sweep grids: ``--grid key=v1,v2,...`` axes, checked key by key before anything runs.

A grid key is any key ``--set`` takes (``schedule.inner_steps``, ``island.*.bandwidth_gbps``,
``seed``). Each key and each of its values is checked on its own against the scenario format, so a
typo or a value no scenario could have (``schedule.inner_steps=0``) stops the sweep with one line.
Rules that tie keys together (H divisible by P, tau < H / P) are left to each combination: such a
combination is recorded as an invalid run, not an error.
"""

from __future__ import annotations

import difflib
import itertools
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from islands.errors import UserError
from islands.numbers import is_finite_number
from islands.scenarios import ScenarioSource
from islands.scenarios.loader import parse_override_value, read_value, select_entries
from islands.scenarios.spec import ARRAYS, SECTIONS, TOP_KEYS, Key, shown_value
from islands.scenarios.trainer_keys import TRAINER_KEYS

SECTION_KEYS: dict[str, dict[str, Key]] = {**SECTIONS, "trainer": TRAINER_KEYS}


@dataclass(frozen=True)
class Axis:
    """One grid key and its values, both as typed values and as the text an override takes."""

    key: str
    values: tuple[Any, ...]
    texts: tuple[str, ...]


def toml_literal(value: Any) -> str:
    """A Python value as the TOML text an override takes (``True`` -> ``true``, ``"ddp"`` -> ``"ddp"``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if is_finite_number(value):
        return repr(value)
    raise UserError(f"--grid: {shown_value(value)} is not a finite number, a string or a boolean")


def parse_grid_option(text: str) -> tuple[str, list[str]]:
    """``key=v1,v2`` -> (``key``, [``v1``, ``v2``])."""
    if "=" not in text:
        raise UserError(f"--grid {text}: write key=v1,v2,... e.g. schedule.inner_steps=50,100,500")
    key, raw = text.split("=", 1)
    key = key.strip()
    texts = [part.strip() for part in raw.split(",")]
    if not raw.strip():
        raise UserError(f"--grid {key}: no values (write {key}=v1,v2,...)")
    if any(not part for part in texts):
        raise UserError(f"--grid {key}: empty value in the list '{raw}'")
    return key, texts


def key_spec(source: ScenarioSource, key: str) -> tuple[Key, str, str]:
    """The format's description of a dotted key: (Key, its name, its dotted prefix), or a UserError."""
    parts = key.split(".")
    if parts[0] in ARRAYS and len(parts) == 3:
        select_entries(source.document, parts[0], parts[1], key, source.source)
        table, name, prefix = ARRAYS[parts[0]], parts[2], f"{parts[0]}.{parts[1]}."
    elif len(parts) == 1:
        table, name, prefix = TOP_KEYS, parts[0], ""
    elif len(parts) == 2 and parts[0] in SECTION_KEYS:
        table, name, prefix = SECTION_KEYS[parts[0]], parts[1], f"{parts[0]}."
    else:
        raise UserError(
            f"--grid {key}: unknown key (keys look like schedule.inner_steps, "
            "island.*.bandwidth_gbps or seed)"
        )
    if name not in table:
        hint = difflib.get_close_matches(name, list(table), n=1)
        suffix = f" (did you mean '{prefix}{hint[0]}'?)" if hint else ""
        raise UserError(f"--grid {key}: unknown key{suffix}")
    return table[name], name, prefix


def make_axis(source: ScenarioSource, key: str, texts: Sequence[str]) -> Axis:
    """Check a key and each of its values on their own; cross-key rules are left to each combination."""
    spec, name, prefix = key_spec(source, key)
    if not texts:
        raise UserError(f"--grid {key}: no values")
    values = tuple(parse_override_value(text) for text in texts)
    for value in values:
        read_value({name: value}, name, spec, prefix, f"{source.source} --grid")
    if len(set(map(repr, values))) != len(values):
        raise UserError(f"--grid {key}: a value is listed twice ({', '.join(texts)})")
    return Axis(key, values, tuple(texts))


def make_axes(
    source: ScenarioSource, grid: Mapping[str, Sequence[Any]] | Sequence[str]
) -> list[Axis]:
    """Axes from CLI options (``["key=v1,v2", ...]``) or from a mapping ``{key: [values]}``."""
    if isinstance(grid, Mapping):
        items = [(key, [toml_literal(v) for v in values]) for key, values in grid.items()]
    else:
        items = [parse_grid_option(text) for text in grid]
    keys = [key for key, _ in items]
    for index, key in enumerate(keys):
        if key in keys[:index]:
            raise UserError(f"--grid {key}: given twice; list all its values in one option")
    return [make_axis(source, key, texts) for key, texts in items]


def combinations(axes: Sequence[Axis]) -> Iterator[tuple[dict[str, Any], list[str]]]:
    """Every combination as (parameter values by key, overrides), the first axis varying slowest."""
    indices = itertools.product(*(range(len(axis.values)) for axis in axes))
    for choice in indices:
        params = {axis.key: axis.values[i] for axis, i in zip(axes, choice)}
        overrides = [f"{axis.key}={axis.texts[i]}" for axis, i in zip(axes, choice)]
        yield params, overrides
