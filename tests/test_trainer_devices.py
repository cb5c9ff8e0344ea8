"""Which device a process trains on: NCCL needs one GPU per process (found on an H200 box, where the
launcher used to put every island's rank r on GPU r and NCCL refused the duplicates)."""

import threading

import pytest
import torch

from islands.errors import UserError
from islands.trainer.core import checkpoint
from islands.trainer.core.tracing import Clock
from islands.trainer.exchange.comm import Echo, StagedGroup
from islands.trainer.exchange.robust import contribution_stats
from islands.trainer.exchange.sync import Exchanger
from islands.trainer.fixed import group_backends
from islands.trainer.runtime.processes import (
    DistEnv,
    gpu_index,
    host_processes,
    pick_device,
    uses_cuda,
)
from islands.trainer.runtime.spec import LaunchSpec


@pytest.fixture
def gpus(monkeypatch):
    def have(count):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: count)

    return have


def test_cuda_without_a_gpu_per_rank_of_an_island_is_one_clear_error(gpus):
    gpus(1)
    with pytest.raises(
        UserError,
        match="an island's 2 ranks average gradients over NCCL, one GPU each, and this "
        "host has 1 GPU",
    ):
        uses_cuda("cuda", 2)
    assert uses_cuda("cuda", 1) is True  # islands of one rank share the GPU


@pytest.mark.parametrize(
    "count, ranks_per_island, expected", [(1, 1, True), (1, 2, False), (2, 2, True), (0, 1, False)]
)
def test_auto_takes_cuda_when_every_rank_of_an_island_has_its_own_gpu(
    gpus, count, ranks_per_island, expected
):
    gpus(count)
    assert uses_cuda("auto", ranks_per_island) is expected
    assert uses_cuda("cpu", ranks_per_island) is False


def test_processes_are_dealt_over_the_gpus_and_an_islands_ranks_get_distinct_ones(
    gpus, monkeypatch
):
    """4 islands on 1 GPU all take GPU 0; 2 islands x 2 ranks on 3 GPUs: each island's pair differs."""
    assert [gpu_index(rank, 1) for rank in range(4)] == [0, 0, 0, 0]
    islands = [[gpu_index(island * 2 + local, 3) for local in range(2)] for island in range(2)]
    assert islands == [[0, 1], [2, 0]] and all(len(set(pair)) == 2 for pair in islands)
    gpus(2)
    chosen = []
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    assert pick_device("auto", 3, 1) == torch.device("cuda", 1) and chosen == [1]


def test_islands_exchange_over_gloo_and_nccl_stays_inside_an_island():
    assert group_backends(torch.device("cuda", 0)) == ("gloo", "nccl")
    assert group_backends(torch.device("cpu")) == ("gloo", "gloo")


class RecordingGroup:
    """A member of a one-member group that records the devices of the tensors it is given."""

    rank, size = 0, 1

    def __init__(self):
        self.devices = []

    def all_gather(self, tensor):
        self.devices.append(tensor.device.type)
        return [tensor.clone()]

    def all_to_all(self, chunks):
        self.devices.extend(chunk.device.type for chunk in chunks)
        return [chunk.clone() for chunk in chunks]

    def all_reduce_sum_(self, tensor):
        self.devices.append(tensor.device.type)
        tensor.mul_(2)  # as if a second member held the same values

    def broadcast_(self, tensor, src=0):
        self.devices.append(tensor.device.type)
        tensor.fill_(7)


def test_a_staged_group_hands_the_cpu_tensors_and_writes_results_back_in_place():
    inner = RecordingGroup()
    group = StagedGroup(inner)
    x = torch.tensor([1.0, 2.0])
    group.all_reduce_sum_(x)
    assert x.tolist() == [2.0, 4.0]
    group.broadcast_(x)
    assert x.tolist() == [7.0, 7.0]
    assert [t.tolist() for t in group.all_to_all([torch.ones(1)])] == [[1.0]]
    assert inner.devices == ["cpu"] * 3


def test_the_exchange_thread_makes_the_trainers_gpu_its_own(monkeypatch):
    chosen = []
    monkeypatch.setattr(
        torch.cuda,
        "set_device",
        lambda device: chosen.append((threading.current_thread().name, device)),
    )
    exchanger = Exchanger(Echo(2), None, 32, Clock(), device=torch.device("cuda", 1))
    exchanger.pool.submit(lambda: None).result()
    exchanger.close()
    assert (
        len(chosen) == 1
        and chosen[0][0].startswith("islands-sync")
        and chosen[0][1] == torch.device("cuda", 1)
    )
    cpu = Exchanger(Echo(2), None, 32, Clock())
    cpu.pool.submit(lambda: None).result()
    cpu.close()
    assert len(chosen) == 1


def test_checkpoints_carry_every_gpus_rng_state_when_cuda_is_there(monkeypatch):
    states = [torch.tensor([1, 2], dtype=torch.uint8), torch.tensor([3], dtype=torch.uint8)]
    restored = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: states)
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", restored.append)
    saved = {"torch_rng": torch.get_rng_state(), "cuda_rng": checkpoint.cuda_rng_state()}
    assert saved["cuda_rng"] is states
    checkpoint.restore_rng(saved)
    assert restored == [states]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert checkpoint.cuda_rng_state() is None
    checkpoint.restore_rng(saved)  # a CUDA checkpoint resumed on a CPU host: the CPU state only
    assert restored == [states]


def test_the_local_launcher_gives_each_process_its_own_gpu(monkeypatch):
    """Its processes share one host: the GPU index is the global rank, not the island-local rank."""
    env = DistEnv(rank=3, world_size=4, local_rank=1)
    assert host_processes(env, LaunchSpec(launched=True)) == (3, 4)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert host_processes(env, LaunchSpec()) == (1, 2)  # torchrun: one node's processes


def test_the_screening_numbers_live_on_the_deltas_device():
    """NCCL groups refuse CPU tensors: the finite flag and norm must be made where the delta is."""
    stats = contribution_stats(torch.tensor([3.0, 4.0]))
    assert stats.device == torch.device("cpu") and stats.tolist() == [1.0, 5.0, 1.0]
    if torch.cuda.is_available():
        assert contribution_stats(torch.ones(2, device="cuda")).device.type == "cuda"
