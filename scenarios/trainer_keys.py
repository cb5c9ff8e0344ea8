"""The ``[trainer]`` section: what the real trainer needs beyond the schedule. The simulator reads one
key of it, ``aggregation``, which changes the traffic: a robust one all-gathers every payload.

Kept in its own module so the trainer's knobs grow here without touching the simulator's keys.
Every key has a default, so a scenario written for the simulator alone also trains.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .spec import Key, between, one_of, positive_up_to

OUTER_OPTIMIZERS = ("nesterov", "average", "adamw")
# Each outer optimizer's published defaults, (outer_lr, outer_momentum), taken where the scenario sets
# neither. Nesterov: DiLoCo (Douillard et al. 2023, arXiv:2311.08105, section 3: lr 0.7, momentum
# 0.9). Plain averaging is FedAvg's (McMahan et al. 2017): the new global weights are the mean of the
# local ones, lr 1 and no momentum. AdamW: FedAdam's server optimizer (Reddi et al. 2021, "Adaptive
# Federated Optimization", arXiv:2003.00295, whose tuned server learning rates lie in 1e-3 to 1e-2):
# an Adam step moves every weight by about lr, so its lr is a distance per outer step, not a factor
# on the pseudo-gradient as SGD's is; 1e-3 is also a typical AdamW peak lr (momentum unused).
OUTER_DEFAULTS = {"nesterov": (0.7, 0.9), "average": (1.0, 0.0), "adamw": (1e-3, 0.0)}
INNER_OPTIMIZERS = ("adamw", "sgd")
DATA_SPLITS = ("iid", "files")
DEVICES = ("auto", "cpu", "cuda")
AGGREGATIONS = ("mean", "median", "trimmed_mean", "radial_directional")
TOPK_MEANS = ("senders", "workers")


def momentum(value: float) -> str | None:
    return (
        None
        if 0 <= value < 1
        else "must be in [0, 1): momentum of 1 or more never forgets and diverges"
    )


def unit_interval(value: float) -> str | None:
    return None if 0 <= value <= 1 else "must be in [0, 1]"


def fraction_below_half(value: float) -> str | None:
    return None if 0 <= value < 0.5 else "must be in [0, 0.5)"


def open_unit_interval(value: float) -> str | None:
    return None if 0 < value < 1 else "must be in (0, 1)"


TRAINER_KEYS = {
    "ranks_per_island": Key(
        "int", 1, between(1, 1024), "processes per island (data parallel inside the island)"
    ),
    "n_layer": Key("int", 2, between(1, 1024), "transformer blocks of the small GPT"),
    "n_head": Key("int", 2, between(1, 1024), "attention heads"),
    "n_embd": Key("int", 64, between(1, 65536), "embedding width"),
    "block_size": Key("int", 64, between(1, 65536), "context length in bytes (byte-level tokens)"),
    "batch_size": Key("int", 8, between(1, 65536), "sequences per rank per inner step"),
    "inner_optimizer": Key(
        "str",
        "adamw",
        one_of(*INNER_OPTIMIZERS),
        '"adamw" (the DiLoCo inner optimizer) or "sgd" (plain, for equivalence checks)',
    ),
    "lr": Key("float", 3e-3, positive_up_to(10), "inner peak learning rate"),
    "min_lr_ratio": Key("float", 0.1, unit_interval, "cosine decay floor as a fraction of lr"),
    "weight_decay": Key(
        "float", 0.1, between(0, 10), "inner weight decay (matrices and embeddings only)"
    ),
    "grad_clip": Key("float", 1.0, between(0, 1e6), "gradient-norm clip (0 disables)"),
    "warmup_steps": Key("int", 10, between(0, 1e9), "inner learning-rate warmup steps"),
    "outer_optimizer": Key(
        "str",
        "nesterov",
        one_of(*OUTER_OPTIMIZERS),
        '"nesterov" (SGD + Nesterov), "average" (lr 1, no momentum) or "adamw"',
    ),
    "outer_lr": Key(
        "float",
        None,
        positive_up_to(10),
        "outer learning rate (default: the outer optimizer's own, ``OUTER_DEFAULTS``)",
    ),
    "outer_momentum": Key(
        "float",
        None,
        momentum,
        "outer Nesterov momentum, 0: plain SGD (default: the outer optimizer's own)",
    ),
    "fragment_alpha": Key(
        "float",
        0.0,
        unit_interval,
        "streaming: local = alpha * local + (1 - alpha) * merged global (0 adopts the global)",
    ),
    "seed": Key("int", 0, between(0, 2**63 - 1), "seed for initialisation and data order"),
    "data_path": Key(
        "str", "", doc="file or folder of your own text (empty: Python's standard-library sources)"
    ),
    "data_split": Key(
        "str",
        "iid",
        one_of(*DATA_SPLITS),
        '"iid" (interleaved chunks per island) or "files" (whole files per island, non-IID)',
    ),
    "corpus_bytes": Key(
        "int", 2_000_000, between(1, 1e10), "bytes of the standard-library corpus to read"
    ),
    "val_fraction": Key(
        "float", 0.05, open_unit_interval, "fraction of the corpus (whole files) held out"
    ),
    "eval_batches": Key(
        "int", 4, between(1, 1e6), "validation batches per evaluation (same batches every time)"
    ),
    "checkpoint_every": Key(
        "int",
        10,
        between(0, 1e9),
        "checkpoint every K periods of inner_steps steps (0: only at the end)",
    ),
    "pace_step_time_s": Key(
        "float",
        0.0,
        between(0, 86400, " s"),
        "pad every inner step to this many seconds by sleeping (0: no pacing)",
    ),
    "pace_islands": Key(
        "bool", False, doc="pad each island's inner steps to its island.step_time_s"
    ),
    "device": Key("str", "auto", one_of(*DEVICES), '"auto" (CUDA when present), "cpu" or "cuda"'),
    "timeout_s": Key(
        "float",
        300.0,
        positive_up_to(604800, " s"),
        "seconds before a collective that never completes fails the run",
    ),
    "screen_norm_factor": Key(
        "float",
        10.0,
        between(0, 1e12),
        "exclude a pseudo-gradient whose norm is above this times the median of the "
        "others' (0: only NaN/Inf are excluded)",
    ),
    "aggregation": Key(
        "str",
        "mean",
        one_of(*AGGREGATIONS),
        '"mean" (ring average), "median" or "trimmed_mean" (coordinate-wise, all-gathered: '
        'the simulator prices (M-1) whole payloads per worker); decoupled: "mean" or '
        '"radial_directional" (the syncer\'s merge)',
    ),
    "trim_fraction": Key(
        "float",
        0.25,
        fraction_below_half,
        "trimmed_mean: fraction of the values dropped at each end of every coordinate",
    ),
    "topk_mean": Key(
        "str",
        "senders",
        one_of(*TOPK_MEANS),
        'top-k: each kept place averaged over the members whose payload kept it, "senders" '
        "(SparseLoCo's released code), or over every accepted member, zeros included, "
        '"workers" (Covenant-72B\'s eq. 2 as written)',
    ),
    "elastic": Key(
        "bool",
        False,
        doc="islands may die and join mid-run (on with [[event]] entries or "
        "present = false; needs ranks_per_island = 1)",
    ),
    "collective_timeout_s": Key(
        "float",
        10.0,
        positive_up_to(86400, " s"),
        "elastic: seconds before a cross-island collective gives up on a silent peer",
    ),
}


@dataclass(frozen=True)
class TrainerSpec:
    """The [trainer] section, validated; built from ``TRAINER_KEYS`` (the one place defaults live)."""

    ranks_per_island: int
    n_layer: int
    n_head: int
    n_embd: int
    block_size: int
    batch_size: int
    inner_optimizer: str
    lr: float
    min_lr_ratio: float
    weight_decay: float
    grad_clip: float
    warmup_steps: int
    outer_optimizer: str
    outer_lr: float
    outer_momentum: float
    fragment_alpha: float
    seed: int
    data_path: str
    data_split: str
    corpus_bytes: int
    val_fraction: float
    eval_batches: int
    checkpoint_every: int
    pace_step_time_s: float
    pace_islands: bool
    device: str
    timeout_s: float
    screen_norm_factor: float
    aggregation: str
    trim_fraction: float
    topk_mean: str
    elastic: bool
    collective_timeout_s: float


def with_outer_defaults(values: dict[str, Any], error_feedback: bool = False) -> dict[str, Any]:
    """``values`` with the outer optimizer's own default (``OUTER_DEFAULTS``) for an unset
    ``outer_lr`` or ``outer_momentum``. Under error feedback (``schedule.error_feedback`` > 0) an unset
    momentum is 0: the buffer stands in for the outer momentum (SparseLoCo, Sarfi et al. 2025,
    arXiv:2508.15706: theta <- theta - lr x the mean of the sent payloads); a momentum set is
    DiLoCo's outer Nesterov on that mean."""
    lr, beta = OUTER_DEFAULTS[values["outer_optimizer"]]
    beta = 0.0 if error_feedback else beta
    return {
        **values,
        "outer_lr": lr if values["outer_lr"] is None else values["outer_lr"],
        "outer_momentum": beta if values["outer_momentum"] is None else values["outer_momentum"],
    }


def outer_error(spec: TrainerSpec) -> tuple[str, str] | None:
    """(key, rule) where the outer settings contradict the optimizer: plain averaging is lr 1 with no
    momentum by definition (SGD with ``outer_lr`` and ``outer_momentum`` is "nesterov")."""
    if (
        spec.outer_optimizer == "average"
        and (spec.outer_lr, spec.outer_momentum) != OUTER_DEFAULTS["average"]
    ):
        key = "outer_lr" if spec.outer_lr != 1.0 else "outer_momentum"
        return key, (
            '"average" sets the global weights to the mean of the islands\' (lr 1, momentum 0); for '
            'another lr or momentum set outer_optimizer = "nesterov" (outer_momentum = 0: plain SGD)'
        )
    return None


def trainer_spec(**values: Any) -> TrainerSpec:
    """A ``TrainerSpec`` with every key's default, updated by ``values``."""
    return TrainerSpec(
        **with_outer_defaults(
            {**{name: key.default for name, key in TRAINER_KEYS.items()}, **values}
        )
    )
