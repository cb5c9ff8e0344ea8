"""Regions and backbones: where islands sit, and the links between the regions' cores.

    [[region]]
    name = "us"

    [[backbone]]
    between = ["us", "eu"]
    bandwidth_gbps = 10      # each way, shared by every flow between the two regions
    latency_ms = 40          # one way, between the two cores

Without ``[[region]]`` entries every island joins one non-blocking core (the star the simulator has
always had). Once regions are declared, every island names its region, the syncer of a decoupled
schedule too, and every pair of regions that exchange bytes has a backbone: every pair of regions
with islands under a coupled schedule (a ring through them may cross any of them), each island's
region and the syncer's under a decoupled one. A missing backbone is refused rather than imagined
free.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from itertools import combinations

from islands.schedules import SCHEDULES

from .errors import ScenarioError
from .model import BackboneSpec, IslandSpec, Scenario, ScheduleSpec, SyncerSpec


def check_topology(
    regions: tuple[str, ...],
    backbones: tuple[BackboneSpec, ...],
    islands: tuple[IslandSpec, ...],
    syncer: SyncerSpec,
    schedule: ScheduleSpec,
    source: str,
) -> None:
    """Regions named once, backbones between declared regions, every island (and a decoupled
    syncer) in a declared region, and a backbone between every two regions that exchange bytes."""
    seen: set[str] = set()
    for index, name in enumerate(regions):
        if name in seen:
            raise ScenarioError(source, f"region.{index}.name", f"'{name}' is declared twice")
        seen.add(name)
    check_backbones(backbones, regions, source)
    for index, island in enumerate(islands):
        check_region(island.region, regions, f"island.{index}.region", source)
    coupled = SCHEDULES[schedule.algorithm].coupled
    if not coupled:
        check_region(syncer.region, regions, "syncer.region", source)
    used = sorted({island.region for island in islands if island.region is not None})
    pairs = combinations(used, 2) if coupled else ((region, syncer.region) for region in used)
    missing = unjoined(pairs, backbones)
    if missing is not None:
        a, b = missing
        raise ScenarioError(
            source,
            "backbone",
            f"no backbone between regions '{a}' and '{b}', which exchange "
            f'bytes: add [[backbone]] between = ["{a}", "{b}"]',
        )


def unjoined(
    pairs: Iterable[tuple[str, str | None]], backbones: tuple[BackboneSpec, ...]
) -> tuple[str, str | None] | None:
    """The first of ``pairs`` of two different regions with no backbone between them, or None."""
    joined = {frozenset(backbone.between) for backbone in backbones}
    return next((p for p in pairs if p[0] != p[1] and frozenset(p) not in joined), None)


def check_store_region(scenario: Scenario, source: str) -> None:
    """The object store of ``network.gather = "store"`` sits in a declared region, once there are
    regions, with a backbone from every island's region to it (every PUT and GET crosses it)."""
    store = scenario.store.region
    check_region(store, scenario.regions, "store.region", source)
    used = sorted({island.region for island in scenario.islands if island.region})
    missing = unjoined(((region, store) for region in used), scenario.backbones)
    if missing is not None:
        region = missing[0]
        raise ScenarioError(
            source,
            "backbone",
            f"no backbone between region '{region}' and the store's, '{store}', which "
            f'exchange bytes: add [[backbone]] between = ["{region}", "{store}"]',
        )


def check_collective(scenario: Scenario, source: str) -> None:
    """A staged all-reduce (hierarchical, tree) needs a coupled mean, its members do not finish spread
    (the spread is measured on a ring), and a tree's siblings share their parent's link, which the
    alpha-beta model would not price. A collective that goes on without a departed member is a ring's."""
    network = scenario.network
    check_departure(scenario, source)
    check_shared_syncer_path(scenario, source)
    check_churn_sharing(scenario, source)
    if network.collective == "ring":
        return
    if network.collective == "tree" and network.model == "alpha-beta":
        raise ScenarioError(
            source,
            "network.model",
            "alpha-beta prices each transfer alone, and a tree's two "
            'children share their parent\'s link: use "flow" or "auto" with '
            'network.collective = "tree"',
        )
    if not SCHEDULES[scenario.schedule.algorithm].coupled:
        raise ScenarioError(
            source,
            "network.collective",
            f"'{network.collective}' is a collective; "
            f'algorithm = "{scenario.schedule.algorithm}" exchanges with its syncer point to point',
        )
    if scenario.trainer.aggregation != "mean":
        raise ScenarioError(
            source,
            "network.collective",
            f"'{network.collective}' reduces to a mean; "
            f'trainer.aggregation = "{scenario.trainer.aggregation}" needs every payload whole '
            '(an all-gather): use "ring"',
        )
    if network.exchange_end_spread_s > 0:
        raise ScenarioError(
            source,
            "network.exchange_end_spread_s",
            f'is measured on a ring: set it to 0 with network.collective = "{network.collective}"',
        )


def check_shared_syncer_path(scenario: Scenario, source: str) -> None:
    """Decoupled learners report over one syncer link (and the backbones to its region): the alpha-beta
    model would price each report as if alone on it, N times too fast; the flow model shares it."""
    if scenario.network.model != "alpha-beta" or SCHEDULES[scenario.schedule.algorithm].coupled:
        return
    if scenario.syncer.bandwidth_gbps is not None or scenario.backbones:
        shared = (
            "the syncer's link"
            if scenario.syncer.bandwidth_gbps is not None
            else "the backbones to the syncer"
        )
        raise ScenarioError(
            source,
            "network.model",
            f"alpha-beta prices each transfer alone, and the learners' "
            f'reports share {shared}: use "flow" or "auto", which divide it among them',
        )


def check_churn_sharing(scenario: Scenario, source: str) -> None:
    """Under churn a joining worker downloads the model while the others exchange, over links they
    share: the alpha-beta model would price each transfer as if alone on them; the flow model shares them."""
    if scenario.network.model == "alpha-beta" and scenario.has_churn():
        raise ScenarioError(
            source,
            "network.model",
            "alpha-beta prices each transfer alone, and under churn "
            "(mtbf_s, [[event]], present = false) a joining worker's download shares links with the "
            'others\' exchanges: use "flow" or '
            '"auto", which divide them',
        )


def check_departure(scenario: Scenario, source: str) -> None:
    """``on_departure = "partial"``: a ring whose members each hold a share of the result goes on
    without one; a staged collective routes every payload through its leaders or parents, a
    learner's exchanges with its syncer are its own, and an end spread is the trainer's, measured."""
    network = scenario.network
    if network.on_departure != "partial":
        return
    if not SCHEDULES[scenario.schedule.algorithm].coupled:
        raise ScenarioError(
            source,
            "network.on_departure",
            f'algorithm = "{scenario.schedule.algorithm}" exchanges '
            'with its syncer point to point, and a departure drops only its own: leave "restart"',
        )
    if network.collective != "ring":
        raise ScenarioError(
            source,
            "network.on_departure",
            f'"partial" goes on with a ring\'s other members; a '
            f"{network.collective} collective passes every payload through its leaders: use "
            '"restart" or network.collective = "ring"',
        )
    if network.exchange_end_spread_s > 0:
        raise ScenarioError(
            source,
            "network.exchange_end_spread_s",
            "is measured on the trainer's exchanges, which "
            'restart when a member leaves: set it to 0 with network.on_departure = "partial"',
        )


def check_backbones(
    backbones: tuple[BackboneSpec, ...], regions: tuple[str, ...], source: str
) -> None:
    seen: set[frozenset[str]] = set()
    for index, backbone in enumerate(backbones):
        where = f"backbone.{index}.between"
        for name in backbone.between:
            check_region(name, regions, where, source)
        if backbone.between[0] == backbone.between[1]:
            raise ScenarioError(
                source,
                where,
                "must join two different regions (inside a region the core does not block)",
            )
        pair = frozenset(backbone.between)
        if pair in seen:
            raise ScenarioError(
                source,
                where,
                "a second backbone between the same two regions: give one, "
                "with their bandwidth together",
            )
        seen.add(pair)


def check_region(name: str | None, regions: tuple[str, ...], where: str, source: str) -> None:
    if not regions:
        if name is not None:
            raise ScenarioError(
                source, where, f"names region '{name}', but no [[region]] is declared"
            )
        return
    if name is None:
        raise ScenarioError(source, where, "is required once [[region]] entries are declared")
    if name not in regions:
        hint = difflib.get_close_matches(name, regions, n=1)
        suffix = f" (did you mean '{hint[0]}'?)" if hint else f" (declared: {', '.join(regions)})"
        raise ScenarioError(source, where, f"no [[region]] named '{name}'{suffix}")
