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
DDP keeps none. Activations, buffers of exchanges in flight and the framework's own memory are out
of scope (docs/limits.md): the check is a floor, and a replica it admits may still not fit.
"""

from __future__ import annotations

import math

from islands.schedules import ADOPT, EAGER, GRADIENT, Schedule

from .errors import ScenarioError
from .trainer_keys import TrainerSpec

FP32_BYTES = 4
BYTES_PER_GB = 1e9  # datasheets count memory in GB of 1e9 bytes
OUTER_MOMENTS = {"nesterov": 1, "average": 0, "adamw": 2}  # fp32 tensors the outer optimizer keeps


def inner_bytes_per_param(bytes_per_param: float, inner_optimizer: str) -> float:
    """Weights, gradients, master copy and AdamW moments of one parameter (the module's formula)."""
    step_bytes = max(FP32_BYTES, bytes_per_param)
    master = step_bytes if bytes_per_param < step_bytes else 0.0
    moments = 2 * step_bytes if inner_optimizer == "adamw" else 0.0
    return 2 * bytes_per_param + master + moments


def outer_bytes_per_param(schedule: Schedule, trainer: TrainerSpec) -> float:
    """The DiLoCo family's outer state of one parameter on a worker's accelerators (none for DDP)."""
    if schedule.exchanged == GRADIENT:
        return 0.0
    if schedule.update == ADOPT:
        return FP32_BYTES
    moments = OUTER_MOMENTS[trainer.outer_optimizer]
    if trainer.outer_optimizer == "nesterov" and trainer.outer_momentum == 0:
        moments = 0  # torch's SGD keeps no buffer without momentum
    own_delta = 1 if schedule.update == EAGER else 0
    return FP32_BYTES * (1 + moments + own_delta)


def bytes_per_param(
    model_bytes_per_param: float, schedule: Schedule, trainer: TrainerSpec
) -> float:
    """Every byte of training state one parameter costs a worker, before sharding."""
    return inner_bytes_per_param(
        model_bytes_per_param, trainer.inner_optimizer
    ) + outer_bytes_per_param(schedule, trainer)


def needed_gb(parameters: float, per_param_bytes: float, gpus: int) -> float:
    """GB of training state on each of a worker's ``gpus`` accelerators: parameters x bytes / gpus."""
    return parameters * per_param_bytes / gpus / BYTES_PER_GB


def gpus_to_fit(parameters: float, per_param_bytes: float, memory_gb: float) -> int:
    """The fewest accelerators whose memory together holds a replica's training state."""
    return math.ceil(parameters * per_param_bytes / BYTES_PER_GB / memory_gb)


def check_replica_fits(
    index: int,
    name: str,
    parameters: float,
    per_param_bytes: float,
    gpus: int,
    memory: tuple[float, str] | None,
    source: str,
) -> None:
    """Refuse island ``index`` when its replica's training state, sharded over ``gpus``, exceeds the
    ``memory`` of one accelerator: (GB, where that figure comes from); None: not known, not checked."""
    if memory is None:
        return
    memory_gb, whose = memory
    need_gb = needed_gb(parameters, per_param_bytes, gpus)
    if need_gb <= memory_gb:
        return
    shards = "on 1 accelerator" if gpus == 1 else f"sharded over {gpus} accelerators"
    raise ScenarioError(
        source,
        f"island.{index}.gpus",
        f"a replica of island '{name}' does not fit: it needs {need_gb:.4g} GB per accelerator "
        f"({parameters:.4g} parameters x {per_param_bytes:g} B of weights, gradients and optimizer "
        f"state, {shards}) and one accelerator has {memory_gb:g} GB ({whose}); give gpus >= "
        f"{gpus_to_fit(parameters, per_param_bytes, memory_gb)} (FSDP shards the state over them), "
        "or a smaller model (activations not counted: see docs/limits.md)",
    )
