"""The players of a run, in one place: each plays a ``RunSetup`` and returns a ``Played``.

SimGrid's way: interchangeable models behind one small interface. A player says why it cannot play a
setup (``fits``: None when it can, else the reason in words), what the run will cost it (``budget``:
refused in one line past ``--max-events``), whether it can give the trace and links tables asked for
(``check_outputs``, before the run) and plays it (``play``). ``simulate`` takes the first in
``PLAYERS`` that fits: the fast paths (``fast/``) where they give the event model's figures, the event
model (``events/``) for everything. A fast path that meets a state it does not cover returns None,
and the next player that fits plays the run; the summary's ``player`` names the one that did.
"""

from __future__ import annotations

import gc
from typing import Protocol

from islands.limits import DEFAULT_MAX_EVENTS
from islands.scenarios import Scenario, ScenarioError

from .budget import Budget
from .events.player import EVENT_PLAYER
from .fast.learners import LEARNERS
from .fast.lockstep import LOCKSTEP
from .fast.one_learner import ONE_LEARNER
from .fast.returning import RETURNING
from .played import Played
from .result import SimResult, result_of
from .setup import RunSetup


class Player(Protocol):
    name: str

    def fits(self, setup: RunSetup) -> str | None: ...

    def budget(self, setup: RunSetup) -> Budget: ...

    def check_outputs(self, setup: RunSetup, budget_: Budget, trace: bool, links: bool) -> None: ...

    def play(self, setup: RunSetup, budget_: Budget) -> Played | None: ...


PLAYERS: tuple[Player, ...] = (LOCKSTEP, ONE_LEARNER, LEARNERS, RETURNING, EVENT_PLAYER)
PLAYER_NAMES = tuple(player.name for player in PLAYERS)


def chosen(setup: RunSetup, name: str | None = None) -> Player:
    """The first player that fits ``setup``, or the one named (refused in one line when it does not fit)."""
    if name is None:
        return next(player for player in PLAYERS if player.fits(setup) is None)
    player = next((player for player in PLAYERS if player.name == name), None)
    if player is None:
        raise ScenarioError(
            setup.scenario.source,
            "--player",
            f"no player {name!r}: choose one of {', '.join(PLAYER_NAMES)}",
        )
    why = player.fits(setup)
    if why is not None:
        raise ScenarioError(
            setup.scenario.source, "--player", f"the {name} player cannot play this run: {why}"
        )
    return player


def play(setup: RunSetup, player: Player, budget_: Budget) -> SimResult:
    """``player``'s run of ``setup``, or where it meets a state it does not cover, the next player's
    that fits. Python's cyclic garbage collector is off meanwhile: a run allocates millions of events
    and rows and frees them by reference counting alone, and collections scanning the ever larger heap
    made a run's time grow faster than its size (a fleet of 2,000 islands under churn: 25% of the
    time, the same peak memory without them)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        later = PLAYERS[PLAYERS.index(player) + 1 :]
        played = player.play(setup, budget_)
        for fallback in (fallback for fallback in later if fallback.fits(setup) is None):
            if played is not None:
                break
            played = fallback.play(setup, fallback.budget(setup))
        assert played is not None, "the event model, the last player, fits and plays every run"
        return result_of(setup, played)
    finally:
        if collecting:
            gc.enable()


def simulate(
    scenario: Scenario,
    max_events: float = DEFAULT_MAX_EVENTS,
    group_replicas: bool = True,
    player: str | None = None,
) -> SimResult:
    """Play a scenario's schedule through the simulator.

    Raises ``ScenarioError`` before a run beyond ``max_events`` events (or float64 time), or past them.
    ``group_replicas=False`` runs every replica on its own (``replicas.py``; the same result, slower);
    ``player`` names the player (``PLAYER_NAMES``; "events" plays any run event by event: the same
    result as a fast path, slower, with its ``events`` counted)."""
    setup = RunSetup.of(scenario, max_events, group_replicas)
    first = chosen(setup, player)
    return play(setup, first, first.budget(setup))
