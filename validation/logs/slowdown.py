"""How much a run's compute slowed while its exchange moved bytes, told from its per-step log: the
measured side of ``compute.slowdown_while_exchanging`` (s).

A step that ends in a sync computes (1 - f) T at full speed, then the last f T of it (its backward
pass: ``schedule.backward_overlap`` = f) while its sync moves bytes, at 1 / (1 + s) of its speed.
Where the sync outlasts that compute (the step then waits for it: ``blocked_s`` > 0), the whole f T
is slowed and the step computes T (1 + s f); a step that ends in no sync computes T. So with C_sync
and C_other the median compute seconds of the two kinds of steps,

    s = (C_sync / C_other - 1) / f.

A sync that ends before the compute does (``blocked_s`` = 0) slowed only its own c seconds of it:
C_sync = T + c s / (1 + s) < T (1 + s f), and the same ratio is a lower bound of s. Medians, so that
one slow step (a data loader's, the first step's warm-up) moves nothing.

It cannot be told from a log whose compute is not measured apart (a torchtitan log has none; a
profiler trace's compute is the step less its communication, so compute that overlaps it is not
seen), from a window whose every step syncs (DDP: no step computes without an exchange beside it),
nor where the scenario overlaps no compute with its syncs (f = 0: what a blocking sync adds to its
step is no slowdown of compute).
"""

from __future__ import annotations

from dataclasses import dataclass

from islands.scenarios import Scenario

from .steps import StepLog

KEY = "compute.slowdown_while_exchanging"


@dataclass(frozen=True)
class Slowdown:
    """What the log says of compute slowed by its syncs; ``s`` None with ``why_not`` where it cannot
    be told."""

    synced_steps: int  # rows of steps that end in a sync
    other_steps: int  # rows of steps that do not
    excess: float | None  # C_sync / C_other - 1
    overlap: float  # f, the scenario's backward_overlap
    s: float | None
    lower_bound: bool  # some sync ended before its step's compute: s is at least this
    why_not: str | None = None


def measured_slowdown(log: StepLog, scenario: Scenario) -> Slowdown:
    """The log's slowdown of compute while its syncs move bytes (see the module's docstring)."""
    rows = log.rows
    synced, other = rows[rows["synced"] == 1], rows[rows["synced"] == 0]
    overlap = scenario.schedule.backward_overlap
    counts = (len(synced), len(other))
    if log.format != "steps":
        why = (
            "a torchtitan log gives no compute seconds"
            if log.format == "torchtitan"
            else "a trace's compute is each step less its communication, so compute that overlaps "
            "a sync is not seen"
        )
        return Slowdown(*counts, None, overlap, None, False, why)
    if other.empty:
        why = "every step of the window ends in a sync: no step computes without one beside it"
        return Slowdown(*counts, None, overlap, None, False, why)
    other_s = float(other["compute_s"].median())
    if other_s <= 0:
        why = "the steps that end in no sync computed for 0 s"
        return Slowdown(*counts, None, overlap, None, False, why)
    excess = float(synced["compute_s"].median()) / other_s - 1
    if overlap == 0:
        why = (
            "the scenario overlaps no compute with its syncs (schedule.backward_overlap = 0): "
            "a blocking sync slows no compute"
        )
        return Slowdown(*counts, excess, overlap, None, False, why)
    hidden = bool((synced["blocked_s"] <= 0).any())
    return Slowdown(*counts, excess, overlap, excess / overlap, hidden)


def slowdown_note(slowdown: Slowdown, predicted_s: float) -> str:
    """The note under the figures: what the figure is made of, or why it cannot be told."""
    steps = (
        f"the {slowdown.synced_steps} steps that end in a sync against the "
        f"{slowdown.other_steps} that do not"
    )
    if slowdown.s is None or slowdown.excess is None:
        measured = (
            f"; {steps}: median compute {100 * slowdown.excess:+.1f}%"
            if slowdown.excess is not None
            else ""
        )
        return f"compute slowdown while exchanging ({KEY}): cannot be told: {slowdown.why_not}{measured}"
    bound = (
        ", at least (a sync ended before its step's compute: it slowed only part of it)"
        if slowdown.lower_bound
        else ""
    )
    advice = (
        f"; --set {KEY}={slowdown.s:.3g} predicts it"
        if slowdown.s > 0 and f"{slowdown.s:.3g}" != f"{predicted_s:.3g}"
        else ""
    )
    return (
        f"compute slowdown while exchanging ({KEY}): {steps}: median compute "
        f"{100 * slowdown.excess:+.1f}%, over the backward_overlap = {slowdown.overlap:g} of a step "
        f"that overlaps its sync: s = {slowdown.s:.3g}{bound}{advice}"
    )
