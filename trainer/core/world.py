"""The processes a trainer trains with, behind one interface: ``World``.

The ``Trainer`` (``loop.py``) runs the inner steps and the schedule; whatever else involves the other
processes it asks its world: how the run starts (initial weights, agreeing on a resume and on time
zero), how the fragments' exchanges travel (``transport``), which islands the cross-island group's
members are, who reports, how evaluation, checkpoints and the end of the run gather everyone, and
what the world adds to a checkpoint.

* ``FixedWorld``: a plain run, every island from start to end over fixed groups (``launch.py``;
  threads in the unit tests).
* ``elastic.ElasticWorld``: islands that die and join mid-run, through the membership.
* ``learner.DecoupledWorld``: a Decoupled DiLoCo learner, which trains with nobody but the syncer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol

import torch

from . import checkpoint
from .diloco import ExchangerTransport, Transport
from .group import Group
from .sync import Exchanger
from .tracing import build_summary, island_rows, write_outputs

if TYPE_CHECKING:
    from .loop import Trainer


@dataclass
class Groups:
    """The collectives one process takes part in (``intra_*`` are None with one rank per island).

    ``world`` and ``intra_grad`` are used by the training thread, ``cross`` and ``intra_sync`` only by
    the exchange thread, so the two threads never interleave calls on one group."""

    world: Group
    cross: Group
    intra_grad: Group | None = None
    intra_sync: Group | None = None


# How the trainer evaluates on a group: ``evaluate_on(group, evaluators)`` (``Trainer.evaluate_on``).
EvaluateOn = Callable[[Group, "list[int] | None"], float]


class World(Protocol):
    groups: Groups  # the groups of now (an elastic world replaces them at every new epoch)

    def attach(self, trainer: Trainer) -> None:
        """Called once, first thing, by the trainer this world serves."""

    def share_initial_weights(self, model: torch.nn.Module) -> None:
        """Every process starts from the same weights."""

    def holds_checkpoint(self, resume_dir: Path) -> bool:
        """Whether this rank has a checkpoint file to resume from (else it gets the state elsewhere)."""

    def agree_on_resume(self, error: str | None, state: dict[str, Any] | None) -> list[str | None]:
        """Every process's verdict on its checkpoint (None: fine)."""

    def start_s(self, state: dict[str, Any] | None) -> float:
        """Time zero of the trace clock (a resume: the checkpoint's clock)."""

    def transport(self, exchanger: Exchanger) -> Transport:
        """How the fragments' exchanges travel."""

    def run(self, train: Callable[[], None]) -> None:
        """Enter the run, then ``train()`` to the end (again, if the world requires it)."""

    def between_steps(self) -> None:
        """After every inner step and its syncs."""

    def members(self) -> list[int]:
        """The island of each member of the cross-island group, in member order."""

    def reports(self) -> bool:
        """Whether this process prints the console line and writes the metrics."""

    def evaluate(self, evaluate_on: EvaluateOn) -> float:
        """The global model's validation loss, shared out over the processes that hold it."""

    def publish_clock(self, paused: bool = False) -> None:
        """The trace clock is about to stand still (``paused``) or runs again."""

    def save_checkpoint(self, period: int) -> None:
        """Write this rank's checkpoint file; the run's ``LATEST`` moves once every rank's is written."""

    def finish(self) -> dict[str, Any] | None:
        """Gather every process's trace rows; the reporting process writes the outputs and returns the
        summary."""

    def state_dict(self) -> dict[str, Any]:
        """What the world adds to this rank's checkpoint."""

    def load_state(self, state: dict[str, Any]) -> None:
        """Take back what ``state_dict`` added."""


def flatten(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.detach().float().flatten() for t in tensors])


def unflatten_into(flat: torch.Tensor, tensors: list[torch.Tensor]) -> None:
    with torch.no_grad():
        for tensor, part in zip(tensors, flat.split([t.numel() for t in tensors])):
            tensor.copy_(part.view_as(tensor))


def broadcast_parameters(model: torch.nn.Module, world: Group) -> None:
    """Every process starts from rank 0's weights (on top of the shared seed)."""
    params = list(model.parameters())
    flat = flatten(params)
    world.broadcast_(flat, 0)
    unflatten_into(flat, params)


class FixedWorld:
    """A plain run: the same processes from start to end, over fixed groups."""

    def __init__(self, groups: Groups):
        self.groups = groups

    def attach(self, trainer: Trainer) -> None:
        self.trainer = trainer

    def share_initial_weights(self, model: torch.nn.Module) -> None:
        broadcast_parameters(model, self.groups.world)

    def holds_checkpoint(self, resume_dir: Path) -> bool:
        return True

    def agree_on_resume(self, error: str | None, state: dict[str, Any] | None) -> list[str | None]:
        return self.groups.world.all_gather_object(error)

    def start_s(self, state: dict[str, Any] | None) -> float:
        """A barrier, then the latest of the processes' readings (resume: the checkpoint's)."""
        return max(self.groups.world.all_gather_object(state["clock_s"] if state else 0.0))

    def transport(self, exchanger: Exchanger) -> Transport:
        return ExchangerTransport(exchanger)

    def run(self, train: Callable[[], None]) -> None:
        train()

    def between_steps(self) -> None:
        pass

    def members(self) -> list[int]:
        return list(range(self.trainer.plan.islands))

    def reports(self) -> bool:
        return self.trainer.rank == 0

    def evaluate(self, evaluate_on: EvaluateOn) -> float:
        return evaluate_on(self.groups.world, None)

    def publish_clock(self, paused: bool = False) -> None:
        pass

    def save_checkpoint(self, period: int) -> None:
        trainer = self.trainer
        checkpoint.save(trainer.out_dir, period, trainer.rank, trainer.island, trainer.state_dict(),
                        self.groups.world, writes_latest=trainer.local_rank == 0)

    def finish(self) -> dict[str, Any] | None:
        trainer = self.trainer
        rows_by_rank = self.groups.world.all_gather_object(trainer.recorder.rows)
        if trainer.rank != 0:
            return None
        trace, summary = build_summary(trainer.plan, trainer.step,
                                       island_rows(rows_by_rank, trainer.plan.ranks_per_island))
        if trainer.out_dir:
            write_outputs(trainer.out_dir, trace, {"summary": summary, "run": trainer.run_info()})
        return summary

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state(self, state: dict[str, Any]) -> None:
        pass
