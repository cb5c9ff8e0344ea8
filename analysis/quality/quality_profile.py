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
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from islands.errors import UserError
from islands.interpolation import log_linear
from islands.io import parse_json, read_bounded_text
from islands.numbers import is_positive_number

MAX_PROFILE_BYTES = 16 * 2**20  # a profile holds tens of points, a few kB


MIN_OUTER_STEPS = 20  # fewer outer steps: the outer optimizer's momentum has not settled (docs/training.md)

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
        return (f"H = {self.inner_steps}, M = {self.workers}: {self.outer_steps} outer steps, fewer than "
                f"{MIN_OUTER_STEPS}: outside the papers' regime")

    @classmethod
    def from_dict(cls, values: dict) -> ProfilePoint:
        """A point from its JSON object, each field converted to its type (ValueError, TypeError or
        KeyError for a missing or malformed one; ``outer_lr`` may be absent or null)."""
        types = {"str": str, "int": int, "float": float}  # by a field's annotation, a string (postponed)
        lr = values.get("outer_lr")
        return cls(**{field.name: types[str(field.type)](values[field.name]) for field in fields(cls)
                      if field.name != "outer_lr"}, outer_lr=None if lr is None else float(lr))

    def is_physical(self) -> bool:
        """Counts of at least one and finite, positive losses."""
        counts = (self.inner_steps, self.workers, self.bits, self.fragments, self.steps)
        losses = (self.eval_loss, self.ddp_eval_loss)
        return min(counts) >= 1 and all(is_positive_number(loss) for loss in losses)


@dataclass(frozen=True)
class QualityProfile:
    scenario: str
    model_parameters: int
    points: tuple[ProfilePoint, ...]

    def to_json(self) -> str:
        return json.dumps({"scenario": self.scenario, "model_parameters": self.model_parameters,
                           "points": [asdict(point) for point in self.points]}, indent=2) + "\n"

    @classmethod
    def read(cls, path: str | Path) -> QualityProfile:
        """A profile file, or one line naming the file and what is wrong with it."""
        document = parse_json(read_bounded_text(path, "quality profile", MAX_PROFILE_BYTES), path, "quality profile",
                              ": write it with islands quality --grid --save")
        try:
            points = tuple(ProfilePoint.from_dict(point) for point in document["points"])
            profile = cls(str(document["scenario"]), int(document["model_parameters"]), points)
        except (ValueError, KeyError, TypeError, OverflowError) as exc:
            raise UserError(f"{path}: not a quality profile written by islands quality --grid ({exc})") from None
        if not points or not all(point.is_physical() for point in points):
            raise UserError(f"{path}: points: every point needs inner_steps, workers, bits, fragments and steps "
                            f">= 1 and finite, positive eval_loss and ddp_eval_loss")
        return profile

    def relative_to_dp(self, algorithm: str, inner_steps: int, workers: int, bits: int,
                       fragments: int) -> tuple[float, tuple[str, ...]] | None:
        """The measured penalty relative to DDP at this setting and notes on any extension; None when
        the profile has no point of this algorithm, bits and fragments."""
        same = [p for p in self.points if (p.algorithm, p.bits, p.fragments) == (algorithm, bits, fragments)]
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
            notes.append(f"M = {workers}: outside the measured M {span(measured)}; M = {nearest} used")
            return along_h(by_workers[nearest], inner_steps, notes), tuple(notes)
        low = max(m for m in measured if m < workers)
        high = min(m for m in measured if m > workers)
        weight = math.log(workers / low) / math.log(high / low)
        value = ((1 - weight) * along_h(by_workers[low], inner_steps, notes)
                 + weight * along_h(by_workers[high], inner_steps, notes))
        return value, tuple(dict.fromkeys(notes))


def along_h(points: list[ProfilePoint], inner_steps: int, notes: list[str]) -> float:
    """The penalty at ``inner_steps``: linear in log H between the measured H on either side."""
    by_h = {p.inner_steps: p.relative_to_dp for p in points}
    value, nearest = log_linear(by_h, inner_steps)
    if nearest is not None:
        notes.append(f"H = {inner_steps}: outside the measured H {span(sorted(by_h))}; H = {nearest} used")
    used = used_h(sorted(by_h), inner_steps, nearest)
    notes.extend(mark for mark in (p.regime_mark() for p in points if p.inner_steps in used) if mark)
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
