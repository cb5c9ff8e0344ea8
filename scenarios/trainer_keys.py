"""The ``[trainer]`` section: what the real trainer needs beyond the schedule (the simulator ignores it).

Kept in its own module so the trainer's knobs grow here without touching the simulator's keys.
"""

from __future__ import annotations

from dataclasses import dataclass

from .spec import Key, at_least_one, non_negative, one_of, positive

OUTER_OPTIMIZERS = ("nesterov", "average", "adamw")

TRAINER_KEYS = {
    "ranks_per_island": Key("int", 1, at_least_one, "processes per island (data parallel inside the island)"),
    "n_layer": Key("int", 2, at_least_one, "transformer blocks of the small GPT"),
    "n_head": Key("int", 2, at_least_one, "attention heads"),
    "n_embd": Key("int", 64, at_least_one, "embedding width"),
    "block_size": Key("int", 64, at_least_one, "context length in bytes (byte-level tokens)"),
    "batch_size": Key("int", 8, at_least_one, "sequences per rank per inner step"),
    "lr": Key("float", 3e-3, positive, "inner AdamW peak learning rate"),
    "weight_decay": Key("float", 0.1, non_negative, "inner AdamW weight decay"),
    "grad_clip": Key("float", 1.0, non_negative, "gradient-norm clip (0 disables)"),
    "warmup_steps": Key("int", 10, non_negative, "inner learning-rate warmup steps"),
    "outer_optimizer": Key("str", "nesterov", one_of(*OUTER_OPTIMIZERS),
                           '"nesterov" (SGD + Nesterov), "average" (lr 1, no momentum) or "adamw"'),
    "outer_lr": Key("float", 0.7, positive, "outer learning rate"),
    "outer_momentum": Key("float", 0.9, non_negative, "outer Nesterov momentum"),
    "seed": Key("int", 0, non_negative, "seed for initialisation and data order"),
}


@dataclass(frozen=True)
class TrainerSpec:
    ranks_per_island: int = 1
    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 64
    block_size: int = 64
    batch_size: int = 8
    lr: float = 3e-3
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    warmup_steps: int = 10
    outer_optimizer: str = "nesterov"
    outer_lr: float = 0.7
    outer_momentum: float = 0.9
    seed: int = 0
