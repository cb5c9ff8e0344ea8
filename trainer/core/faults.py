"""Faults on purpose, for the fault-tolerance tests and for users who want to see the defences work.

Deaths: ``ISLANDS_KILL_AT = "POINT:COUNT:ISLAND[,POINT:COUNT:ISLAND...]"`` makes island ISLAND's
process SIGKILL itself (no cleanup, no exception, as a crashed machine) the COUNT-th time (1-based)
it passes POINT. Several entries kill several islands, or one island at the first entry it reaches.
With several ranks per island every rank of the island that passes POINT dies there (all of them at
an inner step; the leader, local rank 0, at the points only it passes: the exchange, evaluation and
download points); ``ISLAND.LOCAL`` kills only the rank whose ``LOCAL_RANK`` is LOCAL, and its
island-mates then leave with it (``trainer/runtime/island.py``).

| point | where |
| --- | --- |
| ``inner-step`` | after an inner step's optimizer step, before the schedule's sync check |
| ``exchange-screen`` | an exchange starts: before the islands share their deltas' finite flags and norms |
| ``all-reduce`` | the reduce-scatter half of a cross-island average is done, the all-gather is not |
| ``exchange-vote`` | the exchange is done here, not yet committed by the members' vote |
| ``evaluate`` | the global model's evaluation, before its all-reduce |
| ``checkpoint-write`` | its checkpoint file is written to the temporary name, not yet renamed |
| ``download-source`` | a member serving the global state to a joiner has sent the length, not the state |
| ``download-joiner`` | a joiner has received the state's length, not the state |
| ``syncer-upload`` | a decoupled learner has sent a piece of its report's payload to the syncer, not the report |

Poison: ``ISLANDS_FAULT = "KIND@ISLAND:OUTER_STEP"`` replaces island ISLAND's contribution to outer
step OUTER_STEP (DDP: the step) before it is screened: ``nan`` (every value NaN), ``inf``, or
``scale:FACTOR`` (multiplied by FACTOR, e.g. ``scale:1e6``). The screening (``robust.screen``)
should exclude it and every island keeps a finite model.

Unset, every check is one dictionary look-up.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from islands.errors import UserError

from ..exchange.group import Group

KILL_VARIABLE = "ISLANDS_KILL_AT"
FAULT_VARIABLE = "ISLANDS_FAULT"
POINTS = (
    "inner-step",
    "exchange-screen",
    "all-reduce",
    "exchange-vote",
    "evaluate",
    "checkpoint-write",
    "download-source",
    "download-joiner",
    "syncer-upload",
)
passes: Counter = Counter()


@dataclass(frozen=True)
class KillAt:
    point: str
    count: int
    island: int
    local_rank: int | None = None  # None: every rank of the island

    def hits(self, point: str, island: int) -> bool:
        """Whether this entry names ``point`` for this process (of ``island``, at its LOCAL_RANK)."""
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        return (self.point, self.island) == (point, island) and self.local_rank in (
            None,
            local_rank,
        )


def parse_kills(setting: str) -> list[KillAt]:
    """``ISLANDS_KILL_AT``'s entries; one clear error for a malformed one."""
    kills = []
    for entry in filter(None, (part.strip() for part in setting.split(","))):
        parts = entry.split(":")
        where = parts[2].split(".") if len(parts) == 3 else []
        if (
            len(parts) != 3
            or parts[0] not in POINTS
            or not parts[1].isdigit()
            or len(where) > 2
            or not all(number.isdigit() for number in where)
        ):
            raise UserError(
                f"{KILL_VARIABLE}={setting!r}: each entry is POINT:COUNT:ISLAND or "
                f"POINT:COUNT:ISLAND.LOCAL_RANK with POINT one of {', '.join(POINTS)} (got {entry!r})"
            )
        local_rank = int(where[1]) if len(where) == 2 else None
        kills.append(KillAt(parts[0], int(parts[1]), int(where[0]), local_rank))
    return kills


def check_environment() -> None:
    """Parse both variables once, before any process starts: a malformed one is one line, not a
    traceback from whichever thread first passes a point."""
    if os.environ.get(KILL_VARIABLE):
        parse_kills(os.environ[KILL_VARIABLE])
    if os.environ.get(FAULT_VARIABLE):
        parse_poison(os.environ[FAULT_VARIABLE])


def kill_point(point: str, island: int) -> None:
    """SIGKILL this process if ``ISLANDS_KILL_AT`` names this point, this island and this pass."""
    setting = os.environ.get(KILL_VARIABLE)
    if not setting:
        return
    kills = [kill for kill in parse_kills(setting) if kill.hits(point, island)]
    if not kills:
        return
    passes[point] += 1
    if any(passes[point] == kill.count for kill in kills):
        os.kill(os.getpid(), signal.SIGKILL)


@dataclass(frozen=True)
class Poison:
    kind: str
    factor: float
    island: int
    outer_step: int


def parse_poison(setting: str) -> Poison:
    what, _, where = setting.partition("@")
    island, _, outer_step = where.partition(":")
    kind, _, factor = what.partition(":")
    valid = (kind in ("nan", "inf") and not factor) or (kind == "scale" and is_float(factor))
    if not (valid and island.isdigit() and outer_step.isdigit()):
        raise UserError(
            f"{FAULT_VARIABLE}={setting!r}: must be nan|inf|scale:FACTOR@ISLAND:OUTER_STEP, "
            f"e.g. scale:1e6@2:3"
        )
    return Poison(kind, float(factor) if factor else 1.0, int(island), int(outer_step))


def is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def poisoned(delta: torch.Tensor, island: int, outer_step: int) -> torch.Tensor:
    """``delta``, or the poison ``ISLANDS_FAULT`` puts in its place for this island and outer step."""
    setting = os.environ.get(FAULT_VARIABLE)
    if not setting:
        return delta
    poison = parse_poison(setting)
    if (poison.island, poison.outer_step) != (island, outer_step):
        return delta
    if poison.kind == "scale":
        return delta * poison.factor
    return torch.full_like(delta, float(poison.kind))


class KillableGroup:
    """A cross-island group that passes ``all-reduce`` after each all-to-all (the reduce-scatter)."""

    def __init__(self, inner: Group, island: int):
        self.inner = inner
        self.island = island
        self.rank = inner.rank
        self.size = inner.size

    def all_to_all(self, chunks: list[torch.Tensor]) -> list[torch.Tensor]:
        received = self.inner.all_to_all(chunks)
        kill_point("all-reduce", self.island)
        return received

    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        return self.inner.all_gather(tensor)

    def gather_from(
        self, tensor: torch.Tensor, senders: Sequence[int]
    ) -> list[torch.Tensor | None]:
        return self.inner.gather_from(tensor, senders)

    def all_reduce_sum_(self, tensor: torch.Tensor) -> None:
        self.inner.all_reduce_sum_(tensor)

    def broadcast_(self, tensor: torch.Tensor, src: int = 0) -> None:
        self.inner.broadcast_(tensor, src)

    def all_gather_object(self, value: Any) -> list[Any]:
        return self.inner.all_gather_object(value)

    def barrier(self) -> None:
        self.inner.barrier()


def killable(group: Group, island: int) -> Group:
    """``group`` wrapped for the ``all-reduce`` point when ``ISLANDS_KILL_AT`` is set, else itself."""
    return KillableGroup(group, island) if os.environ.get(KILL_VARIABLE) else group
