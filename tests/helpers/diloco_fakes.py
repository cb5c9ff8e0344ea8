"""A fake transport and board for DiLoCo's prepare and perform, without a world."""

from __future__ import annotations

from collections import defaultdict
from itertools import count
from types import SimpleNamespace

import torch
from torch import nn

from islands.schedules import SyncPoint
from islands.trainer.core.diloco import DiLoCo
from islands.trainer.core.outer import Fragment
from islands.trainer.exchange.robust import Verdict
from islands.trainer.exchange.sync import Exchange

AVERAGE = SimpleNamespace(outer_optimizer="average")


class Board:
    """What the islands put on the wire, by (outer step, fragment): island -> delta (None: no
    contribution)."""

    def __init__(self):
        self.posted: dict[tuple[int, int], dict[int, torch.Tensor | None]] = defaultdict(dict)


class FakeTransport:
    """An island's exchanges through a ``Board``: the mean of the contributions posted so far; every
    call is logged in order."""

    def __init__(self, board: Board, island: int):
        self.board, self.island = board, island
        self.log: list[tuple] = []

    def reach(self, step, contributes):
        self.log.append(("reach", step))

    def launch(self, step, point, delta, contributes):
        key = (point.outer_step, point.fragment)
        self.board.posted[key][self.island] = delta.clone() if contributes else None
        self.log.append(("launch", key))
        return key

    def collect(self, point, handle):
        assert handle == (point.outer_step, point.fragment)
        posted = self.board.posted[handle]
        deltas = [delta for delta in posted.values() if delta is not None]
        self.log.append(("collect", handle))
        verdict = Verdict(tuple(delta is not None for delta in posted.values()), {})
        return Exchange(torch.stack(deltas).mean(0), 0.0, 0.0, 0, verdict)

    def applied(self, point):
        self.log.append(("applied", (point.outer_step, point.fragment)))


def point(outer_step, launch_step, apply_step, fragment=0):
    return SyncPoint(outer_step, fragment, launch_step, apply_step, payload_bytes=0.0, values=0.0)


def plan_of(points):
    """``config.sync_plan``'s shape: (launches, applies) keyed by inner step."""
    launches, applies = defaultdict(list), defaultdict(list)
    for p in points:
        launches[p.launch_step].append(p)
        applies[p.apply_step].append(p)
    return launches, applies


def island(start, board, index, points=(), spec=AVERAGE, alpha=0.0):
    params = [nn.Parameter(start.clone())]
    optimizer = torch.optim.AdamW(params, lr=0.1)
    fragment = Fragment(0, params, spec)
    clock = count()
    return DiLoCo(
        optimizer,
        [fragment],
        FakeTransport(board, index),
        schedule=plan_of(points),
        alpha=alpha,
        island=index,
        now=lambda: float(next(clock)),
    )


def set_local(diloco, weights):
    with torch.no_grad():
        diloco.fragments[0].params[0].copy_(weights)


def global_(diloco):
    return diloco.fragments[0].global_params[0]
