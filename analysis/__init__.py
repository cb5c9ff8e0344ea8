"""Analyses built on the simulator, by role: ``sweep`` (sweeps, their grids and tables, the goodput
grid), ``planner`` (the planner and its searches), ``quality`` (the loss prior and measured quality
profiles), ``plots`` and ``report`` (the HTML report, the Chrome trace). The modules at this level are
what the parts share: ``parallel``, ``progress_bar``, ``display_units``, ``link_rates`` and
``side_by_side`` (the schedules simulated at equal work).

    >>> from islands.analysis.sweep.runner import run_sweep
    >>> from islands.analysis.planner.plan import make_utilisation_plan
    >>> from islands.analysis import demo_outputs

Submodules import matplotlib only where they draw, so ``islands.analysis.sweep.runner`` stays light.
"""

from __future__ import annotations

from pathlib import Path


def demo_outputs(scenario_name: str, out_dir: Path) -> dict[str, Path]:
    """Write the bandwidth plot and the HTML report of a scenario into ``out_dir`` (for ``make demo``);
    return their paths by name (``bandwidth``, ``report``)."""
    from .report.demo_outputs import demo_outputs as write_outputs

    return write_outputs(scenario_name, out_dir)
