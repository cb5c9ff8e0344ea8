"""What ``make demo`` writes besides its table: the bandwidth plot and the report of a scenario."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from islands.io import safe_name
from islands.scenarios import ScenarioSource, as_source
from islands.simulator import SimResult

from ..plots.bandwidth import bandwidth_figure
from ..plots.style import save_figure
from ..side_by_side import simulate_schedules
from .html_report import build_report, write_report


def demo_outputs(
    scenario: str | Path | ScenarioSource,
    out_dir: Path,
    results: Mapping[str, SimResult] | None = None,
) -> dict[str, Path]:
    """Write ``<name>-bandwidth.png`` and ``<name>-report.html`` into ``out_dir``; return their paths.

    ``results``: the schedules already simulated at equal work (``simulate_schedules``), if at hand.
    The scenario's name is made safe for a file name, so the files stay inside ``out_dir``.
    """
    out_dir = Path(out_dir)
    source = as_source(scenario)
    results = results or simulate_schedules(source)
    stem = safe_name(source.scenario.name)
    figure = bandwidth_figure(results, source.scenario)
    return {
        "bandwidth": save_figure(figure, out_dir / f"{stem}-bandwidth.png"),
        "report": write_report(
            out_dir / f"{stem}-report.html", build_report(source, results=results)
        ),
    }
