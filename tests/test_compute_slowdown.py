"""Compute that slows while the worker's own exchange moves bytes (``compute.slowdown_while_exchanging``
= s): closed forms computed by hand, in the array and the event players; blocking syncs unchanged;
the players that do not time it step aside."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from helpers.scenarios import BASE_DOCUMENT, make_scenario
from hypothesis import given
from hypothesis import strategies as st

from islands.scenarios import ScenarioError
from islands.simulator import RunSetup, chosen, simulate
from islands.simulator.compute import slowed_end_s
from islands.simulator.players import PLAYERS

KEY = "compute.slowdown_while_exchanging"


def both(overrides: list[str]) -> list[dict]:
    """The summary of the first player that fits, and the event model's."""
    scenario = make_scenario(overrides)
    return [simulate(scenario).summary, simulate(scenario, player="events").summary]


# --- the arithmetic --------------------------------------------------------------------------------


def test_compute_runs_at_one_over_one_plus_s_inside_the_busy_spans_only():
    # s = 1: half speed inside [2, 6] and [10, 12]. Worker 0 starts at 0 with 5 s of work: 2 free, then
    # 3 s of work need 6 s of the span's 4: 2 s of work in it, the last 1 s after it (6 -> 7).
    # Worker 1 starts at 3 with 1 s of work: 2 wall seconds inside the span, done at 5.
    # Worker 2 starts at 7 with 4 s: 3 free (to 10), the last 1 s at half speed: 12.
    # Worker 3 starts at 13, past both spans: 13 + 2.
    ends = slowed_end_s(
        np.array([0.0, 3.0, 7.0, 13.0]),
        np.array([5.0, 1.0, 4.0, 2.0]),
        [(2.0, 6.0), (10.0, 12.0)],
        1.0,
    )
    assert ends.tolist() == [7.0, 5.0, 12.0, 15.0]


def test_without_a_busy_span_compute_takes_its_work():
    ends = slowed_end_s(np.array([1.0, 2.5]), np.array([3.0, 0.25]), [], 0.04)
    assert ends.tolist() == [4.0, 2.75]


# --- DDP: buckets during the backward pass ---------------------------------------------------------

# 30.8M fp32 parameters over 4 workers, 1 ms one way each: a ring hop 2 ms, 2(M-1) = 6 hops a call;
# 25 MiB buckets: 5 calls, each 12 ms + 0.2 ms; step 0.3 s, backward_overlap 0.6 (the exchange is
# launched 0.12 s into the step and overlaps the last 0.18 s of compute).
PARAMETERS = 30.8e6
S = PARAMETERS * 4
M = 4
STEP_S, OVERLAP = 0.3, 0.6
CALLS_S = 5 * (2 * (M - 1) * 0.002 + 0.0002)
LAST = (S - 4 * 25 * 2**20) / S  # the last bucket's share: 14.9%
DDP = [
    f"model.parameters={PARAMETERS}",
    "model.bytes_per_param=4",
    "island.0.latency_ms=1",
    f"island.0.step_time_s={STEP_S}",
    'schedule.algorithm="ddp"',
    "schedule.outer_steps=20",
    'exchange.calls="buckets"',
    "exchange.bucket_cap_mb=25",
    "exchange.call_overhead_s=0.0002",
    f"schedule.backward_overlap={OVERLAP}",
]


def ddp_step_s(exchange_s: float, tail_s: float, s: float) -> tuple[float, float]:
    """One DDP step and its compute by hand: (1 - f) T of compute, then the exchange of c seconds
    starts; the backward pass's f T of work, slowed while the exchange runs, ends at
    a = f T + s / (1 + s) x min(c, (1 + s) f T); the step ends at max(c, a + the exposed last bucket)."""
    backward_s = OVERLAP * STEP_S
    arrived_s = backward_s + s / (1 + s) * min(exchange_s, (1 + s) * backward_s)
    forward_s = STEP_S - backward_s
    return forward_s + max(exchange_s, arrived_s + tail_s), forward_s + arrived_s


@pytest.mark.parametrize("gbps", [50, 5])
@pytest.mark.parametrize("s", [0.04, 0.5])
def test_ddp_step_with_the_backward_pass_slowed_by_its_buckets(gbps, s):
    # 50 Gbit/s: the exchange (0.0906 s) fits in the slowed backward pass, which it lengthens by
    # c s / (1 + s) (its bytes priced back to back from the launch); the last bucket is exposed after
    # it. 5 Gbit/s: the exchange (0.357 s) outlasts the slowed backward pass (0.27 s at s = 0.5): the
    # step is the exchange's, whatever s.
    bytes_s = 2 * (M - 1) / M * S / (gbps * 1e9 / 8)
    exchange_s, tail_s = CALLS_S + bytes_s, CALLS_S / 5 + LAST * bytes_s
    step_s, compute_s = ddp_step_s(exchange_s, tail_s, s)
    plain_step_s, _ = ddp_step_s(exchange_s, tail_s, 0.0)
    for summary in both(DDP + [f"island.0.bandwidth_gbps={gbps}", f"{KEY}={s}"]):
        assert summary["wall_time_s"] == pytest.approx(20 * step_s, rel=1e-12)
        assert summary["compute_s"] == pytest.approx(20 * compute_s, rel=1e-12)
        # the collective lasts from its launch to its last call's end: the step's rest
        forward_s = STEP_S - OVERLAP * STEP_S
        assert summary["mean_sync_s"] == pytest.approx(step_s - forward_s, rel=1e-12)
    if gbps == 50:
        assert step_s == pytest.approx(plain_step_s + exchange_s * s / (1 + s))
    else:
        assert step_s == pytest.approx(plain_step_s)


# --- Streaming DiLoCo: fragments over tau steps ----------------------------------------------------

# helpers.scenarios' fleet: 1e9 bf16 parameters (S = 2e9 B), 4 workers at 1 Gbit/s, 1 s a step,
# H = 100, 3 outer steps; P = 4 fragments of 5e8 B: a ring of 2 x 3/4 x 5e8 / 1.25e8 = 6 s each.
STREAMING = ["schedule.algorithm=streaming", "schedule.fragments=4"]
FRAGMENT_S = 6.0


@pytest.mark.parametrize("s", [0.04, 0.25])
def test_streaming_fragments_hidden_behind_tau_steps_lengthen_the_compute_they_overlap(s):
    # tau = 10: each fragment's 6 s fit in the slowed 10 s of compute, which it lengthens by
    # 6 s / (1 + s); four a period, three periods.
    extra_s = FRAGMENT_S * s / (1 + s)
    for summary in both(STREAMING + ["schedule.overlap_steps=10", f"{KEY}={s}"]):
        assert summary["wall_time_s"] == pytest.approx(3 * (100 + 4 * extra_s), rel=1e-12)
        assert summary["compute_s"] == summary["wall_time_s"]
        assert summary["stall_s"] == 0


def test_streaming_fragments_longer_than_the_slowed_overlap_leave_the_wall_as_it_was():
    # tau = 2 at s = 0.25: the 2 steps end after 2.5 s, inside each 6 s fragment: the worker waits for
    # the fragment either way, so the wall is 3 x ((100 - 4 x 2) + 4 x 6) with or without the slowdown;
    # the slowed seconds move from stall to compute.
    wall_s = 3 * ((100 - 4 * 2) + 4 * FRAGMENT_S)
    plain, slowed = (
        both(STREAMING + ["schedule.overlap_steps=2", f"{KEY}={s}"]) for s in (0.0, 0.25)
    )
    for summary in plain + slowed:
        assert summary["wall_time_s"] == pytest.approx(wall_s, rel=1e-12)
    for summary in slowed:
        assert summary["compute_s"] == pytest.approx(3 * (100 + 4 * 0.5), rel=1e-12)
        assert summary["stall_s"] == pytest.approx(3 * 4 * (FRAGMENT_S - 2.5), rel=1e-12)


def test_a_decoupled_learner_slows_while_its_round_trip_to_the_syncer_moves():
    # One fragment of 5e8 B up (4 s at 1 Gbit/s), merged on arrival, and back down (4 s): 8 s of
    # transfers inside the 10 steps of overlap, slowed at s = 0.25 by 8 x 0.25 / 1.25 = 1.6 s each.
    overrides = [
        "schedule.algorithm=decoupled",
        "schedule.fragments=4",
        "schedule.overlap_steps=10",
        f"{KEY}=0.25",
    ]
    summary = simulate(make_scenario(overrides)).summary
    assert summary["player"] == "events"
    assert summary["wall_time_s"] == pytest.approx(3 * (100 + 4 * 1.6), rel=1e-12)


# --- what it leaves alone --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides",
    [
        [],  # DiLoCo: H steps, then a blocking all-reduce
        ['schedule.algorithm="ddp"', "schedule.outer_steps=10"],
        STREAMING,  # tau = 0: each fragment blocks
        ["island.0.mtbf_s=2000", "island.0.mttr_s=500", "island.0.replicas=6"],  # churn, blocking
    ],
)
def test_a_blocking_sync_overlaps_nothing_so_the_slowdown_changes_no_figure(overrides):
    for player in (None, "events"):
        plain = simulate(make_scenario(overrides), player=player).summary
        slowed = simulate(make_scenario(overrides + [f"{KEY}=0.5"]), player=player).summary
        assert slowed == {**plain, "events": slowed["events"]}


def test_jittered_workers_slow_alike_in_the_array_and_the_event_players():
    """Workers that arrive apart: the fast one computes on before the collective starts, then slowed."""
    for overrides in (
        STREAMING + ["schedule.overlap_steps=10"],
        ['schedule.algorithm="eager"', "schedule.fragments=2"],
        ['schedule.algorithm="ddp"', "schedule.backward_overlap=0.5", "schedule.outer_steps=8"],
    ):
        document = [
            "island.0.jitter_cv=0.2",
            "island.0.replicas=3",
            f"{KEY}=0.3",
            *overrides,
        ]
        arrays, events = both(document)
        assert arrays["player"] == "lockstep"
        for key in ("wall_time_s", "compute_s", "stall_s", "idle_s", "compute_utilisation"):
            assert arrays[key] == pytest.approx(events[key], rel=1e-12), key
        plain = simulate(make_scenario(document[:2] + document[3:])).summary
        assert arrays["compute_s"] > plain["compute_s"]


def test_the_fast_decoupled_players_step_aside_and_say_why():
    scenario = make_scenario(["schedule.algorithm=decoupled", f"{KEY}=0.04"])
    setup = RunSetup.of(scenario)
    reasons = {player.name: player.fits(setup) for player in PLAYERS}
    assert reasons["one learner"] == "its compute slows while its round trips move bytes"
    assert chosen(setup).name == "events"


@pytest.mark.parametrize(
    ("value", "rule"),
    [
        ("-0.01", "must be >= 0"),
        ("11", "must be <= 10 (see docs/limits.md)"),
        ("nan", "must be a finite number"),
        ('"fast"', "must be a finite number"),
    ],
)
def test_a_bad_slowdown_is_refused_in_one_line(value, rule):
    with pytest.raises(ScenarioError, match=re.escape(f"{KEY}: {rule} (got ")):
        make_scenario([f"{KEY}={value}"])


BAD_VALUES = st.one_of(
    st.floats(max_value=-1e-12),
    st.floats(min_value=10.000001),
    st.sampled_from([math.nan, math.inf, -math.inf]),
    st.integers(min_value=11),
    st.integers(max_value=-1),
    st.text(max_size=8),
    st.booleans(),
    st.lists(st.floats(0, 1), max_size=2),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)


@given(value=BAD_VALUES)
def test_every_bad_value_of_the_key_is_refused_in_one_line(value):
    document = {**BASE_DOCUMENT, "compute": {"slowdown_while_exchanging": value}}
    with pytest.raises(ScenarioError) as refused:
        make_scenario(document=document)
    message = str(refused.value)
    assert message.startswith(f"test.toml: {KEY}: must be ") and "\n" not in message


@given(
    section=st.one_of(
        st.integers(), st.text(max_size=8), st.lists(st.integers(), max_size=2), st.booleans()
    )
)
def test_a_compute_section_that_is_no_table_is_refused_in_one_line(section):
    with pytest.raises(ScenarioError, match=r"^test.toml: compute: must be a table$"):
        make_scenario(document={**BASE_DOCUMENT, "compute": section})


def test_an_unknown_compute_key_is_refused_naming_the_known_one():
    with pytest.raises(ScenarioError, match="compute.slowdown: unknown key"):
        make_scenario(document={**BASE_DOCUMENT, "compute": {"slowdown": 0.04}})
