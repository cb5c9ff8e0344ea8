"""Wire formats for exchanged tensors, and the quantised all-reduce (average) built on them.

Formats (``bits``): 32 = fp32; 16 = bf16; 8 = int8 and 4 = int4, both symmetric with one fp32 scale
per block of ``BLOCK_VALUES`` values: s = max|x| / q_max, q = round(x / s) clipped to [-q_max, q_max]
(q_max = 127 for int8, 7 for int4; two int4 codes per byte). Decoding is q * s, so the error of a
value is at most s / 2 = max|x_block| / (2 q_max).

The average is a reduce-scatter followed by an all-gather of *encoded* chunks (what a ring does, in
two all-to-all style passes): every member encodes chunk j of its tensor and sends it to member j;
member j decodes the M contributions, sums them in fp32 in member order and divides by M; it encodes
that mean and all members all-gather the encoded means and decode them. Each member therefore sends
(M-1) encoded chunks in each pass, 2(M-1)/M of the encoded payload, as a ring all-reduce does
(BRIEF, "The problem"), and every member ends with bitwise the same result.
"""

from __future__ import annotations

import math

import torch

from .group import Group

BLOCK_VALUES = 128
SCALE_BYTES = 4
INT_MAX = {8: 127, 4: 7}
WIRE_BITS = (32, 16, 8, 4)


def encoded_bytes(values: int, bits: int) -> int:
    """Bytes on the wire for ``values`` values (a multiple of ``BLOCK_VALUES``) in format ``bits``."""
    scales = values // BLOCK_VALUES * SCALE_BYTES if bits in INT_MAX else 0
    return values * bits // 8 + scales


def encode(x: torch.Tensor, bits: int) -> torch.Tensor:
    """A 1-D fp32 tensor (length a multiple of ``BLOCK_VALUES``) as a 1-D uint8 wire buffer."""
    if bits == 32:
        return x.float().contiguous().view(torch.uint8).clone()
    if bits == 16:
        return x.to(torch.bfloat16).view(torch.uint8)
    q_max = INT_MAX[bits]
    blocks = x.float().view(-1, BLOCK_VALUES)
    scale = blocks.abs().amax(dim=1) / q_max
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(blocks / safe[:, None]).clamp_(-q_max, q_max)
    if bits == 8:
        codes = q.to(torch.int8).view(torch.uint8).flatten()
    else:
        nibbles = (q + 8).to(torch.uint8)
        codes = (nibbles[:, 0::2] | (nibbles[:, 1::2] << 4)).flatten()
    return torch.cat([codes, scale.view(torch.uint8)])


def decode(data: torch.Tensor, bits: int, values: int) -> torch.Tensor:
    """The fp32 values of a wire buffer made by ``encode``."""
    if bits == 32:
        return data.view(torch.float32).clone()
    if bits == 16:
        return data.view(torch.bfloat16).float()
    code_bytes = values * bits // 8
    scale = data[code_bytes:].view(torch.float32)
    codes = data[:code_bytes]
    if bits == 8:
        q = codes.view(torch.int8).float().view(-1, BLOCK_VALUES)
    else:
        low = (codes & 0x0F).float() - 8
        high = (codes >> 4).float() - 8
        q = torch.stack([low, high], dim=1).view(-1, BLOCK_VALUES)
    return (q * scale[:, None]).flatten()


def padded_length(values: int, parts: int) -> int:
    """The smallest length >= ``values`` that splits into ``parts`` chunks of whole blocks."""
    unit = parts * BLOCK_VALUES
    return max(1, math.ceil(values / unit)) * unit


def average(x: torch.Tensor, group: Group, bits: int) -> tuple[torch.Tensor, int]:
    """Mean of ``x`` over the group's members with ``bits`` on the wire; returns (mean, bytes sent)."""
    members = group.size
    values = x.numel()
    padded = torch.zeros(padded_length(values, members), dtype=torch.float32, device=x.device)
    padded[:values] = x.flatten()
    chunk = padded.numel() // members
    outgoing = [encode(part, bits) for part in padded.view(members, chunk)]
    incoming = group.all_to_all(outgoing)
    mean = decode(incoming[0], bits, chunk)
    for data in incoming[1:]:
        mean += decode(data, bits, chunk)
    mean /= members
    gathered = group.all_gather(encode(mean, bits))
    result = torch.cat([decode(data, bits, chunk) for data in gathered])[:values]
    sent_bytes = (members - 1) * (outgoing[0].numel() + gathered[0].numel())
    return result.view_as(x), sent_bytes
