"""The processes a trainer trains with, behind one interface: ``World``.

The ``Trainer`` (``loop.py``) runs the inner steps and the schedule; whatever else involves the other
processes it asks its world, through four ports: ``Peers`` (the groups, the members, who reports, how
the exchanges travel), ``Door`` (initial weights, agreeing on a resume and on time zero, entering and
what to adopt), ``Rounds`` (between steps, evaluation, the end) and ``Commits`` (checkpoints).

* ``FixedWorld``: a plain run, every island from start to end over fixed groups (``fixed.py``;
  threads in the unit tests).
* ``elastic/world.py``'s ``ElasticWorld``: islands that die and join mid-run, through the membership.
* ``decoupled/learner.py``'s ``DecoupledWorld``: a Decoupled DiLoCo learner, which trains with nobody but the syncer.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from ..config import RunPlan
from ..exchange.group import Group, Summing
from ..exchange.object_store import ObjectStore
from ..exchange.sync import Exchanger
from . import checkpoint
from .diloco import ExchangerTransport, Transport
from .outer import Fragment
from .tracing import PAUSE_MARGIN_S, Recorder, RowsSink, build_summary, island_rows, write_outputs


@dataclass
class Groups:
    """The collectives one process takes part in (``intra_*`` are None with one rank per island),
    and the object store its top-k payloads go through under ``network.gather = "store"`` (None:
    none).

    ``world`` and ``intra_grad`` are used by the training thread, ``cross``, ``intra_sync`` and the
    store only by the exchange thread, so the two threads never interleave calls on one group."""

    world: Group
    cross: Group
    intra_grad: Summing | None = None
    intra_sync: Group | None = None
    store: ObjectStore | None = None


# How the trainer evaluates on a group: ``evaluate_on(group, evaluators)`` (``Trainer.evaluate_on``).
EvaluateOn = Callable[[Group, "list[int] | None"], float]


@dataclass(frozen=True)
class Entry:
    """A Decoupled DiLoCo learner that returns: the global weights to adopt (local = global, a fresh
    inner optimizer), the outer step it trains from next and the trace seconds their download took."""

    weights: torch.Tensor
    outer_step: int
    download_s: tuple[float, float]


@dataclass(frozen=True)
class Downloaded:
    """A joiner's download of the global state: the state (``Local.global_state``'s form), its size on
    the wire and the trace seconds it took."""

    state: dict[str, Any]
    size_bytes: int
    started_s: float
    done_s: float


@dataclass(frozen=True)
class Passive:
    """An elastic joiner admitted after inner step ``step``: a member without state, in every exchange
    with a zero contribution, until ``arrived()`` gives its download (None: not yet)."""

    step: int
    arrived: Callable[[], Downloaded | None]


@dataclass(frozen=True)
class Start:
    """How this rank enters the run, as its world decided (``World.entering``): a global state to adopt
    (an elastic member without a checkpoint, or an island's follower), a returning learner's catch-up,
    or a joiner's passive phase. The trace clock has been set; compute starts once it is entered."""

    adopt: dict[str, Any] | None = None
    catch_up: Entry | None = None
    passive: Passive | None = None


@dataclass(frozen=True)
class Local:
    """What a world may read of the rank it serves, during a call and only then (no world keeps it):
    the global state (``{"step", "fragments", "clock_s"}``) and whether a snapshot taken now holds
    every average applied before the next admission (``DiLoCo.quiet_until_admission``)."""

    global_state: Callable[[], dict[str, Any]]
    quiet: Callable[[], bool]


class Rejoin(Exception):
    """The world left this rank out of the run (an elastic island too late for a new epoch): it
    enters again, without state (``Trainer.run``)."""


@dataclass(frozen=True)
class Ending:
    """What the trainer hands its world at the end: the steps it trained, its trace rows, its
    ``run.json`` document and where the outputs go."""

    step: int
    rows: list
    run_info: dict[str, Any]
    out_dir: Path | None


class Peers(Protocol):
    """Who the trainer exchanges with: the groups of now (an elastic world replaces them at every new
    epoch), the island of each member, who reports, and how the fragments' exchanges travel."""

    groups: Groups

    def transport(
        self, exchanger: Exchanger, recorder: Recorder, fragments: list[Fragment]
    ) -> Transport:
        """How the fragments' exchanges travel (``recorder``: the trace, whose clock the world may
        read and whose rows it may add to; ``fragments``: the global copies the trainer holds)."""

    def members(self) -> list[int]:
        """The island of each member of the cross-island group, in member order."""

    def reports(self) -> bool:
        """Whether this process prints the console line and writes the metrics."""


class Door(Protocol):
    """How the trainer enters the run: the same initial weights, a resume everyone agrees on, time
    zero, what to adopt, and where its trace rows go."""

    def share_initial_weights(self, model: torch.nn.Module) -> None:
        """Every process starts from the same weights."""

    def holds_checkpoint(self, resume_dir: Path) -> bool:
        """Whether this rank has a checkpoint file to resume from (else it gets the state elsewhere)."""

    def agree_on_resume(self, error: str | None, state: dict[str, Any] | None) -> list[str | None]:
        """Every process's verdict on its checkpoint (None: fine)."""

    def start_s(self, state: dict[str, Any] | None) -> float:
        """Time zero of the trace clock (a resume: the checkpoint's clock)."""

    def entering(self, local: Local) -> contextlib.AbstractContextManager[Start | None]:
        """Enter the run: the block gets how (None: from the start, nothing to adopt) and runs the
        trainer's side of it (``Trainer.begin``); the world's part of the entry ends with the block."""

    def rows_sink(self) -> RowsSink | None:
        """Where the trainer's trace rows go as they are recorded, besides its own list (None: nowhere)."""


class Rounds(Protocol):
    """What the trainer does with the others between steps and at the ends of periods and of the run."""

    def between_steps(self, local: Local) -> None:
        """After every inner step and its syncs."""

    def publish_clock(self, paused: bool = False) -> None:
        """The trace clock is about to stand still (``paused``) or runs again."""

    def pause_s(self, paused_s: float) -> float:
        """How long the trace clock stands still on every process that shares it, given this one's
        pause so far (evaluation, checkpoint): the longest of theirs and a margin for this call."""

    def evaluate(self, evaluate_on: EvaluateOn) -> float:
        """The global model's validation loss, shared out over the processes that hold it."""

    def finish(self, ending: Ending) -> dict[str, Any] | None:
        """Gather every process's trace rows; the reporting process writes the outputs and returns the
        summary."""


class Commits(Protocol):
    """Checkpoints: this rank's file committed with everyone's, and what the world adds to it."""

    def save_checkpoint(self, period: int, out_dir: Path, state: dict[str, Any]) -> None:
        """Write this rank's checkpoint file (``state``); the run's ``LATEST`` moves once every rank's
        is written."""

    def state_dict(self) -> dict[str, Any]:
        """What the world adds to this rank's checkpoint."""

    def load_state(self, state: dict[str, Any]) -> None:
        """Take back what ``state_dict`` added."""


class World(Peers, Door, Rounds, Commits, Protocol):
    """What the trainer asks of the processes it trains with, as four narrow ports (the shape of
    torchft's Manager; each has an in-process fake in the tests, ``tests/helpers/world_fakes.py``). The
    trainer calls out, with what each call needs (what a world may read of the trainer's state:
    ``Local``, passed in); no world holds a reference to the trainer."""


def flatten(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.detach().float().flatten() for t in tensors])


def unflatten_into(flat: torch.Tensor, tensors: Sequence[torch.Tensor]) -> None:
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

    def __init__(self, groups: Groups, plan: RunPlan, rank: int):
        self.groups, self.plan, self.rank = groups, plan, rank

    def share_initial_weights(self, model: torch.nn.Module) -> None:
        broadcast_parameters(model, self.groups.world)

    def holds_checkpoint(self, resume_dir: Path) -> bool:
        return True

    def agree_on_resume(self, error: str | None, state: dict[str, Any] | None) -> list[str | None]:
        return self.groups.world.all_gather_object(error)

    def start_s(self, state: dict[str, Any] | None) -> float:
        """A barrier, then the latest of the processes' readings (resume: the checkpoint's)."""
        return max(self.groups.world.all_gather_object(state["clock_s"] if state else 0.0))

    def transport(
        self, exchanger: Exchanger, recorder: Recorder, fragments: list[Fragment]
    ) -> Transport:
        return ExchangerTransport(exchanger)

    def entering(self, local: Local) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def rows_sink(self) -> RowsSink | None:
        return None

    def between_steps(self, local: Local) -> None:
        pass

    def members(self) -> list[int]:
        return list(range(self.plan.islands))

    def reports(self) -> bool:
        return self.rank == 0

    def evaluate(self, evaluate_on: EvaluateOn) -> float:
        return evaluate_on(self.groups.world, None)

    def publish_clock(self, paused: bool = False) -> None:
        pass

    def pause_s(self, paused_s: float) -> float:
        return max(self.groups.world.all_gather_object(paused_s)) + PAUSE_MARGIN_S

    def save_checkpoint(self, period: int, out_dir: Path, state: dict[str, Any]) -> None:
        island, local_rank = divmod(self.rank, self.plan.ranks_per_island)
        checkpoint.save(
            out_dir,
            period,
            self.rank,
            island,
            state,
            self.groups.world,
            writes_latest=local_rank == 0,
        )

    def finish(self, ending: Ending) -> dict[str, Any] | None:
        rows_by_rank = self.groups.world.all_gather_object(ending.rows)
        if self.rank != 0:
            return None
        trace, summary = build_summary(
            self.plan, ending.step, island_rows(rows_by_rank, self.plan.ranks_per_island)
        )
        if ending.out_dir:
            write_outputs(ending.out_dir, trace, {"summary": summary, "run": ending.run_info})
        return summary

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state(self, state: dict[str, Any]) -> None:
        pass
