"""The scenarios a live page edits, and every request checked as the commands check theirs.

The page's scenario is a file (or a bundled scenario) plus the overrides its controls set, exactly
the ``--set`` overrides of ``islands simulate``: an edit is validated by the scenario loader and the
simulator's resource guard before any job starts, and refused with their one-line message, which
names the key, so that the page shows it beside that key's control. Overrides given to ``islands
serve`` itself are part of the scenario the page starts from (its controls show them as the file's).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from islands import __version__
from islands.errors import UserError
from islands.io import safe_name
from islands.numbers import is_finite_number
from islands.scenarios import ScenarioError, ScenarioSource, bundled_names
from islands.scenarios.loader import apply_override
from islands.scenarios.spec import shown_value
from islands.simulator import guard
from islands.validation.scaling import to_toml

from ..planner.plan import check_target
from .figures import Emit, Progress

MAX_OVERRIDES = 1000  # far more keys than a scenario has
DEFAULT_TARGET = 0.95


def baked(source: ScenarioSource) -> ScenarioSource:
    """``source`` with its overrides written into its document: the scenario the page starts from."""
    document = copy.deepcopy(source.document)
    for override in source.overrides:
        apply_override(document, override, source.source)
    return replace(source, document=document, overrides=(), built=source.built)


@dataclass
class Request:
    """One request's scenario: which one, the page's overrides on it, the target utilisation."""

    scenario: str
    overrides: tuple[str, ...]
    target: float = DEFAULT_TARGET


def request_of(body: Any) -> Request:
    """A request body (JSON) checked: a scenario id, a list of ``KEY=VALUE`` strings, a target."""
    if not isinstance(body, dict):
        raise UserError("the request must be a JSON object")
    scenario, overrides = body.get("scenario"), body.get("overrides", [])
    if not isinstance(scenario, str):
        raise UserError("the request names no scenario")
    if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
        raise UserError("overrides must be a list of KEY=VALUE strings")
    if len(overrides) > MAX_OVERRIDES:
        raise UserError(f"at most {MAX_OVERRIDES} overrides")
    target = body.get("target", DEFAULT_TARGET)
    if not is_finite_number(target):
        raise UserError(f"target utilisation must be a finite number (got {shown_value(target)})")
    return Request(scenario, tuple(overrides), check_target(float(target)))


@dataclass
class Session:
    """The scenarios of one server: the one it was started with (``first``), and any bundled one the
    page switches to, each read once."""

    first: str
    sources: dict[str, ScenarioSource] = field(default_factory=dict)
    command_overrides: tuple[str, ...] = ()

    @classmethod
    def start(
        cls, scenario: str, overrides: Sequence[str] = (), max_events: float | None = None
    ) -> Session:
        """Read the scenario (refused in one line, before anything is served)."""
        source = ScenarioSource.read(scenario, overrides)
        if max_events is not None:
            source = replace(source, max_events=max_events)
        guard(source.scenario, source.max_events)
        return cls(scenario, {scenario: baked(source)}, tuple(overrides))

    def choices(self) -> list[str]:
        """The scenarios the page offers: the first, then the bundled ones."""
        return [self.first, *(name for name in bundled_names() if name != self.first)]

    def source(self, scenario: str) -> ScenarioSource:
        if scenario not in self.sources:
            if scenario not in bundled_names():
                raise UserError(
                    f"no scenario {scenario!r} here: choose one of {', '.join(self.choices())}"
                )
            self.sources[scenario] = baked(ScenarioSource.read(scenario))
        return self.sources[scenario]

    def edited(self, request: Request) -> ScenarioSource:
        """The request's scenario, validated and within the resource guard, or its ``ScenarioError``."""
        source = self.source(request.scenario).with_overrides(*request.overrides)
        scenario = source.variant()
        guard(scenario, source.max_events)
        return replace(source, built=scenario)

    def command(self, scenario: str) -> str:
        """The command line that reads ``scenario`` as this page started it (the page adds its own)."""
        given = self.command_overrides if scenario == self.first else ()
        return " ".join(["islands simulate", scenario, *(f"--set {o}" for o in given)])

    def toml(self, request: Request) -> tuple[str, str]:
        """The edited scenario as a TOML file (a name for it, its text), read back to the same run."""
        source = self.edited(request)
        document = copy.deepcopy(source.document)
        for override in source.overrides:
            apply_override(document, override, source.source)
        edits = " ".join(f"--set {o}" for o in (*self.command_overrides, *request.overrides))
        header = f"# written by islands {__version__} serve from {request.scenario}" + (
            f" with {edits}" if edits else ""
        )
        return f"{safe_name(source.scenario.name)}.toml", f"{header}\n{to_toml(document)}"


def error_of(error: UserError) -> dict[str, Any]:
    """A refusal as the page shows it: the key it names (where a control has one) and the one line."""
    return {"key": error.key if isinstance(error, ScenarioError) else "", "message": str(error)}


def compute_report(source: ScenarioSource, target: float, emit: Emit, progress: Progress) -> None:
    """The static report of the edited scenario (``islands report``), as a download."""
    from ..report.html_report import build_report

    def stage(name: str) -> Any:
        return lambda done, total: progress(name, done, total)

    text = build_report(source, (), target, progress=stage)
    name = f"{safe_name(source.scenario.name)}-report.html"
    emit("report", {"name": name, "bytes": len(text.encode()), "content": text})
