"""The membership's votes and quorums against a real TCPStore in this process (no training; gloo only
to form a group)."""

import threading
import time

import pytest

from islands.trainer.elastic.membership import LeftOut, Membership, Timing
from islands.trainer.runtime.store import connect

TIMING = Timing(detection_s=0.3, collective_s=1.0)


def members_on(store, islands):
    group = [Membership(store, store, island, TIMING) for island in islands]
    for member in group:
        member.members = list(islands)
        member.epoch = 0
    return group


def in_parallel(work, count):
    results = [None] * count
    threads = [
        threading.Thread(target=lambda i=i: results.__setitem__(i, work(i))) for i in range(count)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    return results


def test_an_op_commits_only_when_every_member_finished_it():
    store = connect("127.0.0.1", 0, True, 5.0)
    group = members_on(store, [0, 1, 2])
    assert in_parallel(lambda i: group[i].decide("islands/t/op1", True), 3) == [True, True, True]
    assert in_parallel(lambda i: group[i].decide("islands/t/op2", i != 1), 3) == [
        False,
        False,
        False,
    ]


def test_a_silent_member_aborts_the_op_after_the_detection_timeout():
    store = connect("127.0.0.1", 0, True, 5.0)
    group = members_on(store, [0, 1, 2])
    assert in_parallel(lambda i: group[i].decide("islands/t/op1", True), 2) == [False, False]


def test_the_quorum_is_who_arrived_within_the_detection_timeout_and_a_late_one_is_out():
    store = connect("127.0.0.1", 0, True, 5.0)
    group = members_on(store, [0, 1, 2])
    quorums = in_parallel(lambda i: group[i].next_quorum(0, [0, 1, 2]), 2)
    assert quorums == [(1, [0, 1]), (1, [0, 1])]
    with pytest.raises(LeftOut, match="island 2 arrived after the detection timeout"):
        group[2].next_quorum(0, [0, 1, 2])  # it must join again, not train alone


def test_a_member_is_gone_once_its_heartbeat_stopped_for_the_detection_timeout():
    """Detection counts from the last beat this process saw change; an island never seen beating (a
    slow start) is not taken for dead."""
    store = connect("127.0.0.1", 0, True, 5.0)
    watcher, beating, stopped, _never = members_on(store, [0, 1, 2, 3])
    for member in (beating, stopped):
        member.beat_once()
    watcher.watch([1, 2, 3])
    time.sleep(0.2)
    beating.beat_once()
    watcher.watch([1, 2, 3])
    assert watcher.gone() == []
    time.sleep(0.2)
    watcher.watch([1, 2, 3])
    assert watcher.gone() == [
        2
    ]  # silent 0.4 s > 0.3 s; island 1 beat 0.2 s ago; island 3 never seen


def test_forming_an_epoch_gives_up_on_a_member_that_died_at_the_detection_timeout():
    """gloo's rendezvous would hold the survivor for the collective timeout (here 30 s); the heartbeat
    watch gives up on the dead member once it has been silent for the detection timeout (0.3 s)."""
    store = connect("127.0.0.1", 0, True, 5.0)
    survivor, dead = [
        Membership(store, store, island, Timing(detection_s=0.3, collective_s=30.0))
        for island in (0, 1)
    ]
    dead.beat_once()  # it asked to join, then died before the group formed
    survivor.members = [0, 1]
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=r"islands \[1\] are gone while epoch 3 formed"):
        survivor.form_group(3, [0, 1])
    assert 0.3 <= time.monotonic() - started < 3.0
