"""The event model as a player (``players.py``): it plays every run, event by event."""

from __future__ import annotations

from .. import budget
from ..budget import Budget
from ..played import Played
from ..setup import RunSetup
from .engine import EVENTS, Simulation


class EventPlayer:
    """Every worker a SimPy process (``engine.py``): any scenario, its rows kept."""

    name = EVENTS

    def fits(self, setup: RunSetup) -> str | None:
        return None

    def budget(self, setup: RunSetup) -> Budget:
        return budget.guard(setup.scenario, setup.max_events)

    def check_outputs(self, setup: RunSetup, budget_: Budget, trace: bool, links: bool) -> None:
        """An event run keeps its rows and transfers: the budget bounded them."""

    def play(self, setup: RunSetup, budget_: Budget) -> Played:
        return Simulation(setup, budget_).play()


EVENT_PLAYER = EventPlayer()
