"""Scenario files: one TOML format for islands, their links, the model and the schedule.

>>> from islands.scenarios import load
>>> scenario = load("worked-example", overrides=["schedule.inner_steps=100"])
"""

from .errors import ScenarioError
from .loader import bundled_names, from_dict, load, resolve
from .model import IslandSpec, ModelSpec, NetworkSpec, Scenario, ScheduleSpec, Worker
from .source import ScenarioSource, Variants, as_source

__all__ = [
    "IslandSpec",
    "ModelSpec",
    "NetworkSpec",
    "Scenario",
    "ScenarioError",
    "ScenarioSource",
    "ScheduleSpec",
    "Variants",
    "Worker",
    "as_source",
    "bundled_names",
    "from_dict",
    "load",
    "resolve",
]
