"""Load a scenario TOML file, apply command-line overrides, validate, and build a ``Scenario``.

Every problem becomes a ``ScenarioError`` naming the file, the key (in the same dotted form that
``--set`` takes, e.g. ``island.0.bandwidth_gbps``) and the rule that was broken.
"""

from __future__ import annotations

import copy
import difflib
import functools
import math
import tomllib
from collections.abc import Iterable
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from islands.io import read_bounded_text
from islands.numbers import is_finite_number, is_positive_number, is_whole_number
from islands.schedules import SCHEDULES, schedule_of
from islands.schedules.base import GRADIENT
from islands.schedules.compression import problem as compression_problem
from islands.schedules.gather import STORE
from islands.schedules.gather import problem as gather_problem

from .accelerators import MEMORY_GB, PEAK_BF16_FLOPS, derived_step_time_s
from .errors import ScenarioError
from .fifo import check_fifo
from .latencies import with_csv
from .memory import Placement, Replica, bytes_per_param, check_host_fits, check_replica_fits
from .model import (
    BackboneSpec,
    ChurnEvent,
    ComputeSpec,
    ExchangeSpec,
    IslandSpec,
    ModelSpec,
    NetworkSpec,
    PairLatency,
    Scenario,
    ScheduleSpec,
    StoreSpec,
    SyncerSpec,
)
from .offload import check_offload_keys, island_offload_s
from .regions import check_collective, check_store_region, check_topology
from .sanity import check_runnable, check_step_time
from .spec import (
    ARRAYS,
    BACKBONE_KEYS,
    EVENT_KEYS,
    ISLAND_KEYS,
    LATENCY_KEYS,
    MAX_INTEGER,
    REGION_KEYS,
    REQUIRED,
    SECTIONS,
    TOP_KEYS,
    Key,
    shown_value,
)
from .trainer_keys import TRAINER_KEYS, TrainerSpec, outer_error, with_outer_defaults
from .unread import check_unread

OVERRIDES_KEPT = 1024  # parsed override values kept (``parsed_value``)

LIBRARY_PACKAGE = "islands.scenarios"
LIBRARY_FOLDER = "library"


def bundled_names() -> list[str]:
    """Names of the scenarios shipped with islands (usable in place of a file path)."""
    folder = resources.files(LIBRARY_PACKAGE) / LIBRARY_FOLDER
    return sorted(
        entry.name[: -len(".toml")] for entry in folder.iterdir() if entry.name.endswith(".toml")
    )


def resolve(path_or_name: str | Path) -> Path | Traversable:
    """A path that exists, else the bundled scenario of that name (possibly inside a zip), else a clear error."""
    path = Path(path_or_name)
    if path.is_file():
        return path
    if path.exists():
        kind = "a folder" if path.is_dir() else "not a regular file"
        raise ScenarioError(
            str(path_or_name), "", f"is {kind}: name a scenario TOML file or a bundled scenario"
        )
    bundled = resources.files(LIBRARY_PACKAGE) / LIBRARY_FOLDER / f"{path_or_name}.toml"
    if bundled.is_file():
        return bundled
    hint = difflib.get_close_matches(str(path_or_name), bundled_names(), n=1)
    extra = f" (did you mean the bundled scenario '{hint[0]}'?)" if hint else ""
    raise ScenarioError(str(path_or_name), "", f"no such file or bundled scenario{extra}")


def load(path_or_name: str | Path, overrides: Iterable[str] = ()) -> Scenario:
    """Read, override and validate a scenario file (or a bundled scenario by name)."""
    return from_dict(read_document(path_or_name), str(path_or_name), overrides)


def read_document(path_or_name: str | Path) -> dict[str, Any]:
    """The parsed TOML of a scenario file (read within ``MAX_INPUT_BYTES``) or a bundled scenario."""
    path = resolve(path_or_name)
    text = (
        read_bounded_text(path, "scenario")
        if isinstance(path, Path)
        else path.read_text(encoding="utf-8")
    )
    return parse_toml(text, str(path_or_name))


def parse_toml(text: str, source: str) -> dict[str, Any]:
    """The TOML document in ``text``; a syntax error, nesting too deep to parse, or an integer of more
    digits than Python converts (4,300), is one ``ScenarioError``."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(source, "", f"not valid TOML: {exc}") from None
    except RecursionError:
        raise ScenarioError(source, "", "has arrays or tables nested too deeply to read") from None
    except ValueError as exc:
        raise ScenarioError(
            source, "", f"has a number too long to read: {str(exc).split(';')[0]}"
        ) from None


def from_dict(
    document: dict[str, Any], source: str = "<scenario>", overrides: Iterable[str] = ()
) -> Scenario:
    """Validate an already parsed document (a dict as ``tomllib`` returns it)."""
    document = copy.deepcopy(document)
    for override in overrides:
        apply_override(document, override, source)
    return build(document, source)


def parse_override_value(raw: str) -> Any:
    """A TOML value if it parses as one (``10``, ``1e9``, ``true``, ``"x"``), else the bare string (a
    copy of its own: an array or table may be changed in the document it goes into)."""
    return copy.deepcopy(parsed_value(raw))


@functools.lru_cache(maxsize=OVERRIDES_KEPT)
def parsed_value(raw: str) -> Any:
    """``parse_override_value``, kept: a planner sets the same few values in hundreds of variants."""
    try:
        return tomllib.loads(f"value = {raw}")["value"]
    except (
        ValueError,
        RecursionError,
    ):  # not TOML, a number too long to convert, or nesting too deep
        return raw


def apply_override(document: dict[str, Any], override: str, source: str) -> None:
    """Apply ``section.key=value`` or ``island.<index|name|*>.key=value`` to a parsed document."""
    if "=" not in override:
        raise ScenarioError(
            source, override, "an override must look like key=value, e.g. schedule.inner_steps=100"
        )
    dotted, raw = override.split("=", 1)
    dotted = dotted.strip()
    if not dotted or "" in dotted.split("."):
        raise ScenarioError(
            source, override, "an override names a key before the =, e.g. schedule.inner_steps=100"
        )
    value = parse_override_value(raw.strip())
    parts = dotted.split(".")
    if parts[0] in ARRAYS:
        if len(parts) != 3:
            raise ScenarioError(
                source, dotted, f"{parts[0]} overrides look like {parts[0]}.<index|name|*>.<key>"
            )
        for entry in select_entries(document, parts[0], parts[1], dotted, source):
            entry[parts[2]] = value
        return
    if len(parts) == 1:
        document[parts[0]] = value
        return
    if len(parts) != 2:
        raise ScenarioError(
            source, dotted, "overrides look like <section>.<key> or island.<index|name|*>.<key>"
        )
    section = document.setdefault(parts[0], {})
    if not isinstance(section, dict):
        raise ScenarioError(source, parts[0], "is not a table, so it has no keys to set")
    section[parts[1]] = value


def select_entries(
    document: dict[str, Any], array: str, selector: str, dotted: str, source: str
) -> list[dict[str, Any]]:
    """The entries of ``[[array]]`` that ``selector`` names: an index, a name, or ``*`` (all)."""
    entries = read_array(document, array, source)
    if not entries:
        raise ScenarioError(
            source, dotted, f"the scenario has no [[{array}]] entries, so this would set nothing"
        )
    if selector == "*":
        return list(entries)
    if selector.isdigit():
        index = int(selector)
        if index >= len(entries):
            raise ScenarioError(
                source, dotted, f"no {array} {index}: the scenario has {len(entries)}"
            )
        return [entries[index]]
    named = [entry for entry in entries if entry.get("name") == selector]
    if not named:
        raise ScenarioError(source, dotted, f"no {array} named '{selector}'")
    return named


def check_known_keys(
    table: dict[str, Any], keys: dict[str, Key], prefix: str, source: str, extra: Iterable[str] = ()
) -> None:
    known = list(keys) + list(extra)
    for key in table:
        if key not in known:
            raise ScenarioError(source, prefix + key, f"unknown key{key_hint(str(key), known)}")


def key_hint(key: str, known: list[str]) -> str:
    """The closest known key, or failing one the three nearest, as a message's suffix."""
    hint = difflib.get_close_matches(key, known, n=1)
    if hint:
        return f" (did you mean '{hint[0]}'?)"
    nearest = difflib.get_close_matches(key, known, n=3, cutoff=0)
    return f" (the nearest known keys: {', '.join(nearest)})" if nearest else ""


def read_value(table: dict[str, Any], name: str, key: Key, prefix: str, source: str) -> Any:
    """One key's value, type-checked and rule-checked, or its default."""
    where = prefix + name
    if name not in table:
        if key.default is REQUIRED:
            raise ScenarioError(source, where, "is required")
        return key.default
    value = typed_value(table[name], key.kind, where, source)
    if key.check is not None:
        problem = key.check(value)
        if problem:
            raise ScenarioError(source, where, f"{problem} (got {shown_value(value)})")
    return value


def typed_value(value: Any, kind: str, where: str, source: str) -> Any:
    """``value`` as a key of ``kind`` takes it ('int' within +-2**53, 'float' finite), or one error."""
    if kind == "bool":
        if not isinstance(value, bool):
            raise ScenarioError(source, where, f"must be true or false (got {shown_value(value)})")
    elif kind == "int":
        if not is_whole_number(value):
            raise ScenarioError(source, where, f"must be an integer (got {shown_value(value)})")
        if abs(value) > MAX_INTEGER:
            raise ScenarioError(
                source, where, f"must be an integer within +-2**53 (got {shown_value(value)})"
            )
    elif kind == "float|str":
        if not (is_finite_number(value) or isinstance(value, str)):
            raise ScenarioError(
                source, where, f"must be a finite number or a string (got {shown_value(value)})"
            )
        value = value if isinstance(value, str) else float(value)
    elif kind == "float":
        if not is_finite_number(value):
            raise ScenarioError(
                source, where, f"must be a finite number (got {shown_value(value)})"
            )
        value = float(value)
    elif kind == "values":
        if not (isinstance(value, list) and all(is_finite_number(v) for v in value)):
            raise ScenarioError(
                source,
                where,
                f"must be a list of finite numbers, e.g. [4096, 64] (got {shown_value(value)})",
            )
        value = tuple(float(v) for v in value)
    elif kind == "pair":
        if not (
            isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)
        ):
            raise ScenarioError(
                source, where, f'must be two names, e.g. ["us", "eu"] (got {shown_value(value)})'
            )
        value = tuple(value)
    elif not isinstance(value, str):
        raise ScenarioError(source, where, f"must be a string (got {shown_value(value)})")
    return value


def read_array(document: dict[str, Any], name: str, source: str) -> list[Any]:
    """An optional ``[[name]]`` array of tables (empty when absent)."""
    entries = document.get(name, [])
    if not isinstance(entries, list):
        raise ScenarioError(
            source, name, f"must be an array of tables: write [[{name}]] for each entry"
        )
    return entries


def read_table(table: Any, keys: dict[str, Key], prefix: str, source: str) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise ScenarioError(source, prefix.rstrip("."), "must be a table")
    check_known_keys(table, keys, prefix, source)
    return {name: read_value(table, name, key, prefix, source) for name, key in keys.items()}


def read_trainer(table: Any, source: str, error_feedback: bool = False) -> TrainerSpec:
    """The [trainer] section, the outer optimizer's own defaults filled in (``trainer_keys``; under
    ``error_feedback`` no outer momentum unless set)."""
    trainer = TrainerSpec(
        **with_outer_defaults(read_table(table, TRAINER_KEYS, "trainer.", source), error_feedback)
    )
    error = outer_error(trainer)
    if error:
        raise ScenarioError(source, f"trainer.{error[0]}", error[1])
    return trainer


def build(document: dict[str, Any], source: str) -> Scenario:
    check_known_keys(
        document,
        TOP_KEYS,
        "",
        source,
        extra=list(SECTIONS) + ["trainer", "event", "accelerators", *ARRAYS],
    )
    top = {name: read_value(document, name, key, "", source) for name, key in TOP_KEYS.items()}
    for section in ("model", "schedule"):
        if section not in document:
            raise ScenarioError(source, f"[{section}]", "is required")
    model = ModelSpec(**read_table(document["model"], SECTIONS["model"], "model.", source))
    schedule_values = read_table(document["schedule"], SECTIONS["schedule"], "schedule.", source)
    if schedule_values["bits"] is None:
        schedule_values["bits"] = default_bits(model, source)
    schedule = ScheduleSpec(**schedule_values)
    network = NetworkSpec(
        **read_table(document.get("network", {}), SECTIONS["network"], "network.", source)
    )
    syncer = SyncerSpec(
        **read_table(document.get("syncer", {}), SECTIONS["syncer"], "syncer.", source)
    )
    exchange = ExchangeSpec(
        **read_table(document.get("exchange", {}), SECTIONS["exchange"], "exchange.", source)
    )
    store = StoreSpec(**read_table(document.get("store", {}), SECTIONS["store"], "store.", source))
    compute = ComputeSpec(
        **read_table(document.get("compute", {}), SECTIONS["compute"], "compute.", source)
    )
    trainer = read_trainer(document.get("trainer", {}), source, schedule.error_feedback > 0)
    accelerators = read_accelerators(document.get("accelerators", {}), source)
    per_param_bytes = bytes_per_param(
        model.bytes_per_param, SCHEDULES[schedule.algorithm], trainer, schedule.error_feedback > 0
    )
    islands = read_islands(document.get("island"), model, accelerators, per_param_bytes, source)
    events = read_events(document.get("event", []), islands, source)
    regions = tuple(
        read_table(table, REGION_KEYS, f"region.{index}.", source)["name"]
        for index, table in enumerate(read_array(document, "region", source))
    )
    backbones = tuple(
        BackboneSpec(**read_table(table, BACKBONE_KEYS, f"backbone.{index}.", source))
        for index, table in enumerate(read_array(document, "backbone", source))
    )
    check_topology(regions, backbones, islands, syncer, schedule, source)
    latencies = with_csv(
        [
            (
                PairLatency(**read_table(table, LATENCY_KEYS, f"latency.{index}.", source)),
                f"latency.{index}.between",
            )
            for index, table in enumerate(read_array(document, "latency", source))
        ],
        network.rtt_csv,
        islands,
        source,
    )
    scenario = Scenario(
        name=top["name"],
        description=top["description"],
        seed=top["seed"],
        model=model,
        schedule=schedule,
        network=network,
        islands=islands,
        source=source,
        trainer=trainer,
        syncer=syncer,
        store=store,
        events=tuple(sorted(events, key=lambda event: (event.at_s, event.island))),
        regions=regions,
        backbones=backbones,
        latencies=latencies,
        exchange=exchange,
        compute=compute,
    )
    check_schedule(scenario, source)
    check_exchange(scenario, source)
    check_compression(scenario, source)
    check_gather(scenario, source)
    check_fifo(scenario, source)
    check_collective(scenario, source)
    check_runnable(scenario, events)
    check_unread(scenario, source)
    return scenario


def default_bits(model: ModelSpec, source: str) -> int:
    bits = model.bytes_per_param * 8
    if bits not in (32, 16, 8, 4):
        raise ScenarioError(
            source,
            "schedule.bits",
            f"is required when model.bytes_per_param * 8 = {bits:g} is not one of 32, 16, 8, 4",
        )
    return int(bits)


def read_accelerators(table: Any, source: str) -> dict[str, float]:
    """The built-in peak FLOP/s table, with the scenario's ``[accelerators]`` entries added or replaced."""
    if not isinstance(table, dict):
        raise ScenarioError(source, "accelerators", "must be a table of name = peak FLOP/s")
    peaks = dict(PEAK_BF16_FLOPS)
    for name, value in table.items():
        if not is_positive_number(value):
            raise ScenarioError(
                source,
                f"accelerators.{name}",
                f"must be a peak FLOP/s > 0 (got {shown_value(value)})",
            )
        peaks[name] = float(value)
    return peaks


def read_islands(
    raw: Any, model: ModelSpec, accelerators: dict[str, float], per_param_bytes: float, source: str
) -> tuple[IslandSpec, ...]:
    """The islands in file order, each one's replica checked to fit its accelerators and, offloaded,
    its host (``memory.py``), its offload keys read (``offload.py``), their names and their replicas'
    names unique."""
    if raw is None:
        raise ScenarioError(source, "[[island]]", "at least one island is required")
    if not isinstance(raw, list):
        raise ScenarioError(
            source, "island", "must be an array of tables: write [[island]] for each island"
        )
    islands = []
    for index, table in enumerate(raw):
        prefix = f"island.{index}."
        values = read_table(table, ISLAND_KEYS, prefix, source)
        islands.append(
            IslandSpec(
                name=values["name"],
                replicas=values["replicas"],
                step_time_s=island_step_time_s(values, model, accelerators, prefix, source),
                upload_gbps=direction_gbps(values, "upload_gbps", prefix, source),
                download_gbps=direction_gbps(values, "download_gbps", prefix, source),
                latency_ms=values["latency_ms"],
                jitter_cv=values["jitter_cv"],
                present=values["present"],
                mtbf_s=values["mtbf_s"],
                mttr_s=values["mttr_s"],
                chips=values["gpus"] if values["chips"] is None else values["chips"],
                chip_mtbf_s=values["chip_mtbf_s"],
                recovery_s=failure_recovery_s(values, prefix, source),
                cost_per_hour=values["cost_per_hour"],
                upload_burst_bytes=first_given(values["upload_burst_bytes"], values["burst_bytes"]),
                download_burst_bytes=first_given(
                    values["download_burst_bytes"], values["burst_bytes"]
                ),
                region=values["region"],
            )
        )
        replica = Replica(
            index,
            values["name"],
            model.parameters,
            values["gpus"],
            Placement(per_param_bytes, model.bytes_per_param, values["offload"]),
        )
        check_replica_fits(replica, accelerator_memory(values), source)
        check_host_fits(replica, values["host_memory_gb"], source)
        check_offload_keys(values, accelerator_memory(values) is not None, prefix, source)
    check_names(islands, source)
    return tuple(islands)


def accelerator_memory(values: dict[str, Any]) -> tuple[float, str] | None:
    """One accelerator's memory in GB and whose figure it is: ``memory_gb``, else the table's for
    ``gpu``; None where neither is known (a step time given alone, an accelerator added in
    ``[accelerators]``)."""
    if values["memory_gb"] is not None:
        return values["memory_gb"], "island.memory_gb"
    if values["gpu"] in MEMORY_GB:
        return MEMORY_GB[values["gpu"]], f"{values['gpu']}, from its datasheet"
    return None


def check_names(islands: list[IslandSpec], source: str) -> None:
    """Island names and their replicas' worker names (``Scenario.workers``: ``a-0``, ``a-1`` for an
    island ``a`` of 2) are one namespace, the one events and ``--set island.NAME.key`` reach into."""
    owner: dict[str, str] = {}
    for index, island in enumerate(islands):
        replicas = (
            [f"{island.name}-{r}" for r in range(island.replicas)] if island.replicas > 1 else []
        )
        for name in [island.name, *replicas]:
            mine = (
                f"island {index}"
                if name == island.name
                else f"a replica of island {index} ('{island.name}')"
            )
            if name in owner:
                raise ScenarioError(
                    source,
                    f"island.{index}.name",
                    f"'{name}' names both {owner[name]} and {mine}: names must be unique across "
                    f"islands and their replicas (an island 'a' of 2 replicas names them 'a-0', "
                    "'a-1')",
                )
            owner[name] = mine


def failure_recovery_s(values: dict[str, Any], prefix: str, source: str) -> float | None:
    """``recovery_s``, required with ``chip_mtbf_s`` (a failed worker must come back some time)."""
    if values["chip_mtbf_s"] is not None and values["recovery_s"] is None:
        raise ScenarioError(
            source,
            prefix + "recovery_s",
            "is required with chip_mtbf_s: how long until a failed worker computes again",
        )
    if values["chip_mtbf_s"] is not None and values["mtbf_s"] is not None:
        raise ScenarioError(
            source,
            prefix + "chip_mtbf_s",
            "give either chip failures (chip_mtbf_s, recovery_s) or random churn (mtbf_s, mttr_s)",
        )
    return values["recovery_s"]


def island_step_time_s(
    values: dict[str, Any],
    model: ModelSpec,
    accelerators: dict[str, float],
    prefix: str,
    source: str,
) -> float:
    """``step_time_s`` as given, or 6 * parameters * tokens_per_step / (gpus * peak * mfu) and what an
    offloaded optimizer adds to it (``offload.py``)."""
    derived_keys = [key for key in ("gpu", "mfu") if values[key] is not None]
    if values["step_time_s"] is not None:
        if derived_keys:
            raise ScenarioError(
                source,
                prefix + derived_keys[0],
                "give either step_time_s or gpu/gpus/mfu, not both",
            )
        return values["step_time_s"]
    if not derived_keys:
        raise ScenarioError(
            source,
            prefix + "step_time_s",
            "is required (or derive it from gpu, gpus and mfu with model.tokens_per_step)",
        )
    for key in ("gpu", "mfu"):
        if values[key] is None:
            raise ScenarioError(
                source,
                prefix + key,
                "is required to derive the step time from gpu and mfu (or give step_time_s)",
            )
    if model.tokens_per_step is None:
        raise ScenarioError(
            source, "model.tokens_per_step", "is required to derive step times from gpu and mfu"
        )
    if values["gpu"] not in accelerators:
        hint = difflib.get_close_matches(values["gpu"], list(accelerators), n=1)
        suffix = f" (did you mean '{hint[0]}'?)" if hint else " (add it to [accelerators])"
        raise ScenarioError(
            source, prefix + "gpu", f"unknown accelerator '{values['gpu']}'{suffix}"
        )
    step_time_s = derived_step_time_s(
        model.parameters,
        model.tokens_per_step,
        values["gpus"],
        accelerators[values["gpu"]],
        values["mfu"],
    )
    step_time_s += island_offload_s(
        values, model.parameters, model.bytes_per_param, step_time_s, prefix, source
    )
    return check_step_time(step_time_s, prefix + "step_time_s", source)


def first_given(value: float | None, default: float) -> float:
    return default if value is None else value


def direction_gbps(values: dict[str, Any], key: str, prefix: str, source: str) -> float:
    if values[key] is not None:
        return values[key]
    if values["bandwidth_gbps"] is None:
        raise ScenarioError(
            source,
            prefix + "bandwidth_gbps",
            "is required (or give both upload_gbps and download_gbps)",
        )
    return values["bandwidth_gbps"]


def read_events(raw: Any, islands: tuple[IslandSpec, ...], source: str) -> tuple[ChurnEvent, ...]:
    """The events in file order (the scenario holds them sorted by time)."""
    if not isinstance(raw, list):
        raise ScenarioError(
            source, "event", "must be an array of tables: write [[event]] for each event"
        )
    names = {island.name for island in islands}
    names |= {
        f"{island.name}-{r}"
        for island in islands
        if island.replicas > 1
        for r in range(island.replicas)
    }
    events = []
    for index, table in enumerate(raw):
        values = read_table(table, EVENT_KEYS, f"event.{index}.", source)
        if values["island"] not in names:
            hint = difflib.get_close_matches(values["island"], sorted(names), n=1)
            suffix = f" (did you mean '{hint[0]}'?)" if hint else ""
            raise ScenarioError(
                source,
                f"event.{index}.island",
                f"no island or worker named '{values['island']}'{suffix}",
            )
        events.append(ChurnEvent(**values))
    return tuple(events)


def check_schedule(scenario: Scenario, source: str) -> None:
    """Rules that tie keys together: the schedule's own (``Schedule.check``), its barriers, the
    workers a sync needs and the layers its fragments are made of."""
    schedule, declared = scenario.schedule, schedule_of(scenario)
    if schedule.barrier not in declared.barriers:
        runs = ", ".join(f"'{b}'" for b in declared.barriers)
        raise ScenarioError(
            source,
            "schedule.barrier",
            f"'{schedule.barrier}' is not run by algorithm = \"{schedule.algorithm}\" (it runs {runs})",
        )
    if scenario.worker_count < 2:
        raise ScenarioError(
            source,
            "island",
            f"a sync needs at least 2 workers; the islands give {scenario.worker_count} "
            "(add an island or set replicas)",
        )
    if "quorum" not in declared.reads and schedule.quorum > 1:
        readers = ", ".join(
            f'"{name}"' for name, other in SCHEDULES.items() if "quorum" in other.reads
        )
        raise ScenarioError(
            source,
            "schedule.quorum",
            f'{schedule.quorum} has no effect: algorithm = "{schedule.algorithm}" syncs every '
            f"worker each round; a quorum is read by {readers} only (remove it, or set it to 1)",
        )
    if "quorum" in declared.reads and schedule.quorum > scenario.worker_count:
        raise ScenarioError(
            source,
            "schedule.quorum",
            f"must be at most the {scenario.worker_count} learners (workers) that report "
            f"(got {schedule.quorum})",
        )
    broken = declared.check(schedule)
    if broken:
        raise ScenarioError(source, *broken)
    if scenario.trainer.aggregation not in declared.aggregations:
        runs = ", ".join(f'"{rule}"' for rule in declared.aggregations)
        raise ScenarioError(
            source,
            "trainer.aggregation",
            f'"{scenario.trainer.aggregation}" is not run by algorithm = "{schedule.algorithm}" '
            f"(it merges by {runs})",
        )
    if scenario.has_failures() and schedule.barrier == "deadline":
        raise ScenarioError(
            source,
            "schedule.barrier",
            '"deadline" is not modelled with chip failures (chip_mtbf_s): use "wait" or "adaptive"',
        )
    if scenario.has_failures() and not schedule.elastic and scenario.has_churn():
        raise ScenarioError(
            source,
            "schedule.elastic",
            "false stops every worker on a chip failure, but this scenario's churn (mtbf_s, "
            "[[event]] or present = false) lets workers come and go: set elastic = true",
        )
    check_layers(scenario.model, declared.fragments(schedule), source)


TENSOR_SUM_TOLERANCE = 0.01  # tensor_values against model.parameters: a wire's padding and scales


def check_tensor_values(scenario: Scenario, source: str) -> None:
    """``exchange.tensor_values`` lays out buckets or per-tensor calls, lists as many tensors as
    ``tensors`` where both are given, and adds up to ``model.parameters`` within 1%."""
    exchange = scenario.exchange
    values = exchange.tensor_values
    if values is None:
        return
    where = "exchange.tensor_values"
    if exchange.calls not in ("buckets", "per_tensor"):
        raise ScenarioError(
            source,
            where,
            f'has no effect with calls = "{exchange.calls}": set calls = "buckets" or "per_tensor" '
            "or remove it",
        )
    if exchange.tensors is not None and exchange.tensors != len(values):
        raise ScenarioError(
            source,
            where,
            f"lists {len(values)} tensors but exchange.tensors = {exchange.tensors}: give one of them",
        )
    total, parameters = math.fsum(values), scenario.model.parameters
    if abs(total - parameters) > TENSOR_SUM_TOLERANCE * parameters:
        raise ScenarioError(
            source,
            where,
            f"must add up to model.parameters within {TENSOR_SUM_TOLERANCE:.0%} (they add up to "
            f"{total:.6g}, model.parameters = {parameters:.6g})",
        )


def check_exchange(scenario: Scenario, source: str) -> None:
    """``[exchange]`` keys that do nothing, or miss what they need, are refused."""
    exchange, declared = scenario.exchange, schedule_of(scenario)
    if exchange.bucket_cap_mb is not None and exchange.calls != "buckets":
        raise ScenarioError(
            source,
            "exchange.bucket_cap_mb",
            f'has no effect with calls = "{exchange.calls}": set calls = "buckets" or remove it',
        )
    if exchange.first_bucket_mb is not None and exchange.calls != "buckets":
        raise ScenarioError(
            source,
            "exchange.first_bucket_mb",
            f'has no effect with calls = "{exchange.calls}": set calls = "buckets" or remove it',
        )
    if exchange.tensors is not None and exchange.calls != "per_tensor":
        raise ScenarioError(
            source,
            "exchange.tensors",
            f'has no effect with calls = "{exchange.calls}": set calls = "per_tensor" or remove it',
        )
    if exchange.calls == "per_tensor" and exchange.tensor_count is None:
        raise ScenarioError(
            source,
            "exchange.tensors",
            'is required with calls = "per_tensor" (or exchange.tensor_values): the model\'s '
            "parameter tensors, len(list(model.parameters()))",
        )
    check_tensor_values(scenario, source)
    if exchange.is_default:
        return
    if not declared.coupled:
        raise ScenarioError(
            source,
            "[exchange]",
            f'prices collective calls; algorithm = "{scenario.schedule.algorithm}" has none (its '
            "learners' round trips to the syncer): remove the section",
        )
    if scenario.network.collective != "ring":
        raise ScenarioError(
            source,
            "[exchange]",
            f'prices a ring\'s calls; network.collective = "{scenario.network.collective}" is '
            'not priced by it: use collective = "ring" or remove the section',
        )
    if exchange.outer_step_s > 0 and declared.exchanged == GRADIENT:
        raise ScenarioError(
            source,
            "exchange.outer_step_s",
            f'has no effect: algorithm = "{scenario.schedule.algorithm}" takes no outer step '
            "(set it to 0)",
        )


def check_compression(scenario: Scenario, source: str) -> None:
    """Compression keys that do nothing, or that the schedule or the exchange cannot run
    (``schedules.compression.problem``)."""
    broken = compression_problem(scenario, schedule_of(scenario).compressions)
    if broken:
        raise ScenarioError(source, *broken)


def check_gather(scenario: Scenario, source: str) -> None:
    """Gather keys that do nothing or cannot be run (``schedules.gather.problem``), and the store's
    place among the regions."""
    broken = gather_problem(scenario)
    if broken:
        raise ScenarioError(source, *broken)
    if scenario.network.gather == STORE:
        check_store_region(scenario, source)


def check_layers(model: ModelSpec, fragments: int, source: str) -> None:
    """Fragments are layer groups: every fragment needs a layer, and the embeddings fit in the model."""
    if model.embedding_parameters >= model.parameters:
        raise ScenarioError(
            source,
            "model.embedding_parameters",
            f"must be below model.parameters ({model.embedding_parameters:g} >= {model.parameters:g})",
        )
    if model.layers is not None and fragments > model.layers:
        raise ScenarioError(
            source,
            "schedule.fragments",
            f"fragments are layer groups: P = {fragments} needs model.layers >= {fragments} "
            f"(got {model.layers})",
        )
