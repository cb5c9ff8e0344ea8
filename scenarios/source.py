"""A scenario kept as its parsed document, so that analyses can derive many variants of it.

A sweep or a planner needs the same scenario under many overrides (another H, another bandwidth).
``ScenarioSource`` holds the parsed TOML document, the user's own overrides and the scenario they
make (validated once, when read); ``variant(...)`` adds more overrides and validates the result with
the scenario loader. Every command reads its scenario through ``ScenarioSource.read``. It pickles,
so a worker process or a cluster executor can build variants without reading the file again.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from islands.limits import DEFAULT_MAX_EVENTS
from islands.schedules import SCHEDULES, switch_to

from .errors import ScenarioError
from .latencies import csv_path, inline_rtt_csv
from .loader import from_dict, read_document
from .model import Scenario
from .profile import apply_profile, read_profile

ALGORITHMS = tuple(SCHEDULES)  # the schedules an analysis compares: every registered one


@dataclass(frozen=True)
class ScenarioSource:
    """A parsed scenario document, its name for messages, the overrides applied to every variant and
    the simulator's resource guard (``max_events``) for every run an analysis makes of it."""

    document: dict[str, Any]
    source: str
    overrides: tuple[str, ...] = ()
    max_events: float = DEFAULT_MAX_EVENTS
    inputs: tuple[
        tuple[str, str], ...
    ] = ()  # (what, path) of each file read: no output may overwrite one
    built: Scenario | None = field(
        default=None, compare=False
    )  # the scenario as read, until a change

    @classmethod
    def read(cls, path_or_name: str | Path, overrides: Iterable[str] = ()) -> ScenarioSource:
        """Read a scenario file or bundled scenario; bad input raises the loader's ``ScenarioError``."""
        overrides, source = tuple(overrides), str(path_or_name)
        document = read_document(path_or_name)
        scenario = from_dict(
            document, source, overrides
        )  # validates and reports problems as `islands simulate` does
        inputs: tuple[tuple[str, str], ...] = (
            (("the scenario", source),) if Path(path_or_name).is_file() else ()
        )
        if scenario.network.rtt_csv:
            inputs += (("network.rtt_csv", str(csv_path(scenario.network.rtt_csv, source))),)
        return cls(
            inline_rtt_csv(document, source), source, overrides, inputs=inputs, built=scenario
        )

    def variant(self, *extra: str) -> Scenario:
        """The scenario with this source's overrides, then ``extra`` overrides, validated."""
        return from_dict(self.document, self.source, [*self.overrides, *extra])

    @property
    def scenario(self) -> Scenario:
        """The scenario as read (validated once, by ``read``), or as changed since."""
        return self.built if self.built is not None else self.variant()

    def with_overrides(self, *extra: str) -> ScenarioSource:
        return replace(
            self, overrides=(*self.overrides, *extra), built=None if extra else self.built
        )

    def with_network_profile(self, path: str | Path) -> ScenarioSource:
        """The scenario with a measured network profile's links, round trips and exchange costs
        (``scenarios/profile.py``), the overrides on top; refused in one line if it does not fit."""
        source = replace(
            self,
            document=apply_profile(self.document, read_profile(path), str(path)),
            inputs=(*self.inputs, ("--network-profile", str(path))),
            built=None,
        )
        return replace(source, built=source.variant())

    def with_symmetric_links(self) -> ScenarioSource:
        """Each island's link as one ``bandwidth_gbps`` both ways (its slower direction), upload_gbps and
        download_gbps dropped from the document and the overrides: then ``island.*.bandwidth_gbps``
        alone sets every link, as a sweep's bandwidth axis needs."""
        directions = ("upload_gbps", "download_gbps")
        resolved = self.scenario.islands
        document = copy.deepcopy(self.document)
        for table, island in zip(document["island"], resolved):
            for key in directions:
                table.pop(key, None)
            table["bandwidth_gbps"] = island.bandwidth_gbps
        overrides = tuple(
            o for o in self.overrides if not o.split("=", 1)[0].strip().endswith(directions)
        )
        return replace(self, document=document, overrides=overrides, built=None)

    def schedules(
        self, overrides_of: Callable[[str], Iterable[str]] = lambda algorithm: ()
    ) -> Variants:
        """The scenario once per schedule, with ``overrides_of(algorithm)`` on top (DDP reads
        ``outer_steps`` as its number of steps). A schedule whose own rules refuse the scenario (eager
        updates need two outer steps) is left out with the loader's reason; if every schedule refuses
        it, the first refusal is raised."""
        scenarios: dict[str, Scenario] = {}
        refused: dict[str, ScenarioError] = {}
        placed: dict[str, str] = {}
        for algorithm in ALGORITHMS:
            region = syncer_region(self.scenario, algorithm)
            try:
                scenarios[algorithm] = self.variant(
                    *switch_to(algorithm),
                    *syncer_placement(region),
                    *overrides_of(algorithm),
                )
            except ScenarioError as error:
                refused[algorithm] = error
            else:
                if region is not None:
                    placed[algorithm] = region
        if not scenarios:
            raise next(iter(refused.values()))
        return Variants(
            scenarios,
            {algorithm: f"{error.key}: {error.rule}" for algorithm, error in refused.items()},
            placed,
        )


@dataclass(frozen=True)
class Variants:
    """The scenario once per schedule that can run it, and why each other schedule cannot."""

    scenarios: dict[str, Scenario]
    refused: dict[str, str]  # schedule -> "KEY: RULE"
    syncer_regions: dict[str, str] = field(
        default_factory=dict
    )  # schedule -> the region given its syncer

    def notes(self) -> list[str]:
        """One line per schedule left out, and per syncer this comparison placed, for every table and
        figure that compares schedules."""
        placed = [
            f"{SCHEDULES[algorithm].label}: its syncer placed in region {region!r}, where most workers are "
            "(the scenario gives no syncer.region)"
            for algorithm, region in self.syncer_regions.items()
        ]
        return placed + [
            f"{SCHEDULES[algorithm].label} not run: {reason}"
            for algorithm, reason in self.refused.items()
        ]


def syncer_region(scenario: Scenario, algorithm: str) -> str | None:
    """Where a comparison places the syncer of a schedule that has one, in a scenario with regions that
    gives it none (the scenario was written for another schedule): the region with the most workers,
    the first by name among equals; None where nothing is to be placed."""
    if SCHEDULES[algorithm].coupled or not scenario.regions or scenario.syncer.region is not None:
        return None
    workers = [worker.region for worker in scenario.workers()]
    return max(sorted(scenario.regions), key=workers.count)


def syncer_placement(region: str | None) -> tuple[str, ...]:
    """The override that places the syncer in ``region`` (``syncer_region``), or none."""
    return () if region is None else (f"syncer.region={region}",)


def as_source(
    scenario: str | Path | ScenarioSource, overrides: Iterable[str] = ()
) -> ScenarioSource:
    """Accept a path, a bundled name or a ``ScenarioSource`` wherever the API takes a scenario."""
    if isinstance(scenario, ScenarioSource):
        return scenario.with_overrides(*overrides)
    return ScenarioSource.read(scenario, overrides)
