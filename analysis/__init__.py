"""Analyses built on the simulator: sweeps, the planner, plots, Chrome traces and the HTML report.

    >>> from islands.analysis.sweep import run_sweep
    >>> from islands.analysis.plan import make_utilisation_plan
    >>> from islands.analysis import demo_outputs

Submodules import matplotlib only where they draw, so ``islands.analysis.sweep`` stays light.
"""

from __future__ import annotations

from pathlib import Path


def demo_outputs(scenario_name: str, out_dir: Path) -> dict[str, Path]:
    """Write the bandwidth plot and the HTML report of a scenario into ``out_dir`` (for ``make demo``);
    return their paths by name (``bandwidth``, ``report``)."""
    from .demo import demo_outputs as write_outputs

    return write_outputs(scenario_name, out_dir)
