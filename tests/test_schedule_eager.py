"""Eager updates (``schedules/eager.py``): the simulator's closed forms on the worked example, the
loader's rules, the trainer's update rule by hand, and a whole run of the trainer with islands as
threads."""

import pytest
import torch
from helpers.diloco_fakes import AVERAGE, Board, FakeTransport, global_, plan_of, point, set_local
from helpers.inprocess import finish_all, in_threads, plan_for, trainers_for

from islands.errors import UserError
from islands.scenarios import load
from islands.schedules import EAGER
from islands.simulator import simulate
from islands.trainer.core.diloco import DiLoCo
from islands.trainer.core.outer import Fragment

H, T, STEP_S = 500, 20, 1.5
RING_BYTES = 2 * 7 / 8 * 20e9  # each worker's share of a 20 GB all-reduce among 8


def worked(*sets):
    return simulate(load("worked-example", ["schedule.algorithm=eager", *sets])).summary


def test_at_1_gbps_every_exchange_hides_behind_a_period_and_the_last_round_is_not_sent():
    summary = worked()
    assert summary["stall_s"] == 0.0 and summary["compute_utilisation"] == 1.0
    assert summary["wall_time_s"] == pytest.approx(T * H * STEP_S)
    assert summary["syncs"] == (T - 1) * 10 and summary["outer_steps"] == T
    assert summary["bytes_per_worker"] == pytest.approx((T - 1) * RING_BYTES, rel=1e-9)


def test_when_an_exchange_outlasts_a_period_each_round_waits_out_the_difference():
    """P = 1 at 0.2 Gbit/s: an exchange takes 35 GB / 0.2 Gbit/s = 1400 s, a period 750 s; each of the
    T - 1 rounds stalls 650 s where it is due, the next round's launch."""
    summary = worked("schedule.fragments=1", "island.*.bandwidth_gbps=0.2")
    exchange_s = RING_BYTES * 8 / 0.2e9
    assert summary["stall_s"] == pytest.approx((T - 1) * (exchange_s - H * STEP_S))
    assert summary["wall_time_s"] == pytest.approx(
        T * H * STEP_S + (T - 1) * (exchange_s - H * STEP_S)
    )


def test_one_outer_step_has_no_round_to_apply_and_is_refused():
    with pytest.raises(UserError, match="schedule.outer_steps: eager needs at least 2"):
        load("worked-example", ["schedule.algorithm=eager", "schedule.outer_steps=1"])


def eager_island(start, board, index, points, members):
    params = [torch.nn.Parameter(start.clone())]
    return DiLoCo(
        torch.optim.SGD(params, lr=0.1),
        [Fragment(0, params, AVERAGE)],
        FakeTransport(board, index),
        schedule=plan_of(points),
        alpha=0.0,
        island=index,
        now=lambda: 0.0,
        update=EAGER,
        members=lambda: members,
    )


def test_the_eager_rule_mixes_the_fresh_local_delta_with_the_others_previous_round():
    """Two islands, plain averaging as the outer optimizer (theta_g <- theta_g - Delta~), rounds 0 and
    1 exchanged (T = 3): round 0 steps with Delta_m(0) / M at once; at each later outer step
    Delta~ = mean(t-1) + (Delta_m(t) - Delta_m(t-1)) / M, the last one with no launch."""
    torch.manual_seed(0)
    start, board, m = torch.randn(4), Board(), 2
    rounds = [point(0, 1, 2), point(1, 2, 3)]
    islands = [eager_island(start, board, i, rounds, m) for i in range(m)]
    local = [
        [start + torch.randn(4) for _ in range(3)] for _ in islands
    ]  # each island's weights per round
    expected = [start.clone() for _ in islands]
    own, means = [[None] * 3 for _ in islands], []
    for step in (1, 2, 3):
        for i, diloco in enumerate(islands):
            set_local(diloco, local[i][step - 1])
            own[i][step - 1] = expected[i] - local[i][step - 1]
        if step > 1:
            means.append(sum(own[i][step - 2] for i in range(m)) / m)
        for i, diloco in enumerate(islands):
            diloco.after_step(step)
            previous = torch.zeros(4) if step == 1 else own[i][step - 2]
            mean = torch.zeros(4) if step == 1 else means[-1]
            expected[i] = expected[i] - (mean + (own[i][step - 1] - previous) / m)
            torch.testing.assert_close(global_(diloco), expected[i])
    assert sorted(board.posted) == [(0, 0), (1, 0)]  # the last round is not exchanged
    assert not torch.equal(
        global_(islands[0]), global_(islands[1])
    )  # every island its own global weights


def test_a_whole_eager_run_exchanges_every_round_but_the_last():
    plan = plan_for(
        {"algorithm": "eager", "fragments": 2, "outer_steps": 3, "inner_steps": 4}, islands=2
    )
    trainers = trainers_for(plan)
    in_threads(trainers, lambda trainer: trainer.run())
    summary = finish_all(trainers)
    assert summary["syncs"] == (3 - 1) * 2 and summary["outer_steps"] == 3
    assert all(trainer.step == 12 for trainer in trainers)
    losses = [loss for _, loss in trainers[0].eval_losses]
    assert len(losses) == 3 and all(torch.isfinite(torch.tensor(losses)))


def test_churn_is_refused_with_one_line():
    with pytest.raises(UserError, match="every island holds its own global weights"):
        plan_for({"algorithm": "eager", "fragments": 2}, elastic=True)
