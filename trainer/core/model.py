"""A small GPT over bytes (vocabulary 256), nanoGPT-style, readable top to bottom.

Pre-norm transformer blocks (LayerNorm, causal self-attention, LayerNorm, 4x MLP with GELU), learned
position embeddings and an output head tied to the token embedding (Press & Wolf 2017), so the
embedding and the head are one tensor and always travel in the same fragment.

    >>> model = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=64, block_size=64))
    >>> loss = model(x, y)          # x, y: (batch, block_size) int64 byte ids
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

VOCAB_BYTES = 256
INIT_STD = 0.02


@dataclass(frozen=True)
class GPTConfig:
    block_size: int = 64
    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 64
    vocab_size: int = VOCAB_BYTES


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.n_head = config.n_head
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.proj = nn.Linear(config.n_embd, config.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=2)
        q, k, v = (
            t.view(batch, length, self.n_head, width // self.n_head).transpose(1, 2)
            for t in (q, k, v)
        )
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(batch, length, width))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.fc = nn.Linear(config.n_embd, 4 * config.n_embd)
        self.proj = nn.Linear(4 * config.n_embd, config.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x)))


class Block(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        if config.n_embd % config.n_head:
            raise ValueError(
                f"n_embd ({config.n_embd}) must be divisible by n_head ({config.n_head})"
            )
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy (nats per byte) of predicting ``targets`` from ``idx``."""
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(positions)
        for block in self.blocks:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.T
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def init_weights(model: GPT, seed: int) -> None:
    """GPT-2 initialisation from a private generator (no global RNG, so islands in threads agree).

    Weights ~ N(0, 0.02); the residual projections ~ N(0, 0.02 / sqrt(2 * n_layer)) (Radford et al.
    2019, section 2.3); biases 0, LayerNorm gains 1.
    """
    generator = torch.Generator().manual_seed(seed)
    residual_std = INIT_STD / math.sqrt(2 * model.config.n_layer)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(".bias"):
                param.zero_()
            elif ".ln_" in name or name.startswith("ln_"):
                param.fill_(1.0)
            else:
                std = residual_std if name.endswith("proj.weight") else INIT_STD
                param.copy_(torch.randn(param.shape, generator=generator) * std)


def build_model(config: GPTConfig, seed: int, device: torch.device | str = "cpu") -> GPT:
    model = GPT(config)
    init_weights(model, seed)
    return model.to(device)


def decay_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Optimizer parameter groups: weight decay on matrices and embeddings, none on biases and norms."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
