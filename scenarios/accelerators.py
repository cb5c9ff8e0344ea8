"""Common accelerators from the vendors' datasheets: peak dense bf16 tensor throughput, in FLOP/s,
memory, in GB (1e9 bytes, as the datasheets count it), and the link to the host, in GB/s each way.

Used to derive an island's step time from ``gpus``, ``gpu`` and ``mfu`` (see ``derived_step_time_s``),
to check that a replica fits (``scenarios/memory.py``) and to price the optimizer's offload to the host
(``scenarios/offload.py``). A scenario's ``[accelerators]`` table adds entries or overrides the FLOP/s;
``island.memory_gb`` gives or overrides the memory, ``island.host_link_gb_per_s`` the host link.
"""

from __future__ import annotations

PEAK_BF16_FLOPS = {
    "GB200": 2.5e15,  # NVIDIA GB200 NVL72 datasheet, per Blackwell GPU: FP16/BF16 Tensor Core 5 PFLOPS with sparsity
    "B200": 2.25e15,  # NVIDIA HGX B200 datasheet, per GPU: FP16/BF16 Tensor Core 4.5 PFLOPS with sparsity
    "H200": 989e12,  # NVIDIA H200 SXM datasheet, BF16 Tensor Core, dense
    "H100": 989e12,  # NVIDIA H100 SXM datasheet, BF16 Tensor Core, dense (1,979 with sparsity)
    "H100-PCIE": 756e12,  # NVIDIA H100 PCIe datasheet, dense
    "A100": 312e12,  # NVIDIA A100 datasheet, BF16 Tensor Core, dense
    "L40S": 362e12,  # NVIDIA L40S datasheet, BF16 Tensor Core, dense (733 with sparsity)
    "RTX4090": 165.2e12,  # NVIDIA Ada whitepaper, GeForce RTX 4090, BF16 with FP32 accumulate, dense
    "RTX3090": 71e12,  # NVIDIA Ampere GA102 whitepaper, RTX 3090, BF16 with FP32 accumulate, dense
    "MI325X": 1307.4e12,  # AMD Instinct MI325X datasheet, BF16, dense (2,614.9 with sparsity)
    "MI300X": 1307e12,  # AMD Instinct MI300X datasheet, BF16, dense
}

MEMORY_GB = {
    "GB200": 186.0,  # NVIDIA GB200 NVL72 datasheet: 186 GB HBM3e per GPU (13.4 TB over 72)
    "B200": 180.0,  # NVIDIA HGX B200 datasheet: 180 GB HBM3e per GPU (1.4 TB over 8)
    "H200": 141.0,  # NVIDIA H200 SXM datasheet: 141 GB HBM3e
    "H100": 80.0,  # NVIDIA H100 SXM datasheet: 80 GB HBM3
    "H100-PCIE": 80.0,  # NVIDIA H100 PCIe datasheet: 80 GB HBM2e
    "A100": 80.0,  # NVIDIA A100 datasheet: 80 GB HBM2e (the 40 GB card: island.memory_gb = 40)
    "L40S": 48.0,  # NVIDIA L40S datasheet: 48 GB GDDR6
    "RTX4090": 24.0,  # NVIDIA GeForce RTX 4090 specifications: 24 GB GDDR6X
    "RTX3090": 24.0,  # NVIDIA GeForce RTX 3090 specifications: 24 GB GDDR6X
    "MI325X": 256.0,  # AMD Instinct MI325X datasheet: 256 GB HBM3E
    "MI300X": 192.0,  # AMD Instinct MI300X datasheet: 192 GB HBM3
}

# The link between one accelerator and its host, GB/s each way: the datasheets give both directions
# together (PCIe Gen5 x16: 128 GB/s, Gen4 x16: 64 GB/s), which is halved here. Where the datasheet
# names the PCIe generation only, the same x16 link's figure is used. Left out where no datasheet gives
# it plainly (B200, GB200: a Grace CPU joins the GB200's GPUs by NVLink-C2C, not PCIe):
# island.host_link_gb_per_s gives it, as it does for an accelerator added in [accelerators].
HOST_LINK_GB_PER_S = {
    "H200": 64.0,  # NVIDIA H200 datasheet: PCIe Gen5 128 GB/s
    "H100": 64.0,  # NVIDIA H100 SXM datasheet: PCIe Gen5 128 GB/s
    "H100-PCIE": 64.0,  # NVIDIA H100 PCIe datasheet: PCIe Gen5 128 GB/s
    "A100": 32.0,  # NVIDIA A100 datasheet: PCIe Gen4 64 GB/s
    "L40S": 32.0,  # NVIDIA L40S datasheet: PCIe Gen4 x16 64 GB/s bidirectional
    "RTX4090": 32.0,  # NVIDIA GeForce RTX 4090 specifications: PCIe Gen 4 (x16: 64 GB/s)
    "RTX3090": 32.0,  # NVIDIA GeForce RTX 3090 specifications: PCIe Gen 4 (x16: 64 GB/s)
    "MI325X": 64.0,  # AMD Instinct MI325X datasheet: PCIe Gen 5 x16 (128 GB/s)
    "MI300X": 64.0,  # AMD Instinct MI300X datasheet: PCIe Gen 5 x16 (128 GB/s)
}

FLOPS_PER_PARAM_PER_TOKEN = (
    6  # forward + backward of a dense transformer (Kaplan et al. 2020, eq. 2.1)
)
BACKWARD_FLOPS_PER_PARAM_PER_TOKEN = 4  # of those 6: the backward pass, twice the forward's 2


def derived_step_time_s(
    parameters: float, tokens_per_step: float, gpus: int, peak_flops: float, mfu: float
) -> float:
    """One inner step's time: 6 * N * tokens / (gpus * peak FLOP/s * MFU)."""
    return FLOPS_PER_PARAM_PER_TOKEN * parameters * tokens_per_step / (gpus * peak_flops * mfu)
