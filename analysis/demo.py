"""What ``make demo`` writes besides its table: the bandwidth plot and the report of a scenario."""

from __future__ import annotations

from pathlib import Path

from .compare import simulate_schedules
from .plot_bandwidth import bandwidth_figure
from .plot_style import save_png
from .report import build_report, write_report
from .scenario_source import ScenarioSource


def demo_outputs(scenario_name: str, out_dir: Path) -> dict[str, Path]:
    """Write ``<name>-bandwidth.png`` and ``<name>-report.html`` into ``out_dir``; return their paths."""
    out_dir = Path(out_dir)
    source = ScenarioSource.read(scenario_name)
    stem = source.scenario.name
    figure = bandwidth_figure(simulate_schedules(source), source.scenario)
    return {
        "bandwidth": save_png(figure, out_dir / f"{stem}-bandwidth.png"),
        "report": write_report(out_dir / f"{stem}-report.html", build_report(source)),
    }
