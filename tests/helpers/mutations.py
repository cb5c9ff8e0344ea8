"""Bad files made from good ones, for the generated bad-input suites (tests/test_properties_*.py).

A good document (the dict ``json`` or ``tomllib`` returns) is changed at one place hypothesis draws
(``mutated``): a value swapped for another type, an out-of-range number, NaN, an infinity, an integer
of 401 digits, arrays nested 100,000 deep; a key or an entry removed; an unknown key added; a list's
entry or an object's key written twice. ``json_text`` and ``toml_text`` write the result, including
what ``json.dumps`` cannot write (a key twice, 100,000 levels, a number past float's range: the
``Raw`` text); ``cuts`` gives the lengths to cut a file at (every byte of a small one).

``answer`` is the one check every suite makes: the reader read the file, or refused it in one line
naming it (``UserError``, ``ScenarioError``); anything else (a traceback) fails the test.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from hypothesis import strategies as st

from islands.errors import UserError

HUGE = 10**400  # past float's range: float() of it raises OverflowError
DEPTH = 100_000  # past Python's recursion limit: a parser that recurses runs out of stack


@dataclass(frozen=True)
class Raw:
    """Text written as it is, in place of a value."""

    text: str


DEEP = Raw("[" * DEPTH + "]" * DEPTH)


@dataclass(frozen=True)
class Twice:
    """An object whose key ``key`` is written twice: first with ``first``, then with its value."""

    key: str
    first: Any
    rest: dict[str, Any]


# what a value is swapped for: other types, numbers out of any range, NaN, the infinities, huge ones
JUNK = st.one_of(
    st.sampled_from(
        [
            None,
            True,
            False,
            0,
            -1,
            1,
            0.0,
            -0.5,
            1e-320,
            1e300,
            -1e300,
            math.nan,
            math.inf,
            -math.inf,
            HUGE,
            -HUGE,
            2**53 + 1,
            "",
            "x",
            "1",
            "nan",
            [],
            {},
            [1, 2],
            {"a": 1},
            DEEP,
        ]
    ),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
)


def paths(value: Any, prefix: tuple = ()) -> Iterator[tuple]:
    """Every place in a document (objects and lists), the document itself first."""
    yield prefix
    children = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for key, child in children:
        yield from paths(child, (*prefix, key))


def at(document: Any, path: tuple) -> Any:
    for key in path:
        document = document[key]
    return document


@st.composite
def mutated(draw, document: dict[str, Any], junk: st.SearchStrategy = JUNK) -> tuple[Any, str]:
    """A copy of ``document`` changed at one drawn place, and the change in words (for a failure)."""
    document = copy.deepcopy(document)
    path = draw(st.sampled_from([path for path in paths(document) if path]))
    parent, key = at(document, path[:-1]), path[-1]
    kinds = (
        ["swap", "remove", "extra", "twice"]
        if isinstance(parent, dict)
        else ["swap", "remove", "twice"]
    )
    kind = draw(st.sampled_from(kinds))
    if kind == "swap":
        parent[key] = draw(junk)
    elif kind == "remove":
        del parent[key]
    elif kind == "extra":
        parent[draw(st.sampled_from(["extra", "unknown_key", "x"]))] = draw(junk)
    elif isinstance(parent, dict):  # the key written twice: first with another value
        value = parent.pop(key)
        twice = Twice(key, draw(junk | st.just(value)), {key: value, **parent})
        if path[:-1]:
            at(document, path[:-2])[path[-2]] = twice
        else:
            document = twice
    else:
        parent.insert(key, copy.deepcopy(parent[key]))
    return document, f"{kind} at {'.'.join(map(str, path))}"


def json_text(value: Any) -> str:
    """``value`` as JSON text, NaN and the infinities as Python's ``json`` writes them."""
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, Twice):
        pairs = [(value.key, value.first), *value.rest.items()]
        return "{" + ", ".join(f"{json.dumps(str(k))}: {json_text(v)}" for k, v in pairs) + "}"
    if isinstance(value, dict):
        return (
            "{" + ", ".join(f"{json.dumps(str(k))}: {json_text(v)}" for k, v in value.items()) + "}"
        )
    if isinstance(value, list):
        return "[" + ", ".join(json_text(item) for item in value) + "]"
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)  # json.dumps would too, but refuses past 4,300 digits
    return json.dumps(value, allow_nan=True)


def toml_value(value: Any) -> str | None:
    """``value`` as a TOML value (inline tables and arrays); None for None, which TOML cannot hold."""
    if value is None:
        return None
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, Twice):
        return "{" + ", ".join(toml_pairs([(value.key, value.first), *value.rest.items()])) + "}"
    if isinstance(value, dict):
        return "{" + ", ".join(toml_pairs(value.items())) + "}"
    return "[" + ", ".join(text for text in map(toml_value, value) if text is not None) + "]"


def toml_pairs(pairs) -> list[str]:
    return [
        f"{json.dumps(str(key))} = {text}"
        for key, item in pairs
        if (text := toml_value(item)) is not None
    ]


def toml_text(document: Any) -> str:
    """A scenario document as TOML: top-level values, then tables, then arrays of tables; a value
    that is none of these (a swapped table) as an inline value."""
    if isinstance(document, Twice):
        return (
            "\n".join(toml_pairs([(document.key, document.first), *document.rest.items()])) + "\n"
        )
    plain = {
        key: value
        for key, value in document.items()
        if not is_table(value) and not is_tables(value)
    }
    lines = toml_pairs(plain.items())
    for key, value in document.items():
        if is_table(value):
            pairs = (
                [(value.key, value.first), *value.rest.items()]
                if isinstance(value, Twice)
                else value.items()
            )
            lines += ["", f"[{json.dumps(key)}]", *toml_pairs(pairs)]
        elif is_tables(value):
            for entry in value:
                pairs = (
                    [(entry.key, entry.first), *entry.rest.items()]
                    if isinstance(entry, Twice)
                    else entry.items()
                )
                lines += ["", f"[[{json.dumps(key)}]]", *toml_pairs(pairs)]
    return "\n".join(lines) + "\n"


def is_table(value: Any) -> bool:
    return isinstance(value, (dict, Twice))


def is_tables(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(is_table(entry) for entry in value)


def cuts(length: int, most: int = 400) -> range | list[int]:
    """Lengths to cut a file of ``length`` bytes at: every one up to ``most``, else ``most`` spread over it
    and the last 40 (the file's end, where a cut is hardest to see)."""
    if length <= most:
        return range(length)
    step = length / (most - 40)
    return sorted(
        {int(index * step) for index in range(most - 40)} | set(range(length - 40, length))
    )


Result = TypeVar("Result")


def answer(read: Callable[[], Result], path: str | Path) -> Result | None:
    """What ``read()`` returns, or None where it refused in one line that names ``path``."""
    try:
        return read()
    except UserError as error:
        message = str(error)
        assert "\n" not in message and str(path) in message, message
        return None
