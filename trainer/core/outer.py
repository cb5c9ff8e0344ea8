"""The outer side of DiLoCo: fragments, pseudo-gradients, outer optimizers and the merge.

For a fragment with global weights theta_g (an fp32 copy, identical on every island) and local
weights theta_l after some inner steps, the pseudo-gradient is

    delta = theta_g - theta_l                                  (DiLoCo, Douillard et al. 2023, alg. 1)

averaged over the islands, and the outer optimizer treats it as the gradient of theta_g. With
SGD + Nesterov (lr eta, momentum mu, torch's formulation):

    b <- mu * b + delta;    theta_g <- theta_g - eta * (delta + mu * b)

and with plain averaging (eta = 1, mu = 0) theta_g becomes the mean of the islands' local weights.
After the outer step every island adopts the global weights, mixed with its local ones by alpha in
Streaming DiLoCo: theta_l <- alpha * theta_l + (1 - alpha) * theta_g (alpha = 0: adopt).

Under top-k compression with error feedback (SparseLoCo, Sarfi et al. 2025, arXiv:2508.15706) each
island keeps its own buffer e per fragment: it sends the top-k of e <- beta e + delta
(``accumulate``), and what its payload decoded to leaves e (``keep_unsent``); the averaged payloads
are the outer gradient, with no outer momentum unless one is set (``trainer_keys.with_outer_defaults``).

Fragments are the schedule's layer groups (``Schedule.fragment_of_layer``, strided: block i belongs
to fragment i mod P), with every parameter in its layer by ``schedules.layout.layer_of``: the token
embedding (tied to the output head) and the position embedding beside the first block, the final
LayerNorm beside the last. The simulator sizes its fragments by the same rule.
"""

from __future__ import annotations

import torch
from torch import nn

from islands.scenarios.trainer_keys import TrainerSpec
from islands.schedules import Schedule
from islands.schedules.layout import layer_of


def named_fragments(
    model: nn.Module, n_layer: int, fragments: int, schedule: Schedule
) -> list[list[tuple[str, nn.Parameter]]]:
    """The model's (name, parameter) pairs by fragment, as the schedule splits the layers."""
    groups: list[list[tuple[str, nn.Parameter]]] = [[] for _ in range(fragments)]
    for name, param in model.named_parameters():
        groups[schedule.fragment_of_layer(layer_of(name, n_layer), fragments)].append((name, param))
    return groups


def split_fragments(
    model: nn.Module, n_layer: int, fragments: int, schedule: Schedule
) -> list[list[nn.Parameter]]:
    """The model's parameters by fragment, as the schedule splits the layers."""
    return [
        [param for _, param in group]
        for group in named_fragments(model, n_layer, fragments, schedule)
    ]


def make_outer_optimizer(params: list[torch.Tensor], spec: TrainerSpec) -> torch.optim.Optimizer:
    """SGD + Nesterov (plain SGD when momentum is 0), plain averaging (SGD lr 1), or AdamW."""
    if spec.outer_optimizer == "average":
        return torch.optim.SGD(params, lr=1.0, momentum=0.0)
    if spec.outer_optimizer == "adamw":
        return torch.optim.AdamW(params, lr=spec.outer_lr, weight_decay=0.0)
    momentum = spec.outer_momentum
    return torch.optim.SGD(params, lr=spec.outer_lr, momentum=momentum, nesterov=momentum > 0)


class Fragment:
    """One fragment: the live local parameters, their fp32 global copy and its outer optimizer."""

    def __init__(
        self,
        index: int,
        params: list[nn.Parameter],
        spec: TrainerSpec,
        error_feedback: float = 0.0,
    ):
        """``error_feedback``: beta of this island's error-feedback buffer (0: none)."""
        self.index = index
        self.params = params
        self.numels = [p.numel() for p in params]
        self.global_params = [p.detach().float().clone() for p in params]
        self.optimizer = make_outer_optimizer(self.global_params, spec)
        self.applied = 0
        self.own_delta: torch.Tensor | None = None  # eager updates: this island's last delta
        self.error_feedback = error_feedback
        self.error = (
            torch.zeros(self.numel, device=self.global_params[0].device)
            if error_feedback > 0
            else None
        )

    @property
    def numel(self) -> int:
        return sum(self.numels)

    def pseudo_gradient(self) -> torch.Tensor:
        """delta = theta_global - theta_local, flattened to one fp32 vector."""
        with torch.no_grad():
            return torch.cat(
                [(g - p.float()).flatten() for g, p in zip(self.global_params, self.params)]
            )

    def accumulate(self, delta: torch.Tensor) -> torch.Tensor:
        """What this island compresses: e <- beta e + delta (the buffer itself), or delta without
        error feedback."""
        if self.error is None:
            return delta
        return self.error.mul_(self.error_feedback).add_(delta)

    def keep_unsent(self, sent: torch.Tensor) -> None:
        """e <- e - sent: what the payload carried leaves the buffer, the rest waits for a later round."""
        if self.error is not None:
            self.error.sub_(sent)

    def drop_error(self) -> None:
        """Empty the buffer (its island's delta was not finite: the buffer holds it too)."""
        if self.error is not None:
            self.error.zero_()

    def apply(self, mean_delta: torch.Tensor, alpha: float) -> None:
        """Outer step with the averaged pseudo-gradient, then merge into the local weights."""
        self.outer_step(mean_delta)
        self.merge(alpha)
        self.applied += 1

    def outer_step(self, mean_delta: torch.Tensor) -> None:
        for g, part in zip(self.global_params, mean_delta.split(self.numels)):
            g.grad = part.view_as(g).to(g.dtype)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def adopt(self, global_flat: torch.Tensor) -> None:
        """Hold ``global_flat`` as the global weights (Decoupled DiLoCo's syncer stepped them) and
        train from them: theta_l <- theta_g."""
        with torch.no_grad():
            for g, part in zip(self.global_params, global_flat.split(self.numels)):
                g.copy_(part.view_as(g))
        self.merge(0.0)
        self.applied += 1

    def merge(self, alpha: float) -> None:
        """theta_l <- alpha * theta_l + (1 - alpha) * theta_g (a plain copy when alpha = 0)."""
        with torch.no_grad():
            for p, g in zip(self.params, self.global_params):
                if alpha:
                    p.mul_(alpha).add_(g.to(p.dtype), alpha=1 - alpha)
                else:
                    p.copy_(g)

    def state_dict(self) -> dict:
        return {
            "global": [g.detach().clone() for g in self.global_params],
            "optimizer": self.optimizer.state_dict(),
            "applied": self.applied,
            "own_delta": self.own_delta,
            "error": self.error,
        }

    def load_state_dict(self, state: dict) -> None:
        with torch.no_grad():
            for g, saved in zip(self.global_params, state["global"]):
                g.copy_(saved)
        self.optimizer.load_state_dict(state["optimizer"])
        self.applied = state["applied"]
        self.own_delta = state.get("own_delta")
        if self.error is not None and state.get("error") is not None:
            self.error.copy_(state["error"])


def build_fragments(
    model: nn.Module,
    n_layer: int,
    fragments: int,
    schedule: Schedule,
    spec: TrainerSpec,
    error_feedback: float = 0.0,
) -> list[Fragment]:
    groups = split_fragments(model, n_layer, fragments, schedule)
    return [Fragment(i, params, spec, error_feedback) for i, params in enumerate(groups)]
