"""Optimizer offload (``island.offload = "optimizer"``): the time it adds to a derived step, and its
keys refused where they do nothing. Where the state lives is ``memory.py``'s.

Each inner step, each of a worker's ``gpus`` accelerators sends its shard of the gradients to the host
and gets its shard of the updated weights back, over its own host link, and the host CPUs step the
optimizer over the whole replica (ZeRO-Offload's schedule: Ren et al. 2021, arXiv 2101.06840, sections
4.1 and 5.1). With S = parameters x bytes_per_param / gpus the bytes of one shard, L one accelerator's
host link each way (``accelerators.HOST_LINK_GB_PER_S``, or ``island.host_link_gb_per_s``), R the
parameters the host steps per second (``island.host_optimizer_params_per_s``) and C the step's compute,
6 x parameters x tokens_per_step / (gpus x peak x mfu):

    offload_s = max(0, S / L - 4/6 x C) + max(parameters / R, S / L)

* the gradients go down during the backward pass (4 of the 6 FLOPs per parameter and token), each
  bucket as soon as it is reduced (section 4.1): only what outlasts the backward pass shows;
* the host's step starts once every gradient is there (clipping reads the global gradient norm, and
  mixed precision checks every gradient for inf and NaN), and the weights it updates go up chunk by
  chunk while it computes the next chunk (section 5.1): the longer of the two shows;
* the host's step does not overlap the next forward pass: the paper's one-step delayed parameter
  update (section 5.2) would hide it, but it changes the training (each step computes on weights one
  update old) and DeepSpeed's ``offload_optimizer`` does not offer it. A stack that runs it is priced by
  its measured ``step_time_s``.

Both terms are floors: a copy runs below its link's datasheet rate, and neither the chunks' tails nor a
copy of the gradients per micro-batch under gradient accumulation is counted. R has no datasheet: it
follows the host's cores, their memory bandwidth and the optimizer's code (DeepSpeed's CPU Adam runs
5-7x faster than PyTorch's, its tutorial says), so the user measures it. A ``step_time_s`` given is a
measurement, the offload in it: nothing is added, and the keys that price a derived step are refused.
The DiLoCo family's outer step runs on the host beside the master copy and moves no weights down; its
time, and the weights it sends back up once per sync, are ``exchange.outer_step_s``'s.
"""

from __future__ import annotations

from typing import Any

from .accelerators import (
    BACKWARD_FLOPS_PER_PARAM_PER_TOKEN,
    FLOPS_PER_PARAM_PER_TOKEN,
    HOST_LINK_GB_PER_S,
)
from .errors import ScenarioError
from .memory import BYTES_PER_GB, OPTIMIZER_OFFLOAD

BACKWARD_SHARE = BACKWARD_FLOPS_PER_PARAM_PER_TOKEN / FLOPS_PER_PARAM_PER_TOKEN
HOST_KEYS = ("host_memory_gb", "host_link_gb_per_s", "host_optimizer_params_per_s")
PRICING_KEYS = HOST_KEYS[1:]  # read only to derive a step time


def offload_step_s(
    parameters: float,
    bytes_per_param: float,
    gpus: int,
    compute_s: float,
    link_bytes_per_s: float,
    host_params_per_s: float,
) -> float:
    """Seconds offloading adds to one inner step of ``compute_s`` (the module's formula)."""
    shard_s = parameters * bytes_per_param / gpus / link_bytes_per_s
    hidden_down_s = min(shard_s, BACKWARD_SHARE * compute_s)
    return shard_s - hidden_down_s + max(parameters / host_params_per_s, shard_s)


def island_offload_s(
    values: dict[str, Any],
    parameters: float,
    bytes_per_param: float,
    compute_s: float,
    prefix: str,
    source: str,
) -> float:
    """What an island's offload adds to its derived step of ``compute_s`` (0 without offload)."""
    if values["offload"] != OPTIMIZER_OFFLOAD:
        return 0.0
    if values["host_optimizer_params_per_s"] is None:
        raise ScenarioError(
            source,
            prefix + "host_optimizer_params_per_s",
            'is required with offload = "optimizer" and a step time derived from gpu and mfu: the '
            "parameters the worker's host CPUs step per second (no datasheet gives it: time "
            "optimizer.step() on the host), or give step_time_s as measured",
        )
    return offload_step_s(
        parameters,
        bytes_per_param,
        values["gpus"],
        compute_s,
        host_link_gb_per_s(values, prefix, source) * BYTES_PER_GB,
        values["host_optimizer_params_per_s"],
    )


def host_link_gb_per_s(values: dict[str, Any], prefix: str, source: str) -> float:
    """``host_link_gb_per_s``, else the table's figure for ``gpu``."""
    if values["host_link_gb_per_s"] is not None:
        return float(values["host_link_gb_per_s"])
    if values["gpu"] in HOST_LINK_GB_PER_S:
        return HOST_LINK_GB_PER_S[values["gpu"]]
    raise ScenarioError(
        source,
        prefix + "host_link_gb_per_s",
        f'is required with offload = "optimizer": no datasheet figure for the host link of '
        f"'{values['gpu']}' is in the table (give one accelerator's link to its host, GB/s each way)",
    )


def check_offload_keys(
    values: dict[str, Any], memory_known: bool, prefix: str, source: str
) -> None:
    """Refuse an offload key that nothing reads: a host key without offload, a key that prices a
    derived step beside a measured ``step_time_s``, and an offload with nothing to check or price."""
    given = [key for key in HOST_KEYS if values[key] is not None]
    if values["offload"] != OPTIMIZER_OFFLOAD:
        if given:
            raise ScenarioError(
                source,
                prefix + given[0],
                'has no effect without offload = "optimizer": only an offloaded optimizer keeps '
                'state in host memory and copies over the host link; set offload = "optimizer", '
                "or remove it",
            )
        return
    if values["step_time_s"] is None:
        return
    priced = [key for key in PRICING_KEYS if values[key] is not None]
    if priced:
        raise ScenarioError(
            source,
            prefix + priced[0],
            "has no effect beside step_time_s: a given step time is measured, the offload's time "
            "in it; this key prices a step time derived from gpu, gpus and mfu (remove it)",
        )
    if not memory_known and values["host_memory_gb"] is None:
        raise ScenarioError(
            source,
            prefix + "offload",
            "has no effect here: the step time is given (measured, the offload's time in it) and "
            "no memory is known to check, neither the accelerator's (memory_gb) nor the host's "
            "(host_memory_gb); give one, or remove offload",
        )
