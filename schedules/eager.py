"""Eager updates: Streaming DiLoCo whose every exchange overlaps a whole outer period (Kale, Douillard
and Donchev 2025, "Eager Updates For Overlapped Communication and Computation in DiLoCo",
arXiv:2502.12996).

Fragment p's outer step t is taken at step t * H + (p + 1) * H / P, where Streaming DiLoCo would
apply it, before the round's average exists. The paper's eager rule stands the worker's own fresh
outer gradient in for the missing round and mixes it with the others' previous round, which has
just arrived: for worker m at round t

    Delta~_m(t) = 1/M Delta_m(t) + 1/M sum_{k != m} Delta_k(t-1)
                = mean(t-1) + (Delta_m(t) - Delta_m(t-1)) / M

(round 0: Delta_m(0) / M alone). So round t's exchange is launched at round t's outer step and due
at round t + 1's, one period later: training never waits for an exchange that one period of
compute covers. The last round's outer step takes its proxy and nothing consumes its average, so
it is not exchanged: T outer steps make (T - 1) * P exchanges. Each worker holds its own global
weights and outer optimizer state (``trainer/core/diloco.py``, ``EagerFragmentSync``).
"""

from __future__ import annotations

from collections.abc import Iterator

from .base import EAGER, Schedule, SyncStep, fragments_fit_period


class Eager(Schedule):
    name = "eager"
    label = "Eager DiLoCo"
    update = EAGER
    reads = ("inner_steps", "fragments", "backward_overlap")

    def sync_steps(self, schedule, first_outer: int = 0) -> Iterator[SyncStep]:
        h, p, lead = schedule.inner_steps, schedule.fragments, schedule.backward_overlap
        for outer in range(first_outer, schedule.outer_steps - 1):
            for fragment in range(p):
                outer_step_at = outer * h + (fragment + 1) * h // p
                yield SyncStep(
                    outer_step=outer,
                    fragment=fragment,
                    launch_step=outer_step_at - lead,
                    apply_step=outer_step_at + h,
                )

    def period_steps(self, schedule) -> int:
        """Inner steps per outer step: H."""
        return schedule.inner_steps

    def fragments(self, schedule) -> int:
        return schedule.fragments

    def synced_outer_steps(self, schedule) -> int:
        """The last outer step's proxy is all it takes: nothing consumes its average."""
        return schedule.outer_steps - 1

    def transfers_may_overlap(self, schedule) -> bool:
        return True

    def check(self, schedule) -> tuple[str, str] | None:
        broken = fragments_fit_period(schedule)
        if broken:
            return broken
        if schedule.outer_steps < 2:
            return (
                "schedule.outer_steps",
                "eager needs at least 2 (a round's average is applied one outer step later)",
            )
        return None
