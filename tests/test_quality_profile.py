"""The measured quality profile: pricing from its points (closed forms), bad files, and a real grid."""

from __future__ import annotations

import json
import math

import pytest

from islands.analysis.quality.loss_prior import data_parallel_loss, estimate
from islands.analysis.quality.quality_profile import ProfilePoint, QualityProfile
from islands.analysis.quality.quality_runs import check_steps, default_steps, parse_grid, regime
from islands.cli import main
from islands.commands.quality import text
from islands.errors import UserError
from islands.scenarios import load
from islands.schedules import SCHEDULES


def point(h: int, m: int, loss: float, ddp: float = 2.0, algorithm: str = "diloco") -> ProfilePoint:
    return ProfilePoint(
        algorithm=algorithm,
        inner_steps=h,
        workers=m,
        bits=16,
        fragments=1,
        steps=2000,
        eval_loss=loss,
        ddp_eval_loss=ddp,
    )


PROFILE = QualityProfile(
    "toy",
    120_576,
    (point(10, 2, 2.02), point(100, 2, 2.10), point(10, 4, 2.04), point(100, 4, 2.20)),
)


def test_a_measured_point_is_its_own_penalty():
    assert PROFILE.relative_to_dp("diloco", 10, 2, 16, 1) == (pytest.approx(0.01), ())


def test_between_measured_h_the_penalty_is_linear_in_log_h():
    # H = 30 at M = 2: 1% + (5% - 1%) * log(3) / log(10)
    value, notes = PROFILE.relative_to_dp("diloco", 30, 2, 16, 1)
    assert value == pytest.approx(0.01 + 0.04 * math.log(3) / math.log(10)) and notes == ()


def test_between_measured_m_the_penalty_is_linear_in_log_m():
    # M = 3, H = 10: 1% (M = 2) and 2% (M = 4), weight log(1.5) / log(2)
    value, _ = PROFILE.relative_to_dp("diloco", 10, 3, 16, 1)
    assert value == pytest.approx(0.01 + 0.01 * math.log(1.5) / math.log(2))


def test_outside_the_measured_range_the_nearest_point_is_used_and_named():
    value, notes = PROFILE.relative_to_dp("diloco", 500, 8, 16, 1)
    assert value == pytest.approx(0.10)  # M = 4, H = 100: 2.20 / 2.0 - 1
    assert notes == (
        "M = 8: outside the measured M 2-4; M = 4 used",
        "H = 500: outside the measured H 10-100; H = 100 used",
    )


def test_the_estimate_takes_the_profile_and_falls_back_to_the_prior_where_it_has_no_point():
    scenario = load("worked-example", ["schedule.inner_steps=10", "island.0.replicas=2"])
    measured = estimate(scenario, "diloco", PROFILE)
    assert measured.relative_to_dp == pytest.approx(0.01)
    assert measured.loss == pytest.approx(data_parallel_loss(10e9) * 1.01)
    assert measured.notes[0].startswith(
        "measured on toy's model (120,576 parameters), applied at 1e+10"
    )
    fallback = estimate(scenario, "streaming", PROFILE)
    assert fallback.notes[0].startswith(
        "the profile has no point for streaming, 16 bits, 10 fragments"
    )


def test_a_corrupt_profile_is_one_line_naming_the_file(tmp_path):
    broken = tmp_path / "p.json"
    broken.write_text('{"scenario": "x", "points": [')
    with pytest.raises(UserError, match=r"p.json: not valid JSON"):
        QualityProfile.read(broken)
    broken.write_text('{"scenario": "x", "model_parameters": 1, "points": [{"outer_lr": NaN}]}')
    with pytest.raises(
        UserError,
        match=r"p.json: holds NaN, which is no number in JSON: write it with islands "
        r"quality --grid --save",
    ):
        QualityProfile.read(broken)
    broken.write_text('{"scenario": "x", "points": []}')
    with pytest.raises(UserError, match=r"p.json: not a quality profile"):
        QualityProfile.read(broken)
    broken.write_text(
        json.dumps(
            {
                "scenario": "x",
                "model_parameters": 1,
                "points": [{**point(10, 2, 2.0).__dict__, "eval_loss": -1.0}],
            }
        )
    )
    with pytest.raises(
        UserError, match=r"p.json: points.0.eval_loss: must be a finite loss above 0 \(got -1.0\)"
    ):
        QualityProfile.read(broken)
    broken.write_text(
        json.dumps(
            {
                "scenario": "x",
                "model_parameters": 1,
                "points": [{**point(10, 2, 2.0).__dict__, "workers": 0}],
            }
        )
    )
    with pytest.raises(
        UserError,
        match=r"p.json: points.0.workers: must be a whole number, 1 to 9007199254740992 "
        r"\(got 0\)",
    ):
        QualityProfile.read(broken)
    broken.write_text(
        json.dumps(
            {
                "scenario": "x",
                "model_parameters": 1,
                "points": [{**point(10, 2, 2.0).__dict__, "eval_loss": "low"}],
            }
        )
    )
    with pytest.raises(
        UserError, match=r"p.json: points.0.eval_loss: must be a finite loss above 0 \(got 'low'\)"
    ):
        QualityProfile.read(broken)


@pytest.mark.parametrize(
    "items, rule",
    [
        (["h=10"], "the key must be one of"),
        (["inner_steps=10,x"], "whole numbers"),
        (["inner_steps=10", "inner_steps=30"], "give each key once"),
        (["algorithm=diloco,ddp"], "'ddp' is not a schedule to compare with DDP"),
        (["algorithm=dilocco"], "'dilocco' is not a schedule"),
    ],
)
def test_a_bad_grid_is_refused_in_one_line(items, rule):
    with pytest.raises(UserError, match=rule):
        parse_grid(items)


def test_cli_refuses_steps_that_do_not_end_on_an_outer_step(capsys):
    assert main(["quality", "worked-example", "--grid", "inner_steps=7,10", "--steps", "30"]) == 2
    err = capsys.readouterr().err
    assert "--steps 30: must be a multiple of every H in the grid" in err and err.rstrip().endswith(
        "(not of 7)"
    )


def test_a_grid_of_schedules_is_parsed_and_a_point_its_rules_refuse_is_one_line_before_any_run(
    capsys,
):
    assert parse_grid(["algorithm=diloco,streaming", "inner_steps=10"]) == {
        "algorithm": ("diloco", "streaming"),
        "inner_steps": (10,),
    }
    # the worked example's streaming keys: P = 10, tau = 20, so H = 10 breaks tau < H / P
    assert (
        main(
            [
                "quality",
                "worked-example",
                "--grid",
                "algorithm=diloco,streaming",
                "--grid",
                "inner_steps=10",
                "--steps",
                "20",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert (
        "schedule.overlap_steps: must be below inner_steps / fragments" in err
        and "quality: 1 of" not in err
    )


def test_cli_refuses_a_worker_count_the_scenario_cannot_train(capsys):
    assert main(["quality", "worked-example", "--grid", "workers=1,2,9", "--steps", "500"]) == 2
    assert (
        "--grid workers: each M must be between 2 and the scenario's 8 workers (got 1, 9;"
        in capsys.readouterr().err
    )


def test_a_real_grid_measures_each_point_against_ddp_and_saves_the_profile(tmp_path, capsys):
    saved = tmp_path / "profile.json"
    assert (
        main(
            [
                "quality",
                "worked-example",
                "--grid",
                "inner_steps=5,10",
                "--grid",
                "workers=2",
                "--steps",
                "20",
                "--save",
                str(saved),
                "--set",
                "schedule.inner_steps=5",
            ]
        )
        == 0
    )
    profile = QualityProfile.read(saved)
    assert [(p.inner_steps, p.workers, p.steps) for p in profile.points] == [
        (5, 2, 20),
        (10, 2, 20),
    ]
    assert len({p.ddp_eval_loss for p in profile.points}) == 1  # one DDP baseline for M = 2
    out = capsys.readouterr().out
    assert f"{100 * profile.points[0].relative_to_dp:+.2f}%" in out
    assert (
        main(
            [
                "quality",
                "worked-example",
                "--profile",
                str(saved),
                "--json",
                "--set",
                "schedule.inner_steps=5",
                "--set",
                "island.0.replicas=2",
            ]
        )
        == 0
    )
    printed = json.loads(capsys.readouterr().out)
    assert printed["schedules"]["diloco"]["relative_to_dp"] == pytest.approx(
        profile.points[0].relative_to_dp
    )


def test_the_default_steps_give_every_h_20_outer_steps_and_end_on_an_outer_step():
    assert default_steps((100,)) == 2000 and default_steps((10, 30, 100)) == 2100  # lcm 300 x 7
    assert "H = 100: 3" in regime(
        300, (10, 100)
    ) and "H = 100 below 20 outer steps: marked" in regime(300, (10, 100))
    assert "marked" not in regime(2000, (10, 100))


def test_an_h_beyond_the_run_is_refused_in_one_line():
    with pytest.raises(
        UserError, match=r"--steps 300: H = 500 is beyond the run's 300 inner steps per worker"
    ):
        check_steps(300, (10, 500))


def test_a_point_with_too_few_outer_steps_is_marked_where_it_is_used_and_shown(capsys):
    few = ProfilePoint(
        algorithm="diloco",
        inner_steps=100,
        workers=2,
        bits=16,
        fragments=1,
        steps=300,
        eval_loss=2.1,
        ddp_eval_loss=2.0,
    )
    enough = ProfilePoint(
        algorithm="diloco",
        inner_steps=10,
        workers=2,
        bits=16,
        fragments=1,
        steps=300,
        eval_loss=2.02,
        ddp_eval_loss=2.0,
    )
    profile = QualityProfile("toy", 1000, (few, enough))
    assert profile.relative_to_dp("diloco", 10, 2, 16, 1)[1] == ()
    assert profile.relative_to_dp("diloco", 100, 2, 16, 1)[1] == (
        "H = 100, M = 2: 3 outer steps, fewer than 20: outside the papers' regime",
    )
    scenario = load("worked-example", ["island.0.replicas=2"])
    lines = text(scenario, {"ddp": estimate(scenario, "ddp")}, profile, SCHEDULES).splitlines()
    assert lines[1].endswith(
        "+5.00%  [H = 100, M = 2: 3 outer steps, fewer than 20: outside the papers' regime]"
    )
    assert lines[2].endswith("+1.00%")


def test_a_profile_without_outer_lr_still_reads_and_one_with_it_keeps_it(tmp_path):
    document = json.loads(PROFILE.to_json())
    for entry in document["points"]:
        del entry["outer_lr"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(document))
    assert QualityProfile.read(path).points[0].outer_lr is None
    tuned = QualityProfile(
        "toy", 1, (ProfilePoint("diloco", 10, 2, 16, 1, 300, 2.0, 2.0, outer_lr=0.5),)
    )
    path.write_text(tuned.to_json())
    assert QualityProfile.read(path).points[0].outer_lr == 0.5


def test_tuning_the_outer_lr_keeps_the_best_of_the_sweep_and_says_which_won(monkeypatch, capsys):
    from islands.analysis.quality import quality_runs as quality

    def fake_trained(scenario_name, overrides, workers, out_dir):
        lr = next(
            (float(o.split("=")[1]) for o in overrides if o.startswith("trainer.outer_lr=")), None
        )
        loss = 2.0 if lr is None else 2.1 + abs(lr - 0.5)  # DDP 2.0; the sweep's best at 0.5
        return {"final_eval_loss": loss, "parameters": 1000}

    monkeypatch.setattr(quality, "trained", fake_trained)
    profile = quality.measure_profile(
        "worked-example",
        ["island.0.replicas=2", "schedule.inner_steps=10"],
        {"workers": (2,)},
        None,
        tune_outer_lr=True,
    )
    (tuned,) = profile.points
    assert tuned.outer_lr == 0.5 and tuned.eval_loss == pytest.approx(2.1) and tuned.steps == 200
    err = capsys.readouterr().err
    assert (
        "quality: 200 inner steps per worker for every run, DDP at equal tokens; outer steps H = 10: 20"
        in err
    )
    assert "outer lr 0.5 won" in err and "(of 0.3, 0.5, 0.7, 1)" in err
