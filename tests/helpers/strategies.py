"""Hypothesis strategies that draw valid scenario documents, and the door they go through.

A drawn scenario is a document (the dict ``tomllib`` would return) written out as TOML and read back
with ``islands.scenarios.load``, as ``islands simulate FILE`` reads one, so every draw is also checked
by the loader: a draw the loader refuses is a bug in these strategies or in the loader, and fails.

Fleets are small (2 to 8 workers, up to 4 outer steps of up to 8 inner steps) so that one run takes
milliseconds; every schedule, collective, network model, barrier, churn and failure setting, quorum,
fragment count, overlap and wire precision can be drawn. ``Drawn`` carries what the properties need
to know about a draw: whether it has departures that never come back, churn or failures.
"""

from __future__ import annotations

import copy
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from islands.scenarios import Scenario, load
from islands.scenarios.spec import MIN_CHURN_S
from islands.simulator.budget import estimate
from islands.validation.scaling import to_toml

COUPLED = ("ddp", "diloco", "streaming", "eager")
ALGORITHMS = (*COUPLED, "decoupled")
STEP_TIMES_S = (0.01, 0.05, 0.2, 1.0)
GBPS = (0.05, 0.5, 2.0, 10.0)
# Random churn, in churn-free run lengths (``budget.estimate``): a worker stays 5 to 100 runs on
# average, so a run sees a departure now and then and finishes within the horizon (10 run lengths) for
# all but the rarest draws; it is away a tenth of a run or a whole one.
MTBF_RUNS = (5.0, 100.0)
MTTR_RUNS = (0.1, 1.0)


@dataclass(frozen=True)
class Drawn:
    """A drawn scenario document and what its properties depend on."""

    document: dict[str, Any]
    permanent_departures: bool  # a leave without a return: the run may end without every outer step
    churn: bool  # any worker leaves or joins (events, random churn, absent at the start)
    failures: bool  # chip failures

    @property
    def algorithm(self) -> str:
        return self.document["schedule"]["algorithm"]

    @property
    def moves_membership(self) -> bool:
        return self.churn or self.failures

    def scenario(self) -> Scenario:
        return load_document(self.document)


def load_document(document: dict[str, Any]) -> Scenario:
    """The document written to a TOML file and loaded as the command line loads a scenario."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "drawn.toml"
        path.write_text(to_toml(document), encoding="utf-8")
        return load(path)


# --- the parts of a document -----------------------------------------------------------------------


@st.composite
def models(draw, fragments: int) -> dict[str, Any]:
    model: dict[str, Any] = {
        "parameters": draw(st.sampled_from((1e6, 1e7, 5e7, 2e8))),
        "bytes_per_param": draw(st.sampled_from((1, 2, 4))),
    }
    if draw(st.booleans()):
        model["layers"] = draw(st.integers(fragments, 12))
        if draw(st.booleans()):
            model["embedding_parameters"] = model["parameters"] * draw(st.sampled_from((0.1, 0.3)))
    return model


@st.composite
def island_figures(draw, jitter: bool) -> dict[str, Any]:
    """One island's step time, links, latency, jitter and token bucket."""
    island: dict[str, Any] = {"step_time_s": draw(st.sampled_from(STEP_TIMES_S))}
    if draw(st.booleans()):
        island["bandwidth_gbps"] = draw(st.sampled_from(GBPS))
    else:
        island["upload_gbps"] = draw(st.sampled_from(GBPS))
        island["download_gbps"] = draw(st.sampled_from(GBPS))
    island["latency_ms"] = draw(st.sampled_from((0.0, 1.0, 20.0)))
    if jitter and draw(st.integers(0, 3)) == 0:
        island["jitter_cv"] = draw(st.sampled_from((0.05, 0.3)))
    if draw(st.integers(0, 4)) == 0:
        island["burst_bytes"] = draw(st.sampled_from((1e5, 1e7)))
    return island


@st.composite
def islands(draw, equal_learners: bool) -> list[dict[str, Any]]:
    """1 to 3 islands of 1 to 3 replicas, at least 2 workers and at most 8; ``equal_learners``: every
    worker the same (step time, links, latency; no jitter)."""
    count = draw(st.integers(1, 3))
    replicas = draw(
        st.lists(st.integers(1, 3), min_size=count, max_size=count).filter(lambda r: sum(r) >= 2)
    )
    same = draw(island_figures(jitter=False))
    return [
        {
            "name": f"i{index}",
            "replicas": n,
            **(same if equal_learners else draw(island_figures(jitter=True))),
        }
        for index, n in enumerate(replicas)
    ]


@st.composite
def schedules(draw, algorithm: str, workers: int) -> dict[str, Any]:
    h = draw(st.integers(1, 8))
    schedule: dict[str, Any] = {
        "algorithm": algorithm,
        "inner_steps": h,
        "outer_steps": draw(st.integers(2 if algorithm == "eager" else 1, 4)),
    }
    if algorithm in ("streaming", "eager", "decoupled"):
        schedule["fragments"] = draw(st.integers(1, min(h, 4)))
    if algorithm == "streaming":
        schedule["overlap_steps"] = draw(st.integers(0, h // schedule["fragments"] - 1))
    if algorithm == "decoupled":
        schedule["overlap_steps"] = draw(st.integers(0, h - 1))
        schedule["quorum"] = draw(st.integers(1, workers))
        schedule["grace_window"] = draw(st.sampled_from(("adaptive", 0.0, 0.5)))
    if draw(st.booleans()):
        schedule["backward_overlap"] = draw(st.sampled_from((0.3, 0.66)))
    if algorithm == "diloco":
        schedule["barrier"] = draw(st.sampled_from(("wait", "deadline", "adaptive")))
        if schedule["barrier"] == "deadline":
            schedule["deadline_slack"] = draw(st.sampled_from((0.0, 0.1, 1.0)))
    if draw(st.integers(0, 2)) == 0:
        schedule["bits"] = draw(st.sampled_from((32, 16, 8, 4)))
    return schedule


@st.composite
def networks(draw, coupled: bool, aggregation: str) -> dict[str, Any]:
    network: dict[str, Any] = {"model": draw(st.sampled_from(("auto", "flow", "alpha-beta")))}
    collectives = (
        ("ring", "hierarchical", "tree") if coupled and aggregation == "mean" else ("ring",)
    )
    network["collective"] = draw(st.sampled_from(collectives))
    if network["collective"] == "tree" and network["model"] == "alpha-beta":
        network["model"] = "flow"
    network["detection_timeout_s"] = draw(st.sampled_from((0.0, 5.0, 30.0)))
    if draw(st.integers(0, 3)) == 0:
        network["tcp_window_bytes"] = draw(st.sampled_from((65536.0, 4e6)))
        network["streams"] = draw(st.integers(1, 4))
    if draw(st.integers(0, 4)) == 0:
        network["loss_rate"] = draw(st.sampled_from((1e-4, 1e-2)))
    if draw(st.integers(0, 3)) == 0:
        network["exchange_cpu_s_per_value"] = draw(st.sampled_from((1e-10, 1e-8)))
    if coupled and network["collective"] == "ring":
        network["ring_order"] = draw(st.sampled_from(("ranked", "optimised")))
        if draw(st.booleans()):
            network["on_departure"] = "partial"
        elif draw(st.integers(0, 3)) == 0:
            network["exchange_end_spread_s"] = draw(st.sampled_from((0.01, 0.05)))
    return network


def worker_names(island: dict[str, Any]) -> list[str]:
    n = island["replicas"]
    return [island["name"]] if n == 1 else [f"{island['name']}-{r}" for r in range(n)]


@st.composite
def churn(
    draw, drawn_islands: list[dict[str, Any]], permanent: bool
) -> tuple[list[dict[str, Any]], bool, bool]:
    """Events, random churn or an island absent at the start, on the drawn islands (changed in place).
    Returns the events, whether any departure may be permanent and whether anything churns."""
    kind = draw(st.sampled_from(("none", "events", "random", "absent")))
    if kind == "none":
        return [], False, False
    if kind == "random":  # in multiples of the run's length: ``in_seconds`` makes them seconds
        island = draw(st.sampled_from(drawn_islands))
        island["mtbf_s"] = draw(st.sampled_from(MTBF_RUNS))
        returns = not permanent or draw(st.booleans())
        if returns:
            island["mttr_s"] = draw(st.sampled_from(MTTR_RUNS))
        return [], not returns, True
    if kind == "absent":
        island = draw(st.sampled_from(drawn_islands[1:] or drawn_islands))
        if island is drawn_islands[0] and len(drawn_islands) == 1:
            return [], False, False
        island["present"] = False
        join = {
            "at_s": draw(st.sampled_from((0.5, 3.0, 40.0))),
            "island": island["name"],
            "kind": "join",
        }
        return [join], False, True
    names = [name for island in drawn_islands for name in worker_names(island)]
    name = draw(st.sampled_from(names))
    leave_s = draw(st.sampled_from((0.1, 1.5, 10.0, 60.0)))
    events = [{"at_s": leave_s, "island": name, "kind": "leave"}]
    returns = not permanent or draw(st.booleans())
    if returns:
        events.append(
            {
                "at_s": leave_s + draw(st.sampled_from((0.5, 5.0, 40.0))),
                "island": name,
                "kind": "join",
            }
        )
    return events, not returns, True


@st.composite
def failures(draw, drawn_islands: list[dict[str, Any]]) -> bool:
    """Chip failures on one island (changed in place); whether there are any."""
    calm = [
        island for island in drawn_islands if "mtbf_s" not in island
    ]  # one kind of outage per island
    if not calm or draw(st.integers(0, 3)) != 0:
        return False
    island = draw(st.sampled_from(calm))
    island["chips"] = draw(st.sampled_from((1, 8, 1000)))
    # a worker fails every 200 s of compute or less often: a drawn run computes for 32 s at most
    island["chip_mtbf_s"] = island["chips"] * draw(st.sampled_from((200.0, 1e4, 1e6)))
    island["recovery_s"] = draw(st.sampled_from((1.0, 30.0)))
    return True


@st.composite
def regions(draw, document: dict[str, Any]) -> None:
    """Two regions joined by a backbone, each island in one (and a decoupled syncer), in place."""
    if draw(st.integers(0, 3)) != 0:
        return
    document["region"] = [{"name": "us"}, {"name": "eu"}]
    document["backbone"] = [
        {
            "between": ["us", "eu"],
            "bandwidth_gbps": draw(st.sampled_from(GBPS)),
            "latency_ms": draw(st.sampled_from((0.0, 40.0))),
        }
    ]
    for island in document["island"]:
        island["region"] = draw(st.sampled_from(("us", "eu")))
    if "syncer" in document:
        document["syncer"]["region"] = draw(st.sampled_from(("us", "eu")))


@st.composite
def measured_round_trips(draw, document: dict[str, Any]) -> None:
    """A ``[[latency]]`` entry between two islands (or one island's replicas), in place."""
    if draw(st.integers(0, 3)) != 0:
        return
    names = [island["name"] for island in document["island"]]
    document["latency"] = [
        {
            "between": [draw(st.sampled_from(names)), draw(st.sampled_from(names))],
            "rtt_ms": draw(st.sampled_from((0.5, 80.0))),
        }
    ]


# --- whole scenarios -------------------------------------------------------------------------------


@st.composite
def scenarios(
    draw,
    algorithms: tuple[str, ...] = ALGORITHMS,
    permanent: bool = True,
    moves: bool = True,
    equal_learners: bool | None = None,
) -> Drawn:
    """A valid scenario of one of ``algorithms``. ``permanent``: departures may be for good;
    ``moves``: churn and chip failures may be drawn; ``equal_learners``: every island has the
    same figures (None: drawn)."""
    algorithm = draw(st.sampled_from(algorithms))
    coupled = algorithm in COUPLED
    equal = draw(st.booleans()) if equal_learners is None else equal_learners
    drawn_islands = draw(islands(equal))
    workers = sum(island["replicas"] for island in drawn_islands)
    schedule = draw(schedules(algorithm, workers))
    fragments = schedule.get("fragments", 1)
    aggregations = ("mean", "median", "trimmed_mean") if coupled else ("mean", "radial_directional")
    aggregation = draw(st.sampled_from(aggregations))
    document: dict[str, Any] = {
        "name": "drawn",
        "seed": draw(st.integers(0, 3)),
        "model": draw(models(fragments)),
        "schedule": schedule,
        "network": draw(networks(coupled, aggregation)),
        "trainer": {"aggregation": aggregation},
        "island": drawn_islands,
    }
    if not coupled:
        document["syncer"] = {"latency_ms": draw(st.sampled_from((0.0, 5.0)))}
        if draw(st.booleans()):
            document["syncer"]["bandwidth_gbps"] = draw(st.sampled_from(GBPS))
    if schedule.get("bits") is None and document["model"]["bytes_per_param"] * 8 not in (
        32,
        16,
        8,
        4,
    ):
        schedule["bits"] = 16
    if (
        not equal
    ):  # a backbone between learners and the syncer, or a measured round trip, makes them unequal
        draw(regions(document))
        draw(measured_round_trips(document))
    if (
        not coupled
        and document["network"]["model"] == "alpha-beta"
        and ("bandwidth_gbps" in document["syncer"] or document.get("backbone"))
    ):
        document["network"]["model"] = (
            "flow"  # learners sharing the syncer's path: alpha-beta is refused there
        )
    events, permanent_departures, churns = (
        draw(churn(drawn_islands, permanent)) if moves else ([], False, False)
    )
    if events:
        document["event"] = events
    if churns and document["network"]["model"] == "alpha-beta":
        document["network"]["model"] = (
            "flow"  # a joiner's download shares links: alpha-beta is refused there
        )
    has_failures = moves and schedule.get("barrier") != "deadline" and draw(failures(drawn_islands))
    if has_failures and churns:
        schedule["elastic"] = True
    elif has_failures:
        schedule["elastic"] = draw(st.booleans())
    in_seconds(document)
    return Drawn(document, permanent_departures, churns, has_failures)


def in_seconds(document: dict[str, Any]) -> None:
    """Random churn drawn in run lengths (``MTBF_RUNS``, ``MTTR_RUNS``) as seconds, in place: times the
    simulator's bound on the run without it."""
    churning = [island for island in document["island"] if "mtbf_s" in island]
    if not churning:
        return
    calm = copy.deepcopy(document)
    for island in calm["island"]:
        island.pop("mtbf_s", None)
        island.pop("mttr_s", None)
        island["present"] = True
    calm.pop("event", None)
    run_s = estimate(load_document(calm)).run_length_s
    for island in churning:
        for key in ("mtbf_s", "mttr_s"):
            if key in island:
                island[key] = max(MIN_CHURN_S, island[key] * run_s)


def decoupled_learners_differ(drawn: Drawn) -> bool:
    """Whether some learner computes or communicates at other figures than another (or jitters)."""
    figures = {
        tuple(sorted((k, v) for k, v in island.items() if k not in ("name", "replicas")))
        for island in drawn.document["island"]
    }
    jitter = any(island.get("jitter_cv", 0) for island in drawn.document["island"])
    return len(figures) > 1 or jitter or "region" in drawn.document or "latency" in drawn.document
