"""Which layer each parameter belongs to, and so how many values each fragment holds.

Both executors split the model by layers, and the schedule maps layer l to a fragment
(``Schedule.fragment_of_layer``):

* the trainer's GPT (``layer_of``): block i is layer i; the token embedding (tied to the output head)
  and the position embedding go with layer 0, beside the first block; the final LayerNorm goes with
  the last layer;
* a planned model (the scenario's ``[model]``, ``planned_layer_values``): ``model.layers`` equal
  blocks of (parameters - embedding_parameters) / layers values, with ``model.embedding_parameters``
  beside layer 0, as in the trainer's GPT. Without ``model.layers`` the model is taken as evenly
  divisible: every one of P fragments holds parameters / P.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from islands.scenarios.model import ModelSpec

FragmentOfLayer = Callable[[int, int], int]  # (layer, fragments) -> fragment


EMBEDDINGS = (
    "wte.",
    "wpe.",
)  # name prefixes of the trainer's GPT's embeddings (layer 0, outside the blocks)


def layer_of(name: str, n_layer: int) -> int:
    """The layer of a parameter of the trainer's GPT, by its name in ``GPT.named_parameters()``."""
    if name.startswith("blocks."):
        return int(name.split(".")[1])
    if name.startswith("ln_f."):
        return n_layer - 1
    return 0


def planned_layer_values(model: ModelSpec) -> list[float] | None:
    """Values per layer of a scenario's model (the embeddings in layer 0); None without ``model.layers``."""
    if model.layers is None:
        return None
    block = (model.parameters - model.embedding_parameters) / model.layers
    return [
        block + (model.embedding_parameters if layer == 0 else 0.0) for layer in range(model.layers)
    ]


def split_by_layer(
    layer_values: Sequence[float], fragments: int, fragment_of_layer: FragmentOfLayer
) -> list[float]:
    """Values per fragment, given the values of each layer."""
    totals = [0.0] * fragments
    for layer, values in enumerate(layer_values):
        totals[fragment_of_layer(layer, fragments)] += values
    return totals


def fragment_values(
    model: ModelSpec, fragments: int, fragment_of_layer: FragmentOfLayer
) -> list[float]:
    """Values in each fragment of a scenario's model."""
    layers = planned_layer_values(model)
    if layers is None:
        return [model.parameters / fragments] * fragments
    return split_by_layer(layers, fragments, fragment_of_layer)
