"""The simulator as one setup, interchangeable players and one result (``simulator/players.py``): no
import cycle among its modules, folders of at most 15 modules, players that no other package imports,
and for every scenario key the players that accept it (a new key must be added here)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from islands.scenarios import ScenarioError, load, spec
from islands.simulator import PLAYER_NAMES, RunSetup, chosen
from islands.simulator.players import PLAYERS

ROOT = Path(__file__).resolve().parents[1]
SIMULATOR = ROOT / "simulator"
MOST_MODULES = 15
PLAYER_MODULES = ("islands.simulator.fast", "islands.simulator.events")

# --- the import graph ---------------------------------------------------------------------------------


def module_name(path: Path) -> str:
    parts = [
        part for part in path.relative_to(SIMULATOR).with_suffix("").parts if part != "__init__"
    ]
    return ".".join(["islands.simulator", *parts])


def imported(path: Path, modules: set[str]) -> set[str]:
    """The simulator modules ``path`` imports, under ``TYPE_CHECKING`` or in a function too."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = (
                package.split(".")[: len(package.split(".")) - (node.level - 1)]
                if node.level
                else []
            )
            target = (
                ".".join(base + ([node.module] if node.module else []))
                if node.level
                else node.module or ""
            )
            for alias in node.names:
                found.add(
                    f"{target}.{alias.name}" if f"{target}.{alias.name}" in modules else target
                )
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {module for module in found if module in modules and module != name}


def import_graph() -> dict[str, set[str]]:
    paths = sorted(SIMULATOR.rglob("*.py"))
    modules = {module_name(path) for path in paths}
    return {module_name(path): imported(path, modules) for path in paths}


def cycle_in(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of ``graph`` (its modules in order, the first repeated at the end), or []."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        stack.append(node)
        for other in sorted(graph[node]):
            if state.get(other) == 1:
                return stack[stack.index(other) :] + [other]
            if other not in state and (found := visit(other)):
                return found
        state[node] = 2
        stack.pop()
        return []

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return []


def test_no_import_cycle_among_the_simulators_modules():
    graph = import_graph()
    assert (
        len(graph) > 30 and graph["islands.simulator.players"]
    )  # the walk found the modules and their imports
    assert cycle_in(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    assert cycle_in({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert cycle_in({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("folder", ["", "network", "events", "fast"])
def test_each_folder_of_the_simulator_holds_at_most_fifteen_modules(folder):
    modules = sorted((SIMULATOR / folder).glob("*.py"))
    assert 2 <= len(modules) <= MOST_MODULES, [path.name for path in modules]


def test_no_other_package_imports_a_player():
    """Commands and analyses ask ``islands.simulator`` (``chosen``, ``play``, ``simulate``); only the
    simulator's own modules (and tests, benchmarks) reach into ``fast/`` and ``events/``."""
    offending = []
    for folder in (
        "islands",
        "analysis",
        "validation",
        "trainer",
        "scenarios",
        "schedules",
        "emulation",
    ):
        for path in sorted((ROOT / folder).rglob("*.py")):
            source = path.read_text(encoding="utf-8")
            offending += [
                f"{path.relative_to(ROOT)}: {module}"
                for module in PLAYER_MODULES
                if module in source
            ]
    assert offending == []


# --- the players --------------------------------------------------------------------------------------


def test_the_players_are_listed_once_fast_paths_first():
    assert PLAYER_NAMES == ("lockstep", "one learner", "learners", "counts", "events")
    assert [player.name for player in PLAYERS] == list(PLAYER_NAMES)


def test_a_named_player_that_does_not_fit_is_refused_in_one_line():
    setup = RunSetup.of(load("worked-example"))
    with pytest.raises(
        ScenarioError,
        match="--player: the counts player cannot play this run: its workers do not "
        "leave and return at random",
    ):
        chosen(setup, "counts")
    with pytest.raises(ScenarioError, match="--player: no player 'fast'"):
        chosen(setup, "fast")
    assert chosen(setup, "events").name == "events" and chosen(setup).name == "lockstep"


BASES = {  # a scenario each player plays
    "lockstep": [],
    "one learner": ["schedule.algorithm=decoupled"],
    "learners": [
        "schedule.algorithm=decoupled",
        "island.0.replicas=2000",
        "schedule.outer_steps=100",
        "island.0.jitter_cv=0.05",
    ],
    "counts": [  # heavy enough for the event model under every override (partial included)
        "island.0.replicas=1000",
        "schedule.outer_steps=300",
        "island.0.mtbf_s=21600",
        "island.0.mttr_s=3600",
    ],
}

# Every scenario key, the override that sets it away from its default on each player's base scenario
# (None: set through a document, its players stated), and the players (besides the event model, which
# plays everything) that still play the run. A new key fails ``test_every_scenario_key_is_listed``.
KEY_PLAYERS = {
    "seed": ("seed=3", ("counts", "lockstep", "one learner", "learners")),
    "name": ("name=other", ("counts", "lockstep", "one learner", "learners")),
    "description": ("description=text", ("counts", "lockstep", "one learner", "learners")),
    "model.parameters": (
        "model.parameters=2e10",
        ("counts", "lockstep", "one learner", "learners"),
    ),
    "model.layers": ("model.layers=40", ("counts", "lockstep", "one learner", "learners")),
    "model.embedding_parameters": (
        "model.embedding_parameters=1e8",
        ("counts", "lockstep", "one learner", "learners"),
    ),
    "model.bytes_per_param": (
        "model.bytes_per_param=4",
        ("counts", "lockstep", "one learner", "learners"),
    ),
    "model.tokens_per_step": (
        "model.tokens_per_step=1e6",
        ("counts", "lockstep", "one learner", "learners"),
    ),
    "schedule.algorithm": ("schedule.algorithm=streaming", ("lockstep",)),
    "schedule.inner_steps": (
        "schedule.inner_steps=250",
        ("counts", "lockstep", "one learner", "learners"),
    ),
    "schedule.outer_steps": (
        "schedule.outer_steps=7",
        ("counts", "lockstep", "one learner", "learners"),
    ),
    "schedule.fragments": (
        "schedule.fragments=2",
        ("counts", "lockstep", "one learner", "learners"),
    ),
    "schedule.overlap_steps": (
        "schedule.overlap_steps=5",
        ("counts", "lockstep", "one learner", "learners"),
    ),
    "schedule.bits": ("schedule.bits=8", ("counts", "lockstep", "one learner", "learners")),
    "schedule.compression": ("schedule.compression=topk", ("counts", "lockstep")),
    # refused without compression = "topk", which the bases leave off: they do nothing there
    "schedule.chunk_values": ("schedule.chunk_values=1024", ()),
    "schedule.topk": ("schedule.topk=32", ()),
    "schedule.error_feedback": ("schedule.error_feedback=0.95", ()),
    "schedule.transform": ("schedule.transform=dct", ()),
    # refused without network.gather = "direct" or "store" (and those without compression)
    "schedule.gather_peers": ("schedule.gather_peers=2", ()),
    "schedule.backward_overlap": (
        "schedule.backward_overlap=0.5",
        ("lockstep", "one learner", "learners"),
    ),
    "schedule.barrier": ("schedule.barrier=deadline", ()),
    "schedule.deadline_slack": (
        "schedule.deadline_slack=0.2",
        (),
    ),  # every base waits: refused, as it does nothing
    "schedule.quorum": ("schedule.quorum=2", ("one learner", "learners")),
    "schedule.grace_window": (
        "schedule.grace_window=5",
        ("counts", "lockstep", "one learner", "learners"),
    ),
    "schedule.elastic": (
        "schedule.elastic=true",
        ("counts", "lockstep", "one learner", "learners"),
    ),
    "network.model": ("network.model=flow", ("counts", "one learner", "learners")),
    "network.tcp_window_bytes": (
        "network.tcp_window_bytes=4e6",
        ("counts", "lockstep", "one learner", "learners"),
    ),
    "network.streams": ("network.streams=4", ("counts", "lockstep", "one learner", "learners")),
    "network.loss_rate": (
        "network.loss_rate=1e-4",
        ("counts", "lockstep", "one learner", "learners"),
    ),
    "network.detection_timeout_s": (
        "network.detection_timeout_s=10",
        ("counts", "lockstep", "one learner", "learners"),
    ),
    "network.exchange_cpu_s_per_value": ("network.exchange_cpu_s_per_value=1e-10", ("learners",)),
    "network.exchange_end_spread_s": ("network.exchange_end_spread_s=0.5", ("learners",)),
    "network.rtt_csv": (None, ("lockstep", "one learner", "learners")),
    "network.collective": ("network.collective=tree", ()),
    "network.on_departure": ("network.on_departure=partial", ("counts", "lockstep")),
    "network.ring_efficiency": (
        "network.ring_efficiency=0.8",
        ("lockstep", "one learner", "learners"),
    ),
    # one FIFO per egress prices rings (no Decoupled learner's); the counts player steps aside
    "network.egress_queue": ("network.egress_queue=fifo", ("lockstep",)),
    # refused without egress_queue = "fifo": they do nothing under fair queues
    "network.fifo_queue_ms": ("network.fifo_queue_ms=50", ()),
    "network.tcp_congestion_control": ("network.tcp_congestion_control=bbr", ()),
    "network.reduce_scatter": (
        "network.reduce_scatter=ring",
        ("counts", "lockstep", "one learner", "learners"),
    ),
    "network.fifo_k_s": ("network.fifo_k_s=0.3", ()),
    "network.fifo_k_so": ("network.fifo_k_so=0.3", ()),
    "network.fifo_k_u": ("network.fifo_k_u=0.3", ()),
    "network.weights_from": ("network.weights_from=striped", ()),
    "network.gather": ("network.gather=direct", ()),  # refused without compression = "topk"
    "network.ring_order": (
        "network.ring_order=optimised",
        ("counts", "lockstep", "one learner", "learners"),
    ),
    "exchange.calls": ("exchange.calls=per_tensor", ()),
    "exchange.bucket_cap_mb": (None, ("lockstep",)),
    "exchange.first_bucket_mb": (None, ("lockstep",)),
    "exchange.tensors": (None, ("lockstep",)),
    "exchange.tensor_values": (None, ("lockstep",)),
    "exchange.call_overhead_s": ("exchange.call_overhead_s=0.01", ("lockstep",)),
    "exchange.sync_overhead_s": ("exchange.sync_overhead_s=0.01", ("lockstep",)),
    "exchange.first_call_s": ("exchange.first_call_s=0.5", ("lockstep",)),
    "exchange.outer_step_s": ("exchange.outer_step_s=0.1", ("lockstep",)),
    # the counts player plays blocking syncs alone, which the slowdown leaves as they are
    "compute.slowdown_while_exchanging": (
        "compute.slowdown_while_exchanging=0.04",
        ("counts", "lockstep"),
    ),
    "island.name": ("island.0.name=x", ("counts", "lockstep", "one learner", "learners")),
    "island.replicas": ("island.0.replicas=4", ("lockstep", "one learner")),
    "island.step_time_s": (
        "island.0.step_time_s=2",
        ("counts", "lockstep", "one learner", "learners"),
    ),
    "island.gpus": (None, ("lockstep", "one learner", "counts", "learners")),
    "island.gpu": (None, ("lockstep", "one learner", "counts", "learners")),
    "island.memory_gb": (
        "island.0.memory_gb=1000",
        ("counts", "lockstep", "one learner", "learners"),
    ),
    "island.offload": (None, ("lockstep", "one learner", "counts", "learners")),
    "island.host_memory_gb": (None, ("lockstep", "one learner", "counts", "learners")),
    "island.host_link_gb_per_s": (None, ("lockstep", "one learner", "counts", "learners")),
    "island.host_optimizer_params_per_s": (None, ("lockstep", "one learner", "counts", "learners")),
    "island.mfu": (None, ("lockstep", "one learner", "counts", "learners")),
    "island.jitter_cv": ("island.0.jitter_cv=0.05", ("lockstep", "learners")),
    "island.bandwidth_gbps": (
        "island.0.bandwidth_gbps=2",
        ("counts", "lockstep", "one learner", "learners"),
    ),
    "island.upload_gbps": ("island.0.upload_gbps=0.5", ("lockstep", "one learner", "learners")),
    "island.download_gbps": ("island.0.download_gbps=0.5", ("lockstep", "one learner", "learners")),
    "island.latency_ms": ("island.0.latency_ms=10", ("lockstep", "one learner", "learners")),
    "island.burst_bytes": ("island.0.burst_bytes=1e6", ()),
    "island.upload_burst_bytes": ("island.0.upload_burst_bytes=1e6", ()),
    "island.download_burst_bytes": ("island.0.download_burst_bytes=1e6", ()),
    "island.region": (None, ("lockstep", "one learner", "learners")),
    "island.present": (None, ()),
    "island.mtbf_s": ("island.0.mtbf_s=50000", ("counts",)),
    "island.mttr_s": (
        "island.0.mttr_s=5000",
        ("counts",),
    ),  # refused without mtbf_s, which counts alone sets
    "island.chips": ("island.0.chips=2", ("counts", "lockstep", "one learner", "learners")),
    "island.chip_mtbf_s": (None, ()),
    "island.recovery_s": (None, ("lockstep", "one learner", "counts", "learners")),
    "island.cost_per_hour": (
        "island.0.cost_per_hour=3",
        ("counts", "lockstep", "one learner", "learners"),
    ),
    "syncer.bandwidth_gbps": ("syncer.bandwidth_gbps=10", ()),  # refused on coupled schedules
    "syncer.latency_ms": ("syncer.latency_ms=5", ("one learner", "learners")),
    "syncer.region": (None, ("lockstep", "one learner", "learners")),
    # refused without network.gather = "store" (test_gather.py: lockstep and events play a store)
    "store.bandwidth_gbps": ("store.bandwidth_gbps=10", ()),
    "store.ingress_gbps": ("store.ingress_gbps=10", ()),
    "store.egress_gbps": ("store.egress_gbps=10", ()),
    "store.latency_ms": ("store.latency_ms=5", ()),
    "store.handshake_round_trips": ("store.handshake_round_trips=3", ()),
    "store.request_ms": ("store.request_ms=30", ()),
    "store.region": (None, ()),
}


def scenario_keys() -> set[str]:
    sections = {
        "": spec.TOP_KEYS,
        "model.": spec.MODEL_KEYS,
        "schedule.": spec.SCHEDULE_KEYS,
        "network.": spec.NETWORK_KEYS,
        "exchange.": spec.EXCHANGE_KEYS,
        "compute.": spec.COMPUTE_KEYS,
        "island.": spec.ISLAND_KEYS,
        "syncer.": spec.SYNCER_KEYS,
        "store.": spec.STORE_KEYS,
    }
    return {prefix + key for prefix, keys in sections.items() for key in keys}


def test_every_scenario_key_is_listed():
    assert set(KEY_PLAYERS) == scenario_keys()


@pytest.mark.parametrize(
    "key", [key for key, (override, _) in KEY_PLAYERS.items() if override is not None]
)
def test_the_players_that_accept_each_key(key):
    override, accepting = KEY_PLAYERS[key]
    fitting = []
    for name, base in BASES.items():
        try:
            scenario = load("worked-example", base + [override])
        except ScenarioError:
            continue  # a key the loader refuses with that schedule: no player plays it
        player = next(player for player in PLAYERS if player.name == name)
        if player.fits(RunSetup.of(scenario)) is None:
            fitting.append(name)
    assert set(fitting) == set(accepting)
