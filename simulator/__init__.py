"""The SimPy discrete-event model of islands, WAN links and training schedules.

    >>> from islands.scenarios import load
    >>> from islands.simulator import simulate
    >>> result = simulate(load("worked-example"))
    >>> result.summary["compute_utilisation"], len(result.trace)
"""

from .budget import DEFAULT_MAX_EVENTS, BudgetExceeded, guard
from .engine import Simulation, network_model_for, simulate
from .result import SimResult

__all__ = ["DEFAULT_MAX_EVENTS", "BudgetExceeded", "SimResult", "Simulation", "guard", "network_model_for", "simulate"]
