"""The same scenario under DDP, DiLoCo and Streaming DiLoCo, simulated side by side."""

from __future__ import annotations

from islands.simulator import SimResult, simulate

from .scenario_source import ScenarioSource


def simulate_schedules(source: ScenarioSource) -> dict[str, SimResult]:
    """One run per schedule (DDP reads ``outer_steps`` as its number of steps), in a fixed order."""
    return {algorithm: simulate(scenario) for algorithm, scenario in source.schedules().items()}
