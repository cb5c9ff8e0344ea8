"""A replica must fit: the training state one accelerator of a worker holds, against its memory.

Every worker holds a whole replica of the model with its optimizer state; inside the worker the
state is sharded over its ``gpus`` accelerators as FSDP / ZeRO-3 does (every per-parameter tensor cut
in ``gpus`` equal shards). Per parameter, with ``b`` = ``model.bytes_per_param`` and the optimizer
stepping in ``w`` = max(4, b) bytes (fp32, or the weights' own precision above it):

    weights b + gradients b + a master copy w (where b < w: mixed precision) + AdamW's two moments 2w

bf16 (b = 2): 2 + 2 + 4 + 4 + 4 = 16 B, the usual mixed-precision figure; fp32: 4 + 4 + 8 = 16 B. With
``trainer.inner_optimizer = "sgd"`` (plain SGD) there are no moments. The DiLoCo family adds its outer
state, which the trainer keeps on the accelerator beside the weights (``trainer/core/outer.py``):
the fp32 global copy (4 B) and the outer optimizer's state in fp32 (Nesterov's momentum 4 B, AdamW's
two moments 8 B, plain averaging none); Eager keeps its own last pseudo-gradient too (4 B); a
Decoupled DiLoCo learner keeps the global copy only, its syncer (a CPU process) the outer optimizer.
Top-k compression with error feedback keeps each worker's fp32 buffer (4 B; SparseLoCo's stands in
for the momentum, which is then 0 by default). DDP keeps none. Activations, buffers of exchanges in
flight and the framework's own memory are out of scope (docs/limits.md): the check is a floor,
and a replica it admits may still not fit.

``island.offload = "optimizer"`` places the state as ZeRO-Offload does (Ren et al. 2021, arXiv
2101.06840, section 3.5: the fp16 parameters on the GPU, every fp32 model state and the fp16 gradients
in CPU memory; with it a 13B model trained on one 32 GB V100, section 6.2.1): the accelerators keep the
weights, b per parameter, sharded over ``gpus``; the gradients stream to the host during the backward
pass, a bucket at a time (a buffer in flight, not counted), so the host keeps gradients b + master copy
+ moments. The DiLoCo family's outer state goes to the host as well: the outer step reads it once per
sync, and the master copy the pseudo-gradient is taken from is already there (prime's DiLoCo keeps the
global copy and the outer optimizer in CPU memory, src/zeroband/diloco.py). The host side is checked
against ``island.host_memory_gb``, the memory of all a worker's hosts together, where it is given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from islands.schedules import ADOPT, EAGER, GRADIENT, Schedule

from .errors import ScenarioError
from .trainer_keys import TrainerSpec

FP32_BYTES = 4
BYTES_PER_GB = 1e9  # datasheets count memory in GB of 1e9 bytes
OUTER_MOMENTS = {"nesterov": 1, "average": 0, "adamw": 2}  # fp32 tensors the outer optimizer keeps
OPTIMIZER_OFFLOAD = "optimizer"  # island.offload: the optimizer's state and step in host memory


def inner_bytes_per_param(bytes_per_param: float, inner_optimizer: str) -> float:
    """Weights, gradients, master copy and AdamW moments of one parameter (the module's formula)."""
    step_bytes = max(FP32_BYTES, bytes_per_param)
    master = step_bytes if bytes_per_param < step_bytes else 0.0
    moments = 2 * step_bytes if inner_optimizer == "adamw" else 0.0
    return 2 * bytes_per_param + master + moments


def outer_bytes_per_param(
    schedule: Schedule, trainer: TrainerSpec, error_feedback: bool = False
) -> float:
    """The DiLoCo family's outer state of one parameter on a worker's accelerators (none for DDP);
    ``error_feedback``: the worker's fp32 error-feedback buffer of top-k compression too."""
    if schedule.exchanged == GRADIENT:
        return 0.0
    if schedule.update == ADOPT:
        return FP32_BYTES
    moments = OUTER_MOMENTS[trainer.outer_optimizer]
    if trainer.outer_optimizer == "nesterov" and trainer.outer_momentum == 0:
        moments = 0  # torch's SGD keeps no buffer without momentum
    own_delta = 1 if schedule.update == EAGER else 0
    buffer = 1 if error_feedback else 0
    return FP32_BYTES * (1 + moments + own_delta + buffer)


def bytes_per_param(
    model_bytes_per_param: float,
    schedule: Schedule,
    trainer: TrainerSpec,
    error_feedback: bool = False,
) -> float:
    """Every byte of training state one parameter costs a worker, before sharding."""
    return inner_bytes_per_param(
        model_bytes_per_param, trainer.inner_optimizer
    ) + outer_bytes_per_param(schedule, trainer, error_feedback)


def needed_gb(parameters: float, per_param_bytes: float, gpus: int) -> float:
    """GB of training state on each of a worker's ``gpus`` accelerators: parameters x bytes / gpus."""
    return parameters * per_param_bytes / gpus / BYTES_PER_GB


def gpus_to_fit(parameters: float, per_param_bytes: float, memory_gb: float) -> int:
    """The fewest accelerators whose memory together holds a replica's training state."""
    return math.ceil(parameters * per_param_bytes / BYTES_PER_GB / memory_gb)


@dataclass(frozen=True)
class Placement:
    """Where one parameter's training state lives: ``state_bytes`` in all (``bytes_per_param``), of
    which ``weights_bytes`` are the weights. Without offload all of it is on the accelerators; with
    ``offload = "optimizer"`` the weights only, and the rest (gradients, master copy, moments, outer
    state) in the worker's host memory."""

    state_bytes: float
    weights_bytes: float
    offload: str  # island.offload

    @property
    def offloaded(self) -> bool:
        return self.offload == OPTIMIZER_OFFLOAD

    @property
    def accelerator_bytes(self) -> float:
        return self.weights_bytes if self.offloaded else self.state_bytes

    @property
    def host_bytes(self) -> float:
        return self.state_bytes - self.accelerator_bytes


@dataclass(frozen=True)
class Replica:
    """One island's replica as the memory checks see it: ``index`` and ``name`` for the message."""

    index: int
    name: str
    parameters: float
    gpus: int
    place: Placement


def check_replica_fits(replica: Replica, memory: tuple[float, str] | None, source: str) -> None:
    """Refuse the island when its replica's state on the accelerators, sharded over ``gpus``, exceeds
    the ``memory`` of one accelerator: (GB, where that figure comes from); None: not known, not checked."""
    if memory is None:
        return
    memory_gb, whose = memory
    parameters, gpus, place = replica.parameters, replica.gpus, replica.place
    need_gb = needed_gb(parameters, place.accelerator_bytes, gpus)
    if need_gb <= memory_gb:
        return
    shards = "on 1 accelerator" if gpus == 1 else f"sharded over {gpus} accelerators"
    held = (
        f'weights, {shards}; offload = "optimizer" keeps the rest in host memory'
        if place.offloaded
        else f"weights, gradients and optimizer state, {shards}"
    )
    raise ScenarioError(
        source,
        f"island.{replica.index}.gpus",
        f"a replica of island '{replica.name}' does not fit: it needs {need_gb:.4g} GB per "
        f"accelerator ({parameters:.4g} parameters x {place.accelerator_bytes:g} B of {held}) "
        f"and one accelerator has {memory_gb:g} GB ({whose}); give gpus >= "
        f"{gpus_to_fit(parameters, place.accelerator_bytes, memory_gb)} (FSDP shards the "
        f"{'weights' if place.offloaded else 'state'} over them), "
        f"{offload_hint(replica, memory_gb)}or a smaller model (activations not counted: see "
        "docs/limits.md)",
    )


def offload_hint(replica: Replica, memory_gb: float) -> str:
    """``offload = "optimizer"`` as a remedy, where the weights alone fit these accelerators."""
    weights_gb = needed_gb(replica.parameters, replica.place.weights_bytes, replica.gpus)
    if replica.place.offloaded or weights_gb > memory_gb:
        return ""
    return f'offload = "optimizer" ({weights_gb:.4g} GB of weights per accelerator), '


def check_host_fits(replica: Replica, host_memory_gb: float | None, source: str) -> None:
    """Refuse the island when the state its replica offloads exceeds the worker's host memory
    (``island.host_memory_gb``, all its hosts together: the state is not sharded further);
    None: not known, not checked."""
    if host_memory_gb is None or not replica.place.offloaded:
        return
    need_gb = needed_gb(replica.parameters, replica.place.host_bytes, 1)
    if need_gb <= host_memory_gb:
        return
    raise ScenarioError(
        source,
        f"island.{replica.index}.host_memory_gb",
        f"the offloaded state of a replica of island '{replica.name}' does not fit its host: it "
        f"needs {need_gb:.4g} GB ({replica.parameters:.4g} parameters x "
        f"{replica.place.host_bytes:g} B of gradients and optimizer state, the weights staying on "
        f"the accelerators) and the worker's hosts have {host_memory_gb:g} GB; give a worker with "
        "more host memory, or a smaller model",
    )
