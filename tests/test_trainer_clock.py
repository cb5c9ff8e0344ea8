"""The trace clock's pause: every process stands still for the same length, so the processes keep
one origin and the offsets they reached the pause with (issue 29: an exchange's members do not all
finish together, the evaluation's collectives end together, and a pause of each process's own length
made the trace's offsets drift by the exchange's end skew at every evaluation)."""

from __future__ import annotations

import pytest

from islands.trainer.core import tracing
from islands.trainer.core.tracing import PAUSE_MARGIN_S, Clock
from islands.trainer.core.world import FixedWorld, Groups


class VirtualTime:
    """``time.monotonic`` and ``time.sleep`` on a clock the test moves."""

    def __init__(self):
        self.now_s = 100.0

    def monotonic(self) -> float:
        return self.now_s

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.now_s += seconds


@pytest.fixture
def virtual(monkeypatch) -> VirtualTime:
    virtual = VirtualTime()
    monkeypatch.setattr(tracing.time, "monotonic", virtual.monotonic)
    monkeypatch.setattr(tracing.time, "sleep", virtual.sleep)
    return virtual


def test_two_processes_paused_at_different_moments_keep_one_origin_and_their_offset(virtual):
    early, late = Clock(), Clock()  # both read 0 at real 100
    virtual.now_s = 110.0
    early.pause()  # its exchange ended first
    virtual.now_s = 110.4
    late.pause()
    virtual.now_s = 112.0  # the evaluation's collective ends for both
    pause_s = max(early.paused_for_s(), late.paused_for_s()) + PAUSE_MARGIN_S
    assert pause_s == pytest.approx(2.0 + PAUSE_MARGIN_S)

    early.resume_after(pause_s)
    assert virtual.now_s == pytest.approx(110.0 + 2.0 + PAUSE_MARGIN_S)
    assert early.now() == pytest.approx(10.0)  # goes on from its own pause reading
    late.resume_after(pause_s)
    assert virtual.now_s == pytest.approx(110.4 + 2.0 + PAUSE_MARGIN_S)  # 0.4 s later, as it paused
    assert late.now() == pytest.approx(10.4)
    virtual.now_s = 120.0
    assert early.now() == pytest.approx(late.now())  # one origin: 120 - 100 - pause_s
    assert early.now() == pytest.approx(20.0 - 2.0 - PAUSE_MARGIN_S)


def test_each_process_pausing_for_its_own_length_would_drift_by_the_skew(virtual):
    """What the clock did before: resuming on the evaluation's common end put the late process's
    trace 0.4 s ahead of the early one's, and the next exchange showed that as a 0.4 s longer span."""
    early, late = Clock(), Clock()
    virtual.now_s = 110.0
    early.pause()
    virtual.now_s = 110.4
    late.pause()
    virtual.now_s = 112.0
    early.resume_after(early.paused_for_s())
    late.resume_after(late.paused_for_s())
    assert late.now() - early.now() == pytest.approx(0.4)


def test_a_process_past_the_common_pause_resumes_at_once_and_its_trace_shows_the_overrun(virtual):
    clock = Clock()
    virtual.now_s = 110.0
    clock.pause()
    virtual.now_s = 112.5  # the all-gather took longer than the margin
    clock.resume_after(2.0)
    assert virtual.now_s == 112.5  # no sleep
    assert clock.now() == pytest.approx(10.5)  # 12.5 s since the start, less the common 2 s


class GatheringGroup:
    def __init__(self, others: list[float]):
        self.others = others

    def all_gather_object(self, value):
        return [value, *self.others]


def test_a_fixed_world_stands_every_process_still_for_the_longest_pause_and_the_margin():
    world = FixedWorld(Groups(world=GatheringGroup([1.75, 0.5]), cross=None), plan=None, rank=0)
    assert world.pause_s(1.25) == pytest.approx(1.75 + PAUSE_MARGIN_S)
