"""The elastic world with islands as threads of one process: the real membership (heartbeats, votes,
epochs, gloo groups, downloads) over an in-memory store (``torch.distributed.HashStore``) instead of
the launcher's TCPStore. Nothing dies here (``test_trainer_churn.py`` kills processes); these check
the trainer's side of the membership in seconds: an elastic run without churn computes what a fixed
run does, and a joiner that downloads while the members train ends with their weights, bit for bit."""

import json

import torch
import torch.distributed as dist
from helpers.inprocess import TINY, corpus_for, finish_all, global_weights, in_threads, trainers_for
from helpers.world_fakes import reaches

from islands.scenarios import from_dict
from islands.trainer.core.inprocess import run_threads
from islands.trainer.core.loop import Trainer
from islands.trainer.elastic.joining import Fetcher, Server, over
from islands.trainer.elastic.membership import Membership, Timing
from islands.trainer.elastic.world import ElasticWorld
from islands.trainer.kinds import make_run_plan
from islands.trainer.runtime.store import ROOT

TIMING = Timing(detection_s=2.0, collective_s=30.0)


def plan_with(islands, late=0, algorithm="diloco", uplinks_gbps=None, **schedule):
    """``islands`` present islands (each its own uplink of ``uplinks_gbps``, else one island of
    replicas at 1 Gbit/s) and ``late`` that join at the start."""
    workers = [{"name": "a", "replicas": islands, "step_time_s": 0.01, "bandwidth_gbps": 1.0}]
    if uplinks_gbps is not None:
        workers = [
            {"name": f"i{index}", "step_time_s": 0.01, "bandwidth_gbps": gbps}
            for index, gbps in enumerate(uplinks_gbps)
        ]
    if late:
        workers.append(
            {
                "name": "late",
                "replicas": late,
                "present": False,
                "step_time_s": 0.01,
                "bandwidth_gbps": 1.0,
            }
        )
    document = {
        "name": "tiny",
        "model": {"parameters": 1e5},
        "schedule": {"algorithm": algorithm, "outer_steps": 4, "inner_steps": 4, **schedule},
        "network": {"detection_timeout_s": TIMING.detection_s},
        "island": workers,
        "trainer": {**TINY, "elastic": True},
    }
    if late:  # the event the harness plays itself (``elastic_run``'s join_at_s): an absent island must join
        document["event"] = [{"at_s": 0.0, "island": "late", "kind": "join"}]
    return make_run_plan(from_dict(document))


def elastic_run(plan, out_dir, join_at_s=None, store=None):
    """Every island of ``plan`` as a thread with its own membership on one in-memory store (``store``,
    else a new one); the islands absent at the start join at ``join_at_s`` (trace seconds). Returns
    the trainers."""
    store = dist.HashStore() if store is None else store
    corpus = corpus_for(plan)
    present = plan.initial_members()

    def island(rank):
        membership = Membership(store, store, rank, TIMING)
        world = ElasticWorld(
            plan, rank, membership, None if rank in present else join_at_s, out_dir=out_dir
        )
        trainer = Trainer(plan, rank, world, out_dir=out_dir, corpus=corpus)
        trainer.run()
        trainer.summary = trainer.finish()
        return trainer

    return run_threads(plan.world_size, island, timeout_s=120)


def test_an_elastic_run_without_churn_computes_what_a_fixed_run_computes(tmp_path):
    plan = plan_with(3)
    elastic = elastic_run(plan, tmp_path / "elastic")
    fixed = trainers_for(plan)
    in_threads(fixed, lambda trainer: trainer.run())
    finish_all(fixed)
    assert all(torch.equal(global_weights(t), global_weights(fixed[0])) for t in elastic)
    assert not any(reaches(t.world, t) for t in elastic)  # no elastic world holds its trainer
    assert [t.eval_losses for t in elastic] == [fixed[0].eval_losses] * 3
    summary = json.loads((tmp_path / "elastic" / "summary.json").read_text())
    assert (summary["leaves"], summary["joins"], summary["lost_compute_s"]) == (0, 0, 0.0)
    assert summary["syncs"] == plan.scenario.schedule.outer_steps


def test_a_joiner_downloads_while_the_members_train_and_ends_with_their_weights(tmp_path):
    plan = plan_with(3, late=1, algorithm="streaming", fragments=2, overlap_steps=1)
    trainers = elastic_run(plan, tmp_path / "run", join_at_s=0.0)
    joiner = trainers[3]
    assert all(torch.equal(global_weights(t), global_weights(joiner)) for t in trainers[:3])
    churn = json.loads((tmp_path / "run" / "churn.json").read_text())
    assert [join["island"] for join in churn["joins"]] == [3] and churn["leaves"] == []
    assert [epoch["members"] for epoch in churn["epochs"]] == [[0, 1, 2], [0, 1, 2, 3]]
    rows = [
        line.split(",") for line in (tmp_path / "run" / "trace.csv").read_text().splitlines()[1:]
    ]
    download = [r for r in rows if r[2] == "3" and r[4] == "comm" and r[6] == "-1"]
    parameters = sum(p.numel() for p in joiner.params)
    assert (
        len(download) == 1 and float(download[0][5]) > 4 * parameters
    )  # fp32 global weights, and more
    passive = [r for r in rows if r[2] == "3" and r[4] == "comm" and r[6] != "-1"]
    first_compute_s = min(float(r[0]) for r in rows if r[2] == "3" and r[4] == "compute")
    assert passive and float(passive[0][0]) < first_compute_s  # in the ring before it computes


def test_a_joiner_is_sent_the_state_by_the_fastest_holder_not_the_leader(tmp_path):
    """Island 0, the leader (the lowest member holding the state), has a 0.1 Gbit/s uplink and island 1
    a 1 Gbit/s one: the leader picks island 1 for the joiner (``network.weights_from = "fastest"``),
    island 1 sends it, and the joiner ends with the members' weights."""
    plan = plan_with(2, late=1, uplinks_gbps=(0.1, 1.0))
    store = dist.HashStore()
    trainers = elastic_run(plan, tmp_path / "run", join_at_s=0.0, store=store)
    requests = int(store.add(f"{ROOT}/download/requests", 0))
    servers = [store.get(f"{ROOT}/download/{n}/server").decode() for n in range(1, requests + 1)]
    assert requests >= 1 and set(servers) == {"1"}
    assert all(torch.equal(global_weights(t), global_weights(trainers[2])) for t in trainers[:2])


def test_the_leader_spreads_requests_over_the_holders_by_the_simulators_rule():
    """Holders 0 (0.1 Gbit/s), 1 and 2 (1 Gbit/s), three joiners asking in turn: the first goes to
    holder 1 (1 Gbit/s, a tie with 2 broken by the lower island), the second to holder 2 (holder 1
    would give it half), the third, whose attempt from holder 2 just broke off, to holder 1 (half of
    1 Gbit/s, above holder 0's 0.1) rather than to 2; once the first is over, a fourth goes to 1."""
    document = {
        "name": "spread",
        "model": {"parameters": 1e5},
        "schedule": {"algorithm": "diloco", "outer_steps": 2, "inner_steps": 2},
        "island": [
            {"name": f"i{index}", "step_time_s": 0.01, "bandwidth_gbps": gbps}
            for index, gbps in enumerate((0.1, 1.0, 1.0, 1.0, 1.0, 1.0))
        ],
        "trainer": {**TINY, "elastic": True},
    }
    workers = from_dict(document).workers()
    store = dist.HashStore()
    leader = Membership(store, store, 0, TIMING)
    leader.members, leader.stateful = [0, 1, 2], {0, 1, 2}
    server = Server(leader, None, tuple(workers))

    def ask(joiner, broken=None):
        fetcher = Fetcher(Membership(store, store, joiner, TIMING), lambda: 0.0, None)
        number = fetcher.request(broken)
        server.assign(number)
        return fetcher.server_of(number)

    assert [ask(3), ask(4), ask(5, broken=2)] == [1, 2, 1]
    over(leader, 1)
    assert ask(3) == 1
