"""Peak dense bf16 tensor throughput of common accelerators, in FLOP/s, from the vendors' datasheets.

Used to derive an island's step time from ``gpus``, ``gpu`` and ``mfu`` (see ``derived_step_time_s``).
A scenario's ``[accelerators]`` table adds entries or overrides these.
"""

from __future__ import annotations

PEAK_BF16_FLOPS = {
    "H200": 989e12,      # NVIDIA H200 SXM datasheet, BF16 Tensor Core, dense
    "H100": 989e12,      # NVIDIA H100 SXM datasheet, BF16 Tensor Core, dense (1,979 with sparsity)
    "H100-PCIE": 756e12,  # NVIDIA H100 PCIe datasheet, dense
    "A100": 312e12,      # NVIDIA A100 datasheet, BF16 Tensor Core, dense
    "L40S": 362e12,      # NVIDIA L40S datasheet, BF16 Tensor Core, dense (733 with sparsity)
    "RTX4090": 165.2e12,  # NVIDIA Ada whitepaper, GeForce RTX 4090, BF16 with FP32 accumulate, dense
    "RTX3090": 71e12,    # NVIDIA Ampere GA102 whitepaper, RTX 3090, BF16 with FP32 accumulate, dense
    "MI300X": 1307e12,   # AMD Instinct MI300X datasheet, BF16, dense
}

FLOPS_PER_PARAM_PER_TOKEN = 6  # forward + backward of a dense transformer (Kaplan et al. 2020, eq. 2.1)


def derived_step_time_s(parameters: float, tokens_per_step: float, gpus: int, peak_flops: float,
                        mfu: float) -> float:
    """One inner step's time: 6 * N * tokens / (gpus * peak FLOP/s * MFU)."""
    return FLOPS_PER_PARAM_PER_TOKEN * parameters * tokens_per_step / (gpus * peak_flops * mfu)
