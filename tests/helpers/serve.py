"""What the live page's tests share: ``islands simulate``'s own answer for a scenario and overrides,
read from the command itself (its printed table and its ``--json`` summary), to hold the page's
figures against; and tasks for the jobs' tests (module-level, so a worker process can run them)."""

from __future__ import annotations

import contextlib
import io
import json
import re
import time
from collections.abc import Sequence
from typing import Any

from islands.cli import main
from islands.tables import COLUMNS


def run_cli(argv: Sequence[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def sets(overrides: Sequence[str]) -> list[str]:
    return [part for override in overrides for part in ("--set", override)]


def simulated(scenario: str, overrides: Sequence[str]) -> tuple[dict[str, str], dict[str, Any]]:
    """``islands simulate SCENARIO --set ...``: each column of the table it prints (label -> text),
    and its ``--json`` summary."""
    code, text, err = run_cli(["simulate", scenario, *sets(overrides)])
    assert code == 0, err
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("run "))
    cells = re.split(r"\s{2,}", lines[header + 2].strip())[1:]
    assert len(cells) == len(COLUMNS), lines[header + 2]
    code, text, err = run_cli(["simulate", scenario, *sets(overrides), "--json"])
    assert code == 0, err
    return dict(zip((label for label, _ in COLUMNS), cells)), json.loads(text)


def refused(scenario: str, overrides: Sequence[str]) -> str:
    """The one line ``islands simulate`` refuses the overrides with, after its prefix."""
    code, _, err = run_cli(["simulate", scenario, *sets(overrides)])
    assert code == 2, err
    return err.strip().removeprefix("islands simulate: error: ")


def slow_task(seconds: float, emit, progress) -> None:
    """A job that takes ``seconds``, a step of progress every 10 ms, then one part."""
    started = time.monotonic()
    steps = 0
    while time.monotonic() - started < seconds:
        progress("waiting", steps, 0)
        steps += 1
        time.sleep(0.01)
    emit("slept", {"steps": steps})


def stuck_task(seconds: float, emit, progress) -> None:
    """A job that says nothing for ``seconds`` (a long single run): only a kill stops it early."""
    time.sleep(seconds)
    emit("slept", {})


def failing_task(message: str, emit, progress) -> None:
    from islands.errors import UserError

    raise UserError(message)
