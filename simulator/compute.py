"""How long a worker takes for n inner steps, with seeded step-time jitter.

A step time is lognormal with the island's mean ``step_time_s`` and coefficient of variation
``jitter_cv``. The sum of n independent steps is drawn in one go with the Fenton-Wilkinson
approximation (a lognormal with the sum's exact mean n*m and variance n*v; Fenton 1960), so the cost
of a draw does not grow with H, and it is exact for n = 1. A fraction of a step (DDP's backward
overlap) scales a single step: mean f*m, variance f^2*v.

A drawn span is its seconds at full speed. While the worker's own exchange moves bytes, its compute
runs at 1 / (1 + s) of that speed (``compute.slowdown_while_exchanging`` = s; ``busy_factor``): a span
of w seconds that an exchange of c seconds overlaps from its start ends after
max(c, w + c s / (1 + s)) (``slowed_end_s``; the event model re-times a span as the exchanges start and
end, ``events/busy.py``, by the same factor).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from islands.scenarios import Worker


class StepClock:
    """Step durations of one worker, drawn from its own seeded generator (none without jitter)."""

    def __init__(self, step_time_s: float, jitter_cv: float, rng: np.random.Generator | None):
        self.step_time_s = step_time_s
        self.jitter_cv = jitter_cv
        self.rng = rng

    def duration_s(self, steps: float) -> float:
        if self.jitter_cv == 0 or steps <= 0:
            return steps * self.step_time_s
        mu, sigma = self.lognormal_parameters(steps)
        return float(self.generator().lognormal(mu, sigma))

    def generator(self) -> np.random.Generator:
        """The generator it draws from, which a jittered clock has (``step_clock``)."""
        assert self.rng is not None, (
            "a clock draws only where it jitters, and a jittered clock has a generator"
        )
        return self.rng

    def lognormal_parameters(self, steps: float) -> tuple[float, float]:
        """The Fenton-Wilkinson lognormal's mu and sigma for ``steps`` > 0 steps."""
        mean = steps * self.step_time_s
        one_step_variance = (self.jitter_cv * self.step_time_s) ** 2
        variance = steps * one_step_variance if steps >= 1 else steps * steps * one_step_variance
        sigma_squared = math.log1p(variance / (mean * mean))
        return math.log(mean) - sigma_squared / 2, math.sqrt(sigma_squared)

    def durations_s(
        self, steps: np.ndarray, parameters: tuple[np.ndarray, np.ndarray] | None = None
    ) -> np.ndarray:
        """``duration_s`` of each of ``steps`` (every one > 0) in turn, in one call: the same draws
        from the same generator (numpy draws an array of lognormals one after another, as it draws
        one). ``parameters``: ``lognormal_parameters`` of each, where the caller shares them between
        workers of one island."""
        if self.jitter_cv == 0:
            return steps * self.step_time_s
        mu, sigma = self.parameter_arrays(steps) if parameters is None else parameters
        rng = self.generator()
        if np.ndim(mu) == 0:
            return rng.lognormal(mu, sigma, len(steps))
        return rng.lognormal(mu, sigma)

    def parameter_arrays(self, steps: np.ndarray) -> tuple[np.ndarray | float, np.ndarray | float]:
        """``lognormal_parameters`` of each of ``steps``: two floats where every one is the same."""
        if len(steps) and (steps == steps[0]).all():
            return self.lognormal_parameters(float(steps[0]))
        mu, sigma = zip(*map(self.lognormal_parameters, steps.tolist()))
        return np.array(mu), np.array(sigma)


def busy_factor(slowdown: float, moving: bool) -> float:
    """Wall seconds per second of full-speed compute: 1 + ``slowdown`` while the worker's own exchange
    moves bytes (``moving``), else 1."""
    return 1.0 + slowdown if moving else 1.0


def slowed_end_s(
    start_s: np.ndarray,
    work_s: np.ndarray,
    busy_spans: list[tuple[float, float]],
    slowdown: float,
) -> np.ndarray:
    """When compute of ``work_s`` full-speed seconds begun at ``start_s`` ends (each an array over
    workers) where it runs at 1 / (1 + ``slowdown``) inside ``busy_spans``, the (start, end) of the
    exchanges in flight for every worker, in order and apart: full speed up to a span's start, then
    slowed to its end, and so on; whatever is left after the last at full speed."""
    factor = busy_factor(slowdown, True)
    now, left = start_s, work_s
    for begin_s, end_s in busy_spans:
        free = np.minimum(left, np.maximum(begin_s - now, 0.0))
        now, left = now + free, left - free
        room = np.maximum(end_s - now, 0.0) / factor  # full-speed seconds the span holds
        beyond = left > room
        now, left = (
            np.where(beyond, np.maximum(now, end_s), now + left * factor),
            np.where(beyond, left - room, 0.0),
        )
    return now + left


STEP_TIMES = 0
CHURN = 1
FAILURES = 2


def worker_generator(seed: int, rank: int, stream: int) -> np.random.Generator:
    """Worker ``rank``'s own generator for one stream of draws (``STEP_TIMES``, ``CHURN`` or
    ``FAILURES``): child ``rank`` of the scenario's seed for that stream (as ``SeedSequence.spawn``
    numbers its children), so turning churn on does not change the step-time draws, and a worker's
    draws do not depend on how many others are made."""
    return np.random.default_rng(np.random.SeedSequence([seed, stream], spawn_key=(rank,)))


def step_clock(worker: Worker, seed: int) -> StepClock:
    """The worker's step times, from its own generator where they jitter (a fleet without jitter makes
    none: thousands of generators would cost more than its run)."""
    rng = worker_generator(seed, worker.rank, STEP_TIMES) if worker.jitter_cv else None
    return StepClock(worker.step_time_s, worker.jitter_cv, rng)
