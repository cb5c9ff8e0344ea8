"""Which device a process trains on: NCCL needs one GPU per process (found on an H200 box, where the
launcher used to put every island's rank r on GPU r and NCCL refused the duplicates)."""

import pytest
import torch

from islands.errors import UserError
from islands.trainer import launch
from islands.trainer.launch import DistEnv, host_processes, uses_cuda
from islands.trainer.robust import contribution_stats


@pytest.fixture
def gpus(monkeypatch):
    def have(count):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    return have


def test_cuda_with_fewer_gpus_than_processes_is_one_clear_error(gpus):
    gpus(1)
    with pytest.raises(UserError, match="NCCL needs one GPU per process and this host runs 4 processes with 1"):
        uses_cuda("cuda", 4)


@pytest.mark.parametrize("count, processes, expected", [(1, 4, False), (4, 4, True), (8, 4, True), (0, 1, False)])
def test_auto_takes_cuda_only_with_a_gpu_per_process(gpus, count, processes, expected):
    gpus(count)
    assert uses_cuda("auto", processes) is expected
    assert uses_cuda("cpu", processes) is False


def test_the_local_launcher_gives_each_process_its_own_gpu(monkeypatch):
    """Its processes share one host: the GPU index is the global rank, not the island-local rank."""
    env = DistEnv(rank=3, world_size=4, local_rank=1)
    monkeypatch.setenv(launch.LAUNCHED_VARIABLE, "1")
    assert host_processes(env) == (3, 4)
    monkeypatch.delenv(launch.LAUNCHED_VARIABLE)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert host_processes(env) == (1, 2)  # torchrun: one node's processes


def test_the_screening_numbers_live_on_the_deltas_device():
    """NCCL groups refuse CPU tensors: the finite flag and norm must be made where the delta is."""
    stats = contribution_stats(torch.tensor([3.0, 4.0]))
    assert stats.device == torch.device("cpu") and stats.tolist() == [1.0, 5.0, 1.0]
    if torch.cuda.is_available():
        assert contribution_stats(torch.ones(2, device="cuda")).device.type == "cuda"
