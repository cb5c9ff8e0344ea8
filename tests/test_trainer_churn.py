"""MULTI-PROCESS churn tests: islands really SIGKILLed (by the launcher's scenario events, or by
themselves at a named point, ``trainer.faults``) while the others train on; a joiner downloads the
global state. Each run starts 3-4 processes and has a hard timeout."""

import json

import pytest
import torch
from helpers.churn_runs import LATE_JOINER, PERIODS, SCENARIO, SETS, outputs, train
from helpers.multiprocess import TINY, global_flat, rank_state

from islands.cli import main
from islands.scenarios import from_dict
from islands.trainer.kinds import make_run_plan


def test_one_of_three_killed_mid_interval_the_others_finish_and_a_joiner_adopts_the_weights(
    tmp_path,
):
    stdout = train(tmp_path, SCENARIO + LATE_JOINER)
    run = tmp_path / "run"
    assert (
        "island 1 killed (SIGKILL)" in stdout
        and "membership: epoch 1, islands [0, 2] (M = 2)" in stdout
    )
    assert "islands [0, 2, 3] (M = 3)" in stdout
    final = sorted(path.name for path in (run / "checkpoints" / f"period-{PERIODS:06d}").iterdir())
    assert final == ["rank-0000.pt", "rank-0002.pt", "rank-0003.pt"]
    states = [rank_state(run, PERIODS, island) for island in (0, 2, 3)]
    assert all(torch.equal(global_flat(states[0]), global_flat(s)) for s in states[1:])
    assert all(
        torch.equal(states[0]["model"][k], states[2]["model"][k]) for k in states[0]["model"]
    )  # joiner
    summary, churn, trace = outputs(run)
    assert summary["leaves"] == 1 and summary["joins"] == 1 and summary["outer_steps"] == PERIODS
    leave = churn["leaves"][0]
    # the work since its last applied sync, up to its last heartbeat: less than one interval, and zero
    # only when the kill lands between a sync and the next step (this machine's scheduling decides)
    assert leave["island"] == 1 and 0 <= summary["lost_compute_s"] == leave["lost_compute_s"] < 0.5
    assert leave["lost_compute_s"] == max(0.0, leave["last_seen_s"] - leave["last_sync_s"])
    assert leave["last_sync_s"] <= leave["last_seen_s"] <= leave["detected_s"]
    join = churn["joins"][0]
    assert join["island"] == 3 and 0 < join["join_s"] < 5
    downloads = [
        row.split(",") for row in trace if row.split(",")[4] == "comm" and row.split(",")[6] == "-1"
    ]
    assert [int(d[2]) for d in downloads] == [3] and float(
        downloads[0][5]
    ) > 4 * 1000  # fp32 weights received
    # the download starts at the request, before the joiner's first exchange (it is not handed the
    # state at a boundary), and the joiner takes part in an exchange before it computes
    rows = [row.split(",") for row in trace]
    joiner_exchanges = sorted(
        float(r[0]) for r in rows if r[2] == "3" and r[4] == "comm" and r[6] == "0"
    )
    joiner_first_compute_s = min(float(r[0]) for r in rows if r[2] == "3" and r[4] == "compute")
    assert float(downloads[0][0]) < joiner_exchanges[0] < joiner_first_compute_s
    # from the next boundary the joiner is in the ring, contributing nothing: one comm row per sync
    joined_syncs = [
        int(r[7])
        for r in map(lambda row: row.split(","), trace)
        if r[2] == "3" and r[4] == "comm" and r[6] == "0"
    ]
    assert joined_syncs == list(range(joined_syncs[0], PERIODS)) and joined_syncs[0] <= 4


def test_an_island_killed_mid_all_reduce_is_dropped_and_the_exchange_redone(tmp_path):
    stdout = train(tmp_path, SCENARIO, kill_at="all-reduce:2:2")
    run = tmp_path / "run"
    assert "membership: epoch 1, islands [0, 1] (M = 2)" in stdout
    states = [rank_state(run, PERIODS, island) for island in (0, 1)]
    assert torch.equal(global_flat(states[0]), global_flat(states[1]))
    assert torch.isfinite(global_flat(states[0])).all()
    summary, churn, trace = outputs(run)
    assert summary["leaves"] == 1 and summary["syncs"] == PERIODS
    second_sync = [row for row in trace if row.split(",")[4] == "comm" and row.split(",")[7] == "1"]
    assert sorted(int(row.split(",")[2]) for row in second_sync) == [
        0,
        1,
    ]  # one comm row each: redone once
    # the attempt island 2 died in, after the all-to-all half of the average, is wasted: each
    # survivor's wasted row holds what gloo sent of it, from that half (and the screening's few
    # bytes) up to the whole of a three-member exchange
    rows = [row.split(",") for row in trace]
    first = {int(r[2]): float(r[5]) for r in rows if r[4] == "comm" and r[7] == "0"}
    wasted = {int(r[2]): (float(r[0]), float(r[5])) for r in rows if r[4] == "wasted"}
    assert sorted(wasted) == [0, 1]
    for island, (started_s, sent) in wasted.items():
        assert first[island] / 2 <= sent <= first[island] + 1024
        redone_s = min(float(r[0]) for r in rows if r[4] == "comm" and r[7] == "1")
        assert started_s < redone_s
    total = sum(float(r[5]) for r in rows)
    assert summary["bytes_per_worker"] == pytest.approx(total / summary["workers"])
    assert summary["wasted_bytes_per_worker"] == pytest.approx(
        sum(sent for _, sent in wasted.values()) / summary["workers"]
    )


def test_a_kill_during_a_checkpoint_write_resumes_from_the_previous_good_one(tmp_path):
    sets = [*TINY, "trainer.checkpoint_every=1", "schedule.outer_steps=3", "schedule.inner_steps=3"]
    text = SCENARIO.replace("replicas = 3", "replicas = 2")
    train(tmp_path, text, kill_at="checkpoint-write:2:0", sets=sets, expect_ok=False)
    run = tmp_path / "run"
    assert (run / "checkpoints" / "LATEST").read_text().strip() == "period-000001"
    assert not (run / "checkpoints" / "period-000002" / "rank-0000.pt").exists()
    train(tmp_path, text, "--resume", str(run), sets=sets)
    assert (run / "checkpoints" / "LATEST").read_text().strip() == "period-000003"
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 10))


def test_a_checkpoint_of_another_model_shape_is_one_line_and_exit_2(tmp_path, capsys):
    folder = tmp_path / "checkpoints" / "period-000001"
    folder.mkdir(parents=True)
    state = {
        "format": 1,
        "model": {"tok_emb.weight": torch.zeros(3, 3)},
        "world_size": 2,
        "fingerprint": "x",
    }
    torch.save(state, folder / "rank-0000.pt")
    (tmp_path / "checkpoints" / "LATEST").write_text("period-000001\n")
    sets = [a for s in TINY for a in ("--set", s)]
    assert (
        main(["train", "worked-example", "--workers", "2", *sets, "--resume", str(tmp_path)]) == 2
    )
    error = capsys.readouterr().err.strip()
    assert "a model of another shape" in error and len(error.splitlines()) == 1


def plan_with(**changes):
    document = {
        "name": "t",
        "model": {"parameters": 1e5},
        "schedule": {"algorithm": "diloco", "inner_steps": 5, "outer_steps": 2},
        "island": [
            {"name": "a", "replicas": 2, "step_time_s": 0.1, "bandwidth_gbps": 1.0},
            {"name": "b", "step_time_s": 0.1, "bandwidth_gbps": 1.0, "present": False},
        ],
        "event": [{"at_s": 5.0, "island": "b", "kind": "join"}],
        "trainer": {},
    }
    for key, value in changes.items():
        section, name = key.split("__")
        document[section][name] = value
    return make_run_plan(from_dict(document))


def test_churn_plans_know_their_members_and_events():
    plan = plan_with()
    assert plan.elastic and plan.initial_members() == [0, 1] and plan.events() == [(5.0, 2, "join")]
    assert (
        plan_with(trainer__ranks_per_island=2).world_size == 6
    )  # an island of 2 ranks leaves whole


def test_churn_the_trainer_cannot_run_is_refused():
    with pytest.raises(Exception, match="train a schedule that exchanges pseudo-gradients"):
        plan_with(schedule__algorithm="ddp")


def test_the_churn_history_survives_a_resume(tmp_path):
    """A run loses island 2, stops with a checkpoint, and resumes: the leave and the epochs before the
    stop are still in churn.json, the resumed run's epochs number on, and island 2 (no file in that
    checkpoint) takes the state from a live island."""
    sets = [*SETS, "trainer.checkpoint_every=1"]
    train(tmp_path, SCENARIO, "--stop-after", "3", kill_at="all-reduce:1:2", sets=sets)
    run = tmp_path / "run"
    assert not (run / "checkpoints" / "period-000003" / "rank-0002.pt").exists()
    stdout = train(tmp_path, SCENARIO, "--resume", str(run), sets=sets)
    assert "membership: epoch 2, islands [0, 1, 2] (M = 3)" in stdout
    summary, churn, _ = outputs(run)
    assert [leave["island"] for leave in churn["leaves"]] == [2] and summary["leaves"] == 1
    assert [(e["epoch"], e["members"]) for e in churn["epochs"]] == [
        (0, [0, 1, 2]),
        (1, [0, 1]),
        (2, [0, 1, 2]),
    ]
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, PERIODS * 10 + 1))


STREAMING = SCENARIO.replace(
    'algorithm = "diloco"', 'algorithm = "streaming"\nfragments = 2\noverlap_steps = 2'
)


def test_elastic_streaming_loses_an_island_mid_exchange_and_admits_a_joiner(tmp_path):
    """Streaming DiLoCo (P = 2, tau = 2): island 2 dies inside a fragment's reduce-scatter while the
    others train on; the exchange is redone among the survivors in the background; a late island
    joins, takes part in the fragments' exchanges without contributing, then trains."""
    sets = [*SETS, "trainer.n_layer=2"]
    stdout = train(
        tmp_path,
        STREAMING + LATE_JOINER.replace('island = "a-1"', 'island = "a-0"'),
        kill_at="all-reduce:3:2",
        sets=sets,
    )
    assert "islands [1, 3] (M = 2)" in stdout  # the joiner entered beside the last survivor
    run = tmp_path / "run"
    summary, churn, trace = outputs(run)
    assert sorted(leave["island"] for leave in churn["leaves"]) == [0, 2]
    assert summary["joins"] == 1 and summary["outer_steps"] == PERIODS
    rows = [row.split(",") for row in trace]
    comms = [(r[2], r[7], r[6]) for r in rows if r[4] == "comm" and int(r[6]) >= 0]
    assert len(comms) == len(
        set(comms)
    )  # every (island, outer step, fragment) exchange recorded once
    survivors = [rank_state(run, PERIODS, island) for island in (1, 3)]
    assert all(torch.isfinite(global_flat(state)).all() for state in survivors)
    assert torch.equal(global_flat(survivors[0]), global_flat(survivors[1]))
