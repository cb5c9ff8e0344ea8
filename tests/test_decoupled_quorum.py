"""Decoupled DiLoCo in the simulator under every quorum K with stragglers: every outer step
completes, waiting grows with K, closed forms by hand, determinism, and validate on an incomplete
prediction. The rules: docs/decoupled.md; the trainer's syncer: test_trainer_syncer_quorum.py."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from islands.scenarios import from_dict
from islands.simulator import simulate

H, TAU, OUTER = 10, 2, 4
SETTINGS = settings(max_examples=25, deadline=None, derandomize=True)


def fleet(
    step_times_s: list[float],
    quorum: int,
    fragments: int = 1,
    grace_window: float | str = 0.0,
    outer_steps: int = OUTER,
    jitter_cv: float = 0.0,
    seed: int = 0,
) -> dict:
    """One learner per island, each at its own seconds per step; links that cost next to nothing (a
    1 MB model over 100 Tbit/s, no latency), so only compute and the syncer's rule set the times."""
    return {
        "name": "quorum",
        "seed": seed,
        "model": {"parameters": 5e5, "bytes_per_param": 2, "tokens_per_step": 1e4},
        "schedule": {
            "algorithm": "decoupled",
            "inner_steps": H,
            "outer_steps": outer_steps,
            "fragments": fragments,
            "overlap_steps": TAU,
            "quorum": quorum,
            "grace_window": grace_window,
        },
        "island": [
            {
                "name": f"l{i}",
                "replicas": 1,
                "step_time_s": t,
                "bandwidth_gbps": 1e5,
                "jitter_cv": jitter_cv,
            }
            for i, t in enumerate(step_times_s)
        ],
    }


def run(step_times_s: list[float], quorum: int, **keys):
    return simulate(from_dict(fleet(step_times_s, quorum, **keys)))


def assert_every_step_completes(result, learners: int, fragments: int) -> None:
    summary = result.summary
    assert summary["complete"], summary["incomplete_reason"]
    assert summary["outer_steps"] == OUTER
    comm = result.trace[result.trace["kind"] == "comm"]
    assert (
        comm.groupby("worker").size().tolist() == [OUTER * fragments] * learners
    )  # each applied every fragment


# --- every quorum completes ---------------------------------------------------------------------


@SETTINGS
@given(
    learners=st.integers(2, 6),
    data=st.data(),
    slowdown=st.floats(1.05, 2.0),
    fragments=st.sampled_from([1, 2]),
    grace=st.sampled_from([0.0, "adaptive"]),
)
def test_one_straggler_completes_every_outer_step_under_every_quorum(
    learners, data, slowdown, fragments, grace
):
    quorum = data.draw(st.integers(1, learners), label="quorum")
    slow = data.draw(st.integers(0, learners - 1), label="slow learner")
    times = [slowdown if i == slow else 1.0 for i in range(learners)]
    assert_every_step_completes(
        run(times, quorum, fragments=fragments, grace_window=grace), learners, fragments
    )


@SETTINGS
@given(
    times=st.lists(st.floats(0.5, 2.0), min_size=2, max_size=6),
    data=st.data(),
    fragments=st.sampled_from([1, 2, 3]),
)
def test_unequal_learners_complete_every_outer_step_under_every_quorum(times, data, fragments):
    quorum = data.draw(st.integers(1, len(times)), label="quorum")
    assert_every_step_completes(run(times, quorum, fragments=fragments), len(times), fragments)


@settings(max_examples=15, deadline=None, derandomize=True)
@given(
    times=st.lists(st.floats(0.5, 2.0), min_size=2, max_size=5),
    data=st.data(),
    leave_s=st.floats(1.0, 40.0),
    away_s=st.floats(1.0, 20.0),
    detection_s=st.sampled_from([0.5, 3.0]),
)
def test_a_learner_that_leaves_and_returns_does_not_stop_any_quorum(
    times, data, leave_s, away_s, detection_s
):
    quorum = data.draw(st.integers(1, len(times)), label="quorum")
    who = data.draw(st.integers(0, len(times) - 1), label="leaver")
    document = fleet(times, quorum, fragments=2, grace_window="adaptive")
    document["network"] = {"detection_timeout_s": detection_s}
    document["event"] = [
        {"at_s": leave_s, "island": f"l{who}", "kind": "leave"},
        {"at_s": leave_s + away_s, "island": f"l{who}", "kind": "join"},
    ]
    summary = simulate(from_dict(document)).summary
    assert summary["complete"], summary["incomplete_reason"]
    assert summary["outer_steps"] == OUTER


def test_a_learner_5_percent_slower_under_a_quorum_of_two_of_three():
    # the regression: it used to end "every worker had left by 0 s" after 4 of 5 outer steps
    result = run([1.0, 1.0, 1.05], 2, grace_window="adaptive")
    assert_every_step_completes(result, 3, 1)
    assert result.summary["late_reports"] > 0


def test_a_quorum_of_every_learner_while_one_is_away_merges_what_the_others_send():
    # K = M = 3 and one learner is away from 5 s to 25 s, noticed at 7 s: no round can reach 3
    # reports meanwhile; once both learners left have a report waiting (at 8 and 18 s), no other can
    # come and the syncer merges them
    document = fleet([1.0, 1.0, 1.2], 3)
    document["network"] = {"detection_timeout_s": 2.0}
    document["event"] = [
        {"at_s": 5.0, "island": "l2", "kind": "leave"},
        {"at_s": 25.0, "island": "l2", "kind": "join"},
    ]
    summary = simulate(from_dict(document)).summary
    assert summary["complete"], summary["incomplete_reason"]
    assert summary["outer_steps"] == OUTER
    assert summary["merges_below_quorum"] >= 2  # rounds 0 and 1 (merged at 8 and 18 s) at least


def test_the_syncer_counts_on_a_departed_learner_until_it_notices_the_departure():
    # as the trainer's syncer, which notices a silent learner network.detection_timeout_s later:
    # K = M = 2, the slow learner leaves at 5 s for good; the fast one's round 0 report (8 s) waits
    # until the departure is noticed at 5 + 10 s, 5 s past its due step at 10 s
    document = fleet([1.0, 1.5], 2)
    document["network"] = {"detection_timeout_s": 10.0}
    document["event"] = [{"at_s": 5.0, "island": "l1", "kind": "leave"}]
    result = simulate(from_dict(document))
    idle = result.trace[(result.trace["kind"] == "idle") & (result.trace["worker"] == 0)]
    assert (idle["time_end_s"] - idle["time_start_s"]).sum() == pytest.approx(15 - 10, abs=1e-3)


def test_a_learner_gone_for_good_is_named_in_the_reason():
    document = fleet([1.0, 1.0, 1.2], 3)
    document["event"] = [{"at_s": 5.0, "island": "l2", "kind": "leave"}]
    summary = simulate(from_dict(document)).summary
    assert not summary["complete"]
    assert summary["incomplete_reason"].startswith(
        "l2 left by 5 s and did not return, after 0 of 4 outer steps"
    )


# --- waiting grows with the quorum --------------------------------------------------------------


def fast_utilisation(result, fast: list[int]) -> float:
    islands = result.summary["islands"]
    return sum(islands[i]["compute_utilisation"] for i in fast) / len(fast)


def test_the_fast_learners_utilisation_falls_as_the_quorum_grows():
    times = [1.0, 1.0, 1.0, 1.3, 1.7]
    utilisation = [fast_utilisation(run(times, k), [0, 1, 2]) for k in range(1, 6)]
    assert all(after <= before + 1e-9 for before, after in zip(utilisation, utilisation[1:])), (
        utilisation
    )
    assert utilisation[:3] == pytest.approx(
        [1.0] * 3, abs=1e-6
    )  # K <= 3: the fast three are a quorum
    assert utilisation[4] < utilisation[3] < 1.0  # K = 4, 5 wait for the stragglers


@SETTINGS
@given(
    times=st.lists(st.floats(0.5, 2.0), min_size=2, max_size=5),
    fragments=st.sampled_from([1, 2]),
    grace=st.sampled_from([0.0, "adaptive"]),
)
def test_no_learners_utilisation_rises_with_the_quorum(times, fragments, grace):
    by_quorum = [
        [
            island["compute_utilisation"]
            for island in run(times, k, fragments=fragments, grace_window=grace).summary["islands"]
        ]
        for k in range(1, len(times) + 1)
    ]
    for learner in range(len(times)):
        utilisation = [row[learner] for row in by_quorum]
        rises = [after > before + 1e-6 for before, after in zip(utilisation, utilisation[1:])]
        assert not any(rises), (learner, utilisation)


# --- closed forms -------------------------------------------------------------------------------


def test_quorum_one_two_learners_closed_form():
    # K = 1, grace 0, a = 1 s and b = 1.7 s per step: round r merges when the fast learner's report
    # arrives, at (10r + 8) a; the slow one's, at (10r + 8) b = 13.6, 30.6, 47.6, 64.6 s, are all
    # late: each takes the newest global at once and joins the next merge (at 18 and 38 s; the last
    # two are merged together once nobody is left to report). 4 + 1 merges; nobody waits; the run
    # ends with the slow learner's 40 steps
    a, b = 1.0, 1.7
    summary = run([a, b], 1).summary
    assert summary["merges"] == OUTER + 1 and summary["merges_below_quorum"] == 0
    assert summary["late_reports"] == OUTER
    assert summary["wall_time_s"] == pytest.approx(OUTER * H * b, abs=1e-3)
    assert summary["idle_s"] == pytest.approx(0, abs=1e-3)


def test_quorum_of_both_two_learners_closed_form():
    # K = M = 2: each fragment waits for the slow learner's report, sent at its launch step; the slow
    # one never waits. The fast one's round r starts when round r - 1 merged, (10r - 2) b, and its
    # due step is 10 a later: it idles (10 - 2) b - 10 a in round 0 and 10 (b - a) after
    a, b = 1.0, 1.7
    summary = run([a, b], 2).summary
    fast, slow = summary["islands"]
    assert summary["merges"] == OUTER and summary["merges_below_quorum"] == 0
    assert summary["wall_time_s"] == pytest.approx(OUTER * H * b, abs=1e-3)
    assert fast["idle_s"] == pytest.approx(
        (H - TAU) * b - H * a + (OUTER - 1) * H * (b - a), abs=1e-3
    )
    assert slow["idle_s"] == pytest.approx(0, abs=1e-3)


def test_a_straggler_behind_a_quorum_of_the_others_closed_form():
    # M = 3, K = 2, steps of 1, 1 and 1.7 s, grace 0. The fast pair is the quorum of every round,
    # merged at 8, 18, 28, 38 s. The straggler's reports (13.6, 30.6, 47.6, 64.6 s) are all late:
    # answered at once, never waiting; rounds 0 and 1 join the merges at 18 and 38 s, rounds 2 and 3
    # are merged together at the end. Before the fix the straggler waited a round for a quorum.
    summary = run([1.0, 1.0, 1.7], 2).summary
    assert summary["wall_time_s"] == pytest.approx(OUTER * H * 1.7, abs=1e-3)
    assert summary["merges"] == OUTER + 1 and summary["merges_below_quorum"] == 0
    assert summary["late_reports"] == OUTER
    assert summary["idle_s"] == pytest.approx(0, abs=1e-3)


# --- determinism --------------------------------------------------------------------------------


def test_same_seed_same_output():
    keys = {"fragments": 2, "jitter_cv": 0.1, "seed": 7, "grace_window": "adaptive"}
    first, second = run([1.0, 1.1, 1.4, 1.0], 3, **keys), run([1.0, 1.1, 1.4, 1.0], 3, **keys)
    assert first.summary == second.summary
    assert first.trace.equals(second.trace)
    assert run([1.0, 1.1, 1.4, 1.0], 3, **{**keys, "seed": 8}).summary != first.summary


# --- validate -----------------------------------------------------------------------------------


def test_validate_compares_an_incomplete_prediction_without_a_type_error():
    # the regression: an incomplete prediction has no utilisation, and the comparison took None - x;
    # now that figure has no error and the notes say why
    from islands.validation.compare import compare, figures_table

    document = fleet([1.0, 1.0, 1.2], 3)
    document["event"] = [{"at_s": 5.0, "island": "l2", "kind": "leave"}]
    predicted = simulate(from_dict(document))
    measured = run([1.0, 1.0, 1.2], 3)
    comparison = compare(
        "gone", predicted.summary, predicted.trace, measured.summary, measured.trace, None, []
    )
    assert comparison.error("compute utilisation") is None
    assert comparison.error("wall time") is not None
    assert comparison.notes[0].startswith("predicted run did not finish: l2 left by 5 s")
    assert "compute utilisation" in figures_table(comparison)
