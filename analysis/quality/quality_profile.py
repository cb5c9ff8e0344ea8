"""A measured quality profile: the user's own model trained at equal tokens, overriding the prior.

``islands quality FILE --grid inner_steps=10,30,100 --grid workers=2,4`` (``analysis/quality/quality_runs.py``)
trains, for every point of the grid, the scenario's schedule and DDP with the same workers for the
same inner steps, and records each final evaluation loss. The profile is that list of points; it
prices a schedule at (H, M) by:

* the points of the same algorithm, wire bits and fragments;
* at each measured M, the penalty relative to DDP linear in log H between the two nearest measured
  H (outside the measured range: the nearest measured H's, and said so: no extrapolation);
* between measured M, linear in log M; outside, the nearest measured M (said so);
* a point measured over fewer than ``MIN_OUTER_STEPS`` outer steps is outside the papers' regime
  (their runs take hundreds): it is marked wherever it is shown or used.

A setting the profile has no point for (another algorithm, bits or fragment count) falls back to
the prior (``loss_prior``), also said.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from islands.errors import UserError
from islands.interpolation import log_linear
from islands.io import parse_json, read_bounded_text
from islands.numbers import is_positive_number, is_whole_number
from islands.scenarios.spec import WIRE_BITS, shown_value
from islands.schedules import GRADIENT, SCHEDULES

MAX_PROFILE_BYTES = 16 * 2**20  # a profile holds tens of points, a few kB
PROFILE_KEYS = ("scenario", "model_parameters", "points")
POINT_KEYS = (
    "algorithm",
    "inner_steps",
    "workers",
    "bits",
    "fragments",
    "steps",
    "eval_loss",
    "ddp_eval_loss",
    "outer_lr",
)  # outer_lr last: the one that may be absent
COUNTS = ("inner_steps", "workers", "fragments", "steps")
MAX_COUNT = 2**53  # a count a float holds exactly: more is no run anyone trained
COMPARED = tuple(name for name, declared in SCHEDULES.items() if declared.exchanged != GRADIENT)

MIN_OUTER_STEPS = (
    20  # fewer outer steps: the outer optimizer's momentum has not settled (docs/training.md)
)


@dataclass(frozen=True)
class ProfilePoint:
    """One grid point: the schedule's and DDP's final evaluation loss after the same inner steps."""

    algorithm: str
    inner_steps: int
    workers: int
    bits: int
    fragments: int
    steps: int
    eval_loss: float
    ddp_eval_loss: float
    outer_lr: float | None = None  # the outer learning rate that won the sweep (--tune-outer-lr)

    @property
    def relative_to_dp(self) -> float:
        return self.eval_loss / self.ddp_eval_loss - 1

    @property
    def outer_steps(self) -> int:
        return self.steps // self.inner_steps

    def regime_mark(self) -> str | None:
        """Why the point is outside the papers' regime (too few outer steps), or None."""
        if self.outer_steps >= MIN_OUTER_STEPS:
            return None
        return (
            f"H = {self.inner_steps}, M = {self.workers}: {self.outer_steps} outer steps, fewer than "
            f"{MIN_OUTER_STEPS}: outside the papers' regime"
        )

    @property
    def setting(self) -> tuple[str, int, int, int, int]:
        """What the point was measured at: two points at one setting would contradict each other."""
        return self.algorithm, self.inner_steps, self.workers, self.bits, self.fragments


@dataclass(frozen=True)
class QualityProfile:
    scenario: str
    model_parameters: int
    points: tuple[ProfilePoint, ...]

    def to_json(self) -> str:
        return (
            json.dumps(
                {
                    "scenario": self.scenario,
                    "model_parameters": self.model_parameters,
                    "points": [asdict(point) for point in self.points],
                },
                indent=2,
            )
            + "\n"
        )

    @classmethod
    def read(cls, path: str | Path) -> QualityProfile:
        """A profile file, or one line naming the file, the key and what is wrong with it."""
        document = parse_json(
            read_bounded_text(path, "quality profile", MAX_PROFILE_BYTES),
            path,
            "quality profile",
            ": write it with islands quality --grid --save",
        )
        if not isinstance(document, dict):
            raise UserError(
                f"{path}: not a quality profile written by islands quality --grid (not a JSON object)"
            )
        missing = [key for key in PROFILE_KEYS if key not in document]
        unknown = sorted(set(document) - set(PROFILE_KEYS))
        if missing or unknown:
            problem = (
                f"no {', '.join(missing)}"
                if missing
                else f"unknown key {', '.join(map(repr, unknown))}"
            )
            raise UserError(
                f"{path}: not a quality profile written by islands quality --grid ({problem})"
            )
        if not isinstance(document["scenario"], str):
            raise UserError(
                f"{path}: scenario: must be the scenario's name (got {shown_value(document['scenario'])})"
            )
        if not (
            is_whole_number(document["model_parameters"]) and document["model_parameters"] >= 1
        ):
            raise UserError(
                f"{path}: model_parameters: must be a whole number >= 1 (got "
                f"{shown_value(document['model_parameters'])})"
            )
        if not (isinstance(document["points"], list) and document["points"]):
            raise UserError(
                f"{path}: points: must list the measured points (got {shown_value(document['points'])})"
            )
        points = tuple(
            checked_point(values, f"{path}: points.{index}")
            for index, values in enumerate(document["points"])
        )
        settings: dict[tuple, int] = {}
        for index, point in enumerate(points):
            if point.setting in settings:
                raise UserError(
                    f"{path}: points.{index}: measures {point.algorithm} at H = {point.inner_steps}, "
                    f"M = {point.workers}, {point.bits} bits, {point.fragments} fragments, as "
                    f"points.{settings[point.setting]} does: each setting once"
                )
            settings[point.setting] = index
        return cls(document["scenario"], document["model_parameters"], points)

    def relative_to_dp(
        self, algorithm: str, inner_steps: int, workers: int, bits: int, fragments: int
    ) -> tuple[float, tuple[str, ...]] | None:
        """The measured penalty relative to DDP at this setting and notes on any extension; None when
        the profile has no point of this algorithm, bits and fragments."""
        same = [
            p
            for p in self.points
            if (p.algorithm, p.bits, p.fragments) == (algorithm, bits, fragments)
        ]
        if not same:
            return None
        by_workers: dict[int, list[ProfilePoint]] = {}
        for point in same:
            by_workers.setdefault(point.workers, []).append(point)
        notes: list[str] = []
        measured = sorted(by_workers)
        if workers in by_workers:
            return along_h(by_workers[workers], inner_steps, notes), tuple(notes)
        if workers < measured[0] or workers > measured[-1]:
            nearest = min(measured, key=lambda m: abs(math.log(m / workers)))
            notes.append(
                f"M = {workers}: outside the measured M {span(measured)}; M = {nearest} used"
            )
            return along_h(by_workers[nearest], inner_steps, notes), tuple(notes)
        low = max(m for m in measured if m < workers)
        high = min(m for m in measured if m > workers)
        weight = math.log(workers / low) / math.log(high / low)
        value = (1 - weight) * along_h(by_workers[low], inner_steps, notes) + weight * along_h(
            by_workers[high], inner_steps, notes
        )
        return value, tuple(dict.fromkeys(notes))


def checked_point(values: object, where: str) -> ProfilePoint:
    """One point of a profile file, each key of its type and in range; ``where`` (the file and the
    point) starts the one line that refuses it."""
    if (
        not isinstance(values, dict)
        or set(values) - set(POINT_KEYS)
        or set(POINT_KEYS[:-1]) - set(values)
    ):
        raise UserError(
            f"{where}: must hold {', '.join(POINT_KEYS[:-1])} (and outer_lr, or null) "
            f"(got {shown_value(values)})"
        )
    algorithm = values["algorithm"]
    if algorithm not in COMPARED:
        raise UserError(
            f"{where}.algorithm: must be a schedule compared with DDP, one of {', '.join(COMPARED)} "
            f"(got {shown_value(algorithm)})"
        )
    for key in COUNTS:
        if not (is_whole_number(values[key]) and 1 <= values[key] <= MAX_COUNT):
            raise UserError(
                f"{where}.{key}: must be a whole number, 1 to {MAX_COUNT} (got {shown_value(values[key])})"
            )
    if not (is_whole_number(values["bits"]) and values["bits"] in WIRE_BITS):
        raise UserError(
            f"{where}.bits: a wire format is one of {', '.join(map(str, WIRE_BITS))} bits "
            f"(got {shown_value(values['bits'])})"
        )
    if values["steps"] % values["inner_steps"]:
        raise UserError(
            f"{where}.steps: {values['steps']} steps do not end on an outer step of "
            f"{values['inner_steps']} (islands quality --grid trains whole outer steps)"
        )
    for key in ("eval_loss", "ddp_eval_loss"):
        if not is_positive_number(values[key]):
            raise UserError(
                f"{where}.{key}: must be a finite loss above 0 (got {shown_value(values[key])})"
            )
    lr = values.get("outer_lr")
    if lr is not None and not is_positive_number(lr):
        raise UserError(
            f"{where}.outer_lr: must be a finite learning rate above 0, or null (got {shown_value(lr)})"
        )
    return ProfilePoint(
        values["algorithm"],
        values["inner_steps"],
        values["workers"],
        values["bits"],
        values["fragments"],
        values["steps"],
        float(values["eval_loss"]),
        float(values["ddp_eval_loss"]),
        None if lr is None else float(lr),
    )


def along_h(points: list[ProfilePoint], inner_steps: int, notes: list[str]) -> float:
    """The penalty at ``inner_steps``: linear in log H between the measured H on either side."""
    by_h = {p.inner_steps: p.relative_to_dp for p in points}
    value, nearest = log_linear(by_h, inner_steps)
    if nearest is not None:
        notes.append(
            f"H = {inner_steps}: outside the measured H {span(sorted(by_h))}; H = {nearest} used"
        )
    used = used_h(sorted(by_h), inner_steps, nearest)
    notes.extend(
        mark for mark in (p.regime_mark() for p in points if p.inner_steps in used) if mark
    )
    return value


def used_h(measured: list[int], inner_steps: int, nearest: int | None) -> tuple[int, ...]:
    """The measured H that the value at ``inner_steps`` comes from."""
    if nearest is not None:
        return (nearest,)
    if inner_steps in measured:
        return (inner_steps,)
    return max(h for h in measured if h < inner_steps), min(h for h in measured if h > inner_steps)


def span(values: list[int]) -> str:
    return f"{values[0]}-{values[-1]}" if len(values) > 1 else str(values[0])
