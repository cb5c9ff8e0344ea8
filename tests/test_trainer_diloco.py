"""DiLoCo around the inner optimizer (``trainer/core/diloco.py``) over an in-memory transport: no sockets.
The closed forms of one sync, exchanges in flight over a later launch, launches before applies at one
step, the fault hook and a passive member's kept averages; then the elastic transport over a faked
membership: launches published, admissions, a passive joiner's wait, a follower's view."""

import threading
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest
import torch
from helpers.diloco_fakes import AVERAGE, Board, global_, island, point, set_local

from islands.trainer.core.faults import FAULT_VARIABLE
from islands.trainer.core.tracing import Clock
from islands.trainer.elastic.membership import Progress
from islands.trainer.elastic.transport import ElasticTransport
from islands.trainer.exchange.robust import Verdict
from islands.trainer.exchange.sync import Exchange

NESTEROV = SimpleNamespace(outer_optimizer="nesterov", outer_lr=0.7, outer_momentum=0.9)


def local(diloco):
    return diloco.fragments[0].params[0].detach()


def one_sync(spec, alpha, islands=3):
    """Every island moves its local weights, then all prepare, then all perform one sync."""
    torch.manual_seed(0)
    start, board = torch.randn(5), Board()
    sync = point(0, 1, 1)
    members = [island(start, board, i, [sync], spec, alpha) for i in range(islands)]
    locals_ = [start + torch.randn(5) for _ in members]
    for diloco, weights in zip(members, locals_):
        set_local(diloco, weights)
    for diloco in members:
        diloco.syncs[0].prepare(diloco, 1, sync)
    for diloco in members:
        diloco.syncs[0].perform(diloco, sync, 0.0)
    return start, locals_, members, board


def test_the_pseudo_gradient_is_global_minus_local():
    start, locals_, _, board = one_sync(AVERAGE, 0.0)
    for i, weights in enumerate(locals_):
        torch.testing.assert_close(board.posted[0, 0][i], start - weights)


def test_plain_averaging_makes_the_global_the_mean_of_the_local_weights():
    # Outer SGD lr 1, momentum 0: theta_g - mean(theta_g - theta_i) = mean(theta_i); alpha 0 adopts it.
    _, locals_, members, _ = one_sync(AVERAGE, 0.0)
    mean = torch.stack(locals_).mean(0)
    for diloco in members:
        torch.testing.assert_close(global_(diloco), mean)
        torch.testing.assert_close(local(diloco), mean)
        assert diloco.fragments[0].applied == 1


def test_alpha_mixes_the_local_weights_with_the_global():
    _, locals_, members, _ = one_sync(AVERAGE, 0.25)
    mean = torch.stack(locals_).mean(0)
    for diloco, weights in zip(members, locals_):
        torch.testing.assert_close(local(diloco), 0.25 * weights + 0.75 * mean)


def test_nesterov_first_outer_step_is_lr_times_one_plus_momentum_times_the_mean_delta():
    # b = delta; theta_g <- theta_g - lr (delta + mu b) = theta_g - lr (1 + mu) mean(delta).
    start, locals_, members, _ = one_sync(NESTEROV, 0.0)
    mean_delta = torch.stack([start - weights for weights in locals_]).mean(0)
    torch.testing.assert_close(global_(members[0]), start - 0.7 * 1.9 * mean_delta)


def test_an_exchange_in_flight_over_a_later_launch_is_performed_in_its_turn():
    # Outer step 0 is launched after step 2 and applied after step 5; outer step 1 is launched
    # after step 4, while 0 is still in flight, and applied after step 6.
    start, board = torch.zeros(3), Board()
    diloco = island(start, board, 0, [point(0, 2, 5), point(1, 4, 6)])
    for step in range(1, 7):
        set_local(diloco, torch.full((3,), float(step)))
        diloco.after_step(step)
        if step == 4:
            assert set(diloco.pending) == {(0, 0), (1, 0)}
    assert diloco.transport.log == [
        ("reach", 2),
        ("launch", (0, 0)),
        ("reach", 4),
        ("launch", (1, 0)),
        ("collect", (0, 0)),
        ("applied", (0, 0)),
        ("collect", (1, 0)),
        ("applied", (1, 0)),
    ]
    assert not diloco.pending and diloco.fragments[0].applied == 2
    # One island, plain averaging: outer step 0 makes the global its weights at step 2 (delta = 0 - 2);
    # outer step 1's delta was taken at step 4 against the global then (0 - 4): 2 - (0 - 4) = 6.
    torch.testing.assert_close(global_(diloco), torch.full((3,), 6.0))


def test_a_step_with_launches_and_applies_launches_first():
    start, board = torch.zeros(2), Board()
    diloco = island(start, board, 0, [point(0, 2, 4), point(1, 4, 4)])
    diloco.after_step(2)
    diloco.transport.log.clear()
    assert [p.outer_step for p in diloco.points(4)] == [1, 0, 1]  # the launch, then the applies
    performed = diloco.after_step(4)
    assert diloco.transport.log == [
        ("reach", 4),
        ("launch", (1, 0)),
        ("collect", (0, 0)),
        ("applied", (0, 0)),
        ("collect", (1, 0)),
        ("applied", (1, 0)),
    ]
    assert [(s.point.outer_step, s.arrived_s <= s.received_s) for s in performed] == [
        (0, True),
        (1, True),
    ]
    assert (
        performed[1].arrived_s > performed[0].received_s
    )  # the next wait starts after the outer step


def test_the_fault_hook_poisons_the_island_and_outer_step_it_names(monkeypatch):
    monkeypatch.setenv(FAULT_VARIABLE, "nan@1:0")
    board = Board()
    members = [island(torch.ones(4), board, i, [point(0, 1, 1), point(1, 2, 2)]) for i in range(2)]
    for diloco in members:
        diloco.syncs[0].prepare(diloco, 1, point(0, 1, 1))
        diloco.syncs[0].prepare(diloco, 2, point(1, 2, 2))
    assert torch.isnan(board.posted[0, 0][1]).all() and torch.isfinite(board.posted[0, 0][0]).all()
    assert torch.isfinite(board.posted[1, 0][1]).all()


def test_a_passive_member_sends_zeros_keeps_the_means_and_replays_them():
    board = Board()
    active = island(torch.zeros(3), board, 0, [point(0, 1, 1)])
    passive = island(torch.full((3,), 5.0), board, 1, [point(0, 1, 1)])
    passive.kept = {}
    passive.optimizer.state[passive.fragments[0].params[0]] = {"step": torch.tensor(1.0)}
    set_local(active, torch.full((3,), 2.0))
    active.syncs[0].prepare(active, 1, point(0, 1, 1))
    passive.syncs[0].prepare(passive, 1, point(0, 1, 1))
    assert board.posted[0, 0][1] is None  # no contribution
    active.syncs[0].perform(active, point(0, 1, 1), 0.0)
    passive.syncs[0].perform(passive, point(0, 1, 1), 0.0)
    torch.testing.assert_close(passive.kept[0, 0], torch.full((3,), -2.0))
    assert passive.fragments[0].applied == 0 and ("applied", (0, 0)) not in passive.transport.log
    # The snapshot it downloads holds the global weights before outer step 0: replaying the kept mean
    # gives the members' global weights, adopted locally, with a fresh inner optimizer.
    snapshot = {
        "global": [torch.zeros(3)],
        "optimizer": passive.fragments[0].optimizer.state_dict(),
        "applied": 0,
    }
    passive.fragments[0].load_state_dict(snapshot)
    passive.replay_kept()
    assert not passive.passive and not passive.optimizer.state
    torch.testing.assert_close(global_(passive), global_(active))
    torch.testing.assert_close(local(passive), global_(active))


@pytest.mark.parametrize(
    "points,expected", [([point(0, 2, 5), point(1, 4, 6)], [4, 5, 6]), ([point(0, 3, 3)], [3])]
)
def test_sync_steps_from_a_step_on(points, expected):
    assert island(torch.zeros(1), Board(), 0, points).sync_steps(3) == expected


# ---------------------------------------------------------------- the elastic transport, membership faked
class FakeStore:
    def __init__(self):
        self.values: dict[str, bytes] = {}

    def set(self, key, value):
        self.values[key] = value.encode()

    def get(self, key):
        return self.values[key]

    def check(self, keys):
        return all(key in self.values for key in keys)


class FakeMembership:
    """The parts of ``membership.Membership`` the transport uses: the store, admissions (logged),
    ``run`` (the op once, no group), the members and the published progress."""

    def __init__(self, members):
        self.store, self.members, self.admissions = FakeStore(), members, []
        self.stopping = threading.Event()
        self.progress = Progress()
        self.now_s = lambda: 7.0

    def key(self, *parts):
        return "/".join(["islands", *map(str, parts)])

    def admit_joiners(self, has_state, step):
        self.admissions.append((has_state, step))

    def run(self, op, abandoned=None):
        return op(SimpleNamespace(sent_bytes=0))  # one epoch's group; no attempt given up


class FakeExchanger:
    """The exchange thread, averaging with nobody: the mean is the tensor sent (zeros: none)."""

    def __init__(self):
        self.pool = ThreadPoolExecutor(max_workers=1)
        self.sent: list[tuple[torch.Tensor, bool]] = []
        self.clock = Clock()  # the transport times the attempts it abandons by it

    def exchange(self, delta, contributes=True):
        self.sent.append((delta, contributes))
        return Exchange(delta, 1.0, 2.0, 4 * delta.numel(), Verdict((contributes,), {}))


def elastic(members=(0, 1), shared=lambda decide: decide()):
    membership, exchanger = FakeMembership(list(members)), FakeExchanger()
    return ElasticTransport(membership, exchanger, shared, island=0), membership, exchanger


def test_a_member_publishes_its_launch_and_admits_joiners_at_the_first_fragment_only():
    transport, membership, exchanger = elastic()
    for p in (point(0, 4, 4, fragment=0), point(0, 6, 6, fragment=1)):
        handle = transport.launch(int(p.launch_step), p, torch.ones(2), True)
        exchange = transport.collect(p, handle)
        transport.applied(p)
    assert membership.store.get("islands/launch") == b"6" and membership.admissions == [(True, 4)]
    assert torch.equal(exchange.mean, torch.ones(2)) and [c for _, c in exchanger.sent] == [
        True,
        True,
    ]
    assert (membership.progress.synced_s, membership.progress.outer_step) == (7.0, 1)
    exchanger.pool.shutdown()


def test_a_passive_joiner_waits_for_the_members_launch_and_admits_later_joiners_without_state():
    transport, membership, exchanger = elastic()
    transport.admitted_at = 4
    transport.reach(4, False)  # admitted right at the members' launch: no wait
    transport.collect(point(0, 4, 4), transport.launch(4, point(0, 4, 4), torch.zeros(2), False))
    assert membership.admissions == [] and not membership.store.check(["islands/launch"])
    waiter = threading.Thread(target=transport.reach, args=(10, False))
    waiter.start()
    waiter.join(0.1)
    assert waiter.is_alive()  # the members have not launched after step 10 yet
    membership.store.set("islands/launch", "10")
    waiter.join(2.0)
    assert not waiter.is_alive()
    transport.collect(
        point(1, 10, 10), transport.launch(10, point(1, 10, 10), torch.zeros(2), False)
    )
    assert membership.admissions == [(False, 10)] and [c for _, c in exchanger.sent] == [
        False,
        False,
    ]
    exchanger.pool.shutdown()


def test_a_follower_launches_nothing_and_takes_the_leaders_exchange_and_members():
    told = Exchange(torch.full((2,), 3.0), 0.0, 1.0, 8, Verdict((True, True), {}))
    heard = iter(
        [None, (told, [0, 2])]
    )  # what the leader tells: the launch, then the committed exchange
    transport, membership, exchanger = elastic(shared=lambda decide: next(heard))
    handle = transport.launch(4, point(0, 4, 4), torch.ones(2), True)
    assert handle is None and exchanger.sent == [] and membership.admissions == []
    assert transport.collect(point(0, 4, 4), handle) is told and membership.members == [0, 2]
    exchanger.pool.shutdown()
