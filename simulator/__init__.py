"""The SimPy discrete-event model of islands, WAN links and training schedules, and the fast paths
that give its figures without events where a run allows (``players.py``).

    >>> from islands.scenarios import load
    >>> from islands.simulator import simulate
    >>> result = simulate(load("worked-example"))
    >>> result.summary["compute_utilisation"], len(result.trace)
"""

from .budget import DEFAULT_MAX_EVENTS, BudgetExceeded, guard
from .network.flows import network_model_for
from .players import PLAYER_NAMES, Player, chosen, play, simulate
from .result import SimResult
from .setup import RunSetup

__all__ = [
    "DEFAULT_MAX_EVENTS",
    "PLAYER_NAMES",
    "BudgetExceeded",
    "Player",
    "RunSetup",
    "SimResult",
    "chosen",
    "guard",
    "network_model_for",
    "play",
    "simulate",
]
