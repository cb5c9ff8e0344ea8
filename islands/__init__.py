"""islands: predict, then measure, low-communication training across islands of compute.

The command ``islands`` is a thin layer over this API:

    >>> from islands.scenarios import load
    >>> from islands.simulator import simulate
    >>> result = simulate(load("worked-example"))
    >>> result.summary["compute_utilisation"]
"""

__version__ = "0.1.0"
