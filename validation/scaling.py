"""A scenario made small enough to run for real on this machine, keeping what utilisation depends on.

Kept: the algorithm, M (up to ``max_workers``: the first workers of ``scenario.workers()``), P, bits,
and the ratio of transfer time to compute time per interval. Changed, and said so in ``notes``:

* the model: the trainer's small GPT with about ``MODEL_PARAMETERS`` parameters: ``n_layer =
  max(2, P)`` (fragments are layer groups), the width to match; big enough that transfers run at
  tens of Mbit/s, small enough that every step's real work fits its paced time on 2 busy cores;
* time: the fastest island's step becomes ``step_time_s`` (the others keep their ratio to it, so a
  straggler stays a straggler), H shrinks to at most ``max_inner_steps`` (a multiple of P), tau
  shrinks with H, latencies shrink by the same factor k as one interval;
* bandwidth: island i gets bw_i * (V_scaled / V_orig) / k, V = 2(M-1)/M * S the ring volume per
  worker, S the payload on the wire, so transfer / compute per interval is unchanged; rates are
  clamped to what tbf shapes well here (``MIN_BITS_PER_S`` to ``MAX_BITS_PER_S``);
* Decoupled DiLoCo: a learner moves each fragment once each way whatever M, so the rate factor
  follows the payload, not the ring volume; the syncer's link scales as the islands' do, its
  latency and a grace window in seconds by k;
* top-k compression (``schedule.compression = "topk"``): the payload is the trainer's GPT's real
  top-k payload, gathered around the ring, peer to peer or through the object store as the original
  says (``network.gather``, ``schedule.gather_peers``, ``[store]``); the rates follow the gather's
  time rather than a volume (``topk.replica``);
* outer steps: as many as fit in ``target_wall_s`` (at least ``MIN_OUTER_STEPS``);
* churn (``[[event]]`` entries, ``present = false``; DiLoCo only, the elastic trainer's one
  combination): the whole timeline shrinks by k, so an event at ``at_s`` happens at ``at_s * k``, the
  same point of the same interval (compute and transfer both scale by k); events past the scaled
  run's end are dropped and said so. The detection timeout scales by k too, but not below
  ``MIN_DETECTION_S``; a joiner downloads what the trainer broadcasts (``JOIN_STATE_BYTES_PER_VALUE``);
* what the trainer cannot run yet (random churn, churn outside DiLoCo, deadline / adaptive barriers,
  step jitter, TCP windows) is left out and listed as not validated.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field
from typing import Any

from islands.scenarios import Scenario, Worker
from islands.scenarios.loader import from_dict
from islands.scenarios.spec import MAX_BUCKET_CAP_MB, MIN_BUCKET_CAP_MB
from islands.schedules import GRADIENT, PSEUDO_GRADIENT, Schedule, schedule_of
from islands.schedules.buckets import BYTES_PER_MIB, caps_values
from islands.schedules.compression import NONE, TopK
from islands.schedules.gather import STORE
from islands.schedules.layout import EMBEDDINGS, layer_of, split_by_layer
from islands.simulator import simulate
from islands.simulator.network.collectives import calls_of
from islands.units import BITS_PER_BYTE, BITS_PER_GBIT, BITS_PER_MBIT, MS_PER_S

from .topk import replica

MIN_BITS_PER_S = 5e6
MAX_BITS_PER_S = 500e6
MIN_OUTER_STEPS = 2
PROBE_OUTER_STEPS = 2  # the simulated run that times one outer step
MODEL_PARAMETERS = 2.5e6  # about 30 ms of forward, backward and AdamW per step on one core here
WIDTH_STEP = 32
SCALED_BYTES_PER_PARAM = 4  # the trainer's fp32 values
TRAINER: dict[str, Any] = {
    "n_head": 4,
    "block_size": 16,
    "batch_size": 1,
    "corpus_bytes": 200_000,
    "eval_batches": 1,
    "checkpoint_every": 0,
    "warmup_steps": 2,
    "timeout_s": 120.0,
}
# The elastic trainer's survivors must all reach the re-forming within the detection timeout: their
# exchanges fail at once on the dead peer's closed sockets, so only store polling (20 ms) and the
# 50 ms heartbeat separate them; 10 heartbeats leave room for a busy 2-core machine.
MIN_DETECTION_S = 0.5
# trainer.collective_timeout_s only fires on a silent (not dead) peer, which scripted churn never
# makes; it must outlast the longest legitimate wait in a collective: a state download or a sync.
# At least the trainer's default; longer when one scaled outer step (compute and sync) takes longer.
MIN_COLLECTIVE_TIMEOUT_S = 10.0
# What the leader's snapshot (``ElasticWorld.state_payload``, ``trainer/elastic/joining.py``) sends a joiner
# per exchanged value: the fp32 global weights and the outer optimizer's fp32 momentum (the simulator
# downloads parameters * bytes_per_param).
JOIN_STATE_BYTES_PER_VALUE = 8


@dataclass(frozen=True)
class ScaleOptions:
    step_time_s: float = 0.2
    max_workers: int = 4
    max_inner_steps: int = 20
    target_wall_s: float = 12.0
    pace: bool = True  # pace inner steps to the scaled step times (else: measure and calibrate)


@dataclass
class ScaledCase:
    """The scaled scenario as a TOML-ready document, and how it relates to the original."""

    original: Scenario
    document: dict[str, Any]
    time_factor: float  # k: scaled interval / original interval
    ratio_change: float  # (transfer / compute) scaled / original: 1 unless a rate was clamped
    notes: list[str] = field(default_factory=list)

    def scenario(self, overrides: tuple[str, ...] = ()) -> Scenario:
        return from_dict(self.document, f"{self.original.name} (scaled)", overrides)

    @property
    def slowest_bits_per_s(self) -> float:
        """The slowest configured rate of the scaled ring, upload or download: the one its exchange runs at."""
        return (
            min(min(i["upload_gbps"], i["download_gbps"]) for i in self.document["island"])
            * BITS_PER_GBIT
        )


def ring_volume_bytes(workers: int, payload_bytes: float) -> float:
    return 2 * (workers - 1) / workers * payload_bytes


def wire_payload_bytes(
    layer_values: list[int], schedule: Schedule, fragments: int, workers: int, bits: int
) -> float:
    """Bytes of one full exchange as the trainer encodes it (padding and int scales included)."""
    from islands.trainer.exchange.quantize import encoded_bytes, padded_length

    return sum(
        encoded_bytes(padded_length(int(values), workers), bits)
        for values in split_by_layer(layer_values, fragments, schedule.fragment_of_layer)
    )


def trainer_config(n_layer: int) -> Any:
    """The scaled model: the trainer's GPT of ``n_layer`` blocks."""
    from islands.trainer.core.model import GPTConfig

    return GPTConfig(
        block_size=TRAINER["block_size"],
        n_layer=n_layer,
        n_head=TRAINER["n_head"],
        n_embd=width(n_layer),
    )


@functools.cache
def trainer_tensors(n_layer: int) -> tuple[tuple[str, int], ...]:
    """Each parameter tensor of the scaled model, the trainer's GPT of ``n_layer`` blocks, in
    registration order: its name and values (the model built once per depth)."""
    from islands.trainer.core.model import build_model

    model = build_model(trainer_config(n_layer), 0, "cpu")
    return tuple((name, param.numel()) for name, param in model.named_parameters())


def trainer_tensor_values(n_layer: int) -> list[int]:
    """The values of each parameter tensor of the scaled model, in registration order (the token
    embedding, tied to the output head, first): the tensors its buckets take (``exchange.tensor_values``)."""
    return [values for _, values in trainer_tensors(n_layer)]


def trainer_model_values(n_layer: int) -> tuple[list[int], int]:
    """Values per layer of the scaled model, the trainer's GPT (``schedules.layout.layer_of``), and
    how many of them are its embeddings."""
    values, embedding = [0] * n_layer, 0
    for name, numel in trainer_tensors(n_layer):
        values[layer_of(name, n_layer)] += numel
        embedding += numel if name.startswith(EMBEDDINGS) else 0
    return values, embedding


def model_entry(
    layer_values: list[int], embedding_values: int, payload_bytes: float, bits: int
) -> dict[str, Any]:
    """The scaled ``[model]``: the trainer's GPT's layers with the embeddings beside the first block
    (``schedules/layout.py``; the final LayerNorm, 2 x n_embd values, is spread over the blocks),
    sized so that parameters * bits / 8 is the trainer's real payload on the wire."""
    parameters = payload_bytes * BITS_PER_BYTE / bits
    wire_per_value = parameters / sum(layer_values)
    return {
        "parameters": parameters,
        "bytes_per_param": SCALED_BYTES_PER_PARAM,
        "layers": len(layer_values),
        "embedding_parameters": embedding_values * wire_per_value,
    }


def n_layers(fragments: int) -> int:
    return max(2, fragments)


def width(n_layer: int) -> int:
    """n_embd giving about ``MODEL_PARAMETERS`` (a block holds about 12 n_embd^2 parameters)."""
    return max(
        WIDTH_STEP, round(math.sqrt(MODEL_PARAMETERS / (12 * n_layer)) / WIDTH_STEP) * WIDTH_STEP
    )


def scaled_schedule(
    schedule: Any, declared: Schedule, max_inner_steps: int
) -> tuple[int, int, int, list[str]]:
    """(H, P, tau) of the scaled run, and notes on what changed: H shrinks to a multiple of P, tau
    with it (where the schedule reads them)."""
    h, p, tau = schedule.inner_steps, declared.fragments(schedule), schedule.overlap_steps
    if "inner_steps" not in declared.reads:
        return 1, 1, 0, []
    scaled_h = min(h, max(p, max_inner_steps // p * p))
    notes = [f"H {h} -> {scaled_h}"] if scaled_h != h else []
    if "overlap_steps" not in declared.reads:
        return scaled_h, p, 0, notes
    window = scaled_h // p
    scaled_tau = min(window - 1, max(1 if tau else 0, round(tau * scaled_h / h)))
    if scaled_tau * h != tau * scaled_h:
        notes.append(
            f"tau {tau} -> {scaled_tau} (tau/H {tau / h:.3f} -> {scaled_tau / scaled_h:.3f})"
        )
    return scaled_h, p, scaled_tau, notes


def has_churn(scenario: Scenario) -> bool:
    return bool(scenario.events) or any(not i.present or i.mtbf_s for i in scenario.islands)


def churn_validated(scenario: Scenario) -> bool:
    """Scripted churn under a one-fragment pseudo-gradient schedule (DiLoCo): what the elastic trainer
    plays and has been measured against (the scaled replica has one rank per island)."""
    scripted = not any(i.mtbf_s for i in scenario.islands)
    declared = schedule_of(scenario)
    one_fragment = (
        declared.exchanged == PSEUDO_GRADIENT and declared.fragments(scenario.schedule) == 1
    )
    dense = scenario.schedule.compression == NONE  # the elastic trainer carries no top-k payload
    return has_churn(scenario) and scripted and one_fragment and dense


def scaled_calls(
    scenario: Scenario, scaled_parameters: float, overlapped: bool, n_layer: int
) -> dict[str, Any]:
    """The original's collective calls per exchange, made by the trainer on its own model: as many calls
    per whole-model exchange (``calls_of``), each fragment its share (``calls = "per_tensor"``, which
    the trainer and the simulator count alike from shares of values). The calls' fixed costs are the
    trainer's own, which the calibration measures, not the scenario's. Buckets overlapped with the
    backward pass stay buckets (their calls wait for them, ``collectives.bucket_wait``), laid out
    from the trainer's own tensors (``trainer_tensor_values``, scaled to add up to the scaled
    ``model.parameters``) with the original's caps scaled as its gradient is, so both executors take
    the scaled model's real layout (its embedding in the last bucket)."""
    calls = calls_of(scenario, scenario.payload_bytes)
    exchange = scenario.exchange
    if not (overlapped and exchange.calls == "buckets"):
        return {"calls": "per_tensor", "tensors": calls}
    bytes_per_value = scenario.model.bytes_per_param
    values = scenario.payload_bytes * BITS_PER_BYTE / scenario.schedule.bits
    ratio = scaled_parameters * SCALED_BYTES_PER_PARAM / (values * bytes_per_value)
    first_cap, cap = caps_values(exchange, bytes_per_value)
    tensors = trainer_tensor_values(n_layer)
    share = scaled_parameters / sum(tensors)

    def scaled_mb(cap_values: float) -> float:
        cap_mb = cap_values * bytes_per_value * ratio / BYTES_PER_MIB
        return min(MAX_BUCKET_CAP_MB, max(MIN_BUCKET_CAP_MB, cap_mb))

    return {
        "calls": "buckets",
        "bucket_cap_mb": scaled_mb(cap),
        "first_bucket_mb": scaled_mb(first_cap),
        "tensor_values": [size * share for size in tensors],
    }


def overlap_validated(scenario: Scenario, paced: bool) -> bool:
    """Whether the trainer runs the scenario's backward overlap as the simulator prices it: DDP's
    gradient (``trainer.config.check_overlap``), paced, or unpaced in buckets (they go as the real
    backward pass produces them, from its last layers; a flat or per-tensor exchange's first piece
    holds the embeddings, which the real pass produces last, while the simulator launches it whole
    where the overlap starts)."""
    overlap = scenario.schedule.backward_overlap
    gradient = schedule_of(scenario).exchanged == GRADIENT
    return bool(overlap) and gradient and (paced or scenario.exchange.calls == "buckets")


def not_validated(scenario: Scenario, paced: bool = True) -> list[str]:
    """What the scaled run leaves out because the trainer cannot apply it yet (``paced``: whether
    the scaled run paces its steps)."""
    notes = []
    if has_churn(scenario) and not churn_validated(scenario):
        if any(i.mtbf_s for i in scenario.islands):
            reason = "random churn (mtbf_s) is simulated only"
        elif scenario.schedule.compression != NONE:
            reason = "the elastic trainer carries no top-k payload"
        else:
            reason = f"churn is validated under one-fragment DiLoCo only, not {scenario.schedule.algorithm!r}"
        notes.append(f"churn: not validated ({reason}); run without it")
    if scenario.has_failures():
        notes.append(
            "chip failures (chip_mtbf_s): not validated (simulated only); run without them"
        )
    exchange = scenario.exchange
    costs = [
        key
        for key in ("call_overhead_s", "sync_overhead_s", "first_call_s", "outer_step_s")
        if getattr(exchange, key)
    ]
    if costs:
        notes.append(
            f"exchange.{', exchange.'.join(costs)}: the trainer's own are measured, not the scenario's"
        )
    if exchange.calls == "buckets" and not overlap_validated(scenario, paced):
        notes.append(
            f"buckets: validated as their {calls_of(scenario, scenario.payload_bytes)} calls per "
            "whole-model exchange, each fragment its share"
        )
    if scenario.schedule.barrier != "wait":
        notes.append(
            f"barrier {scenario.schedule.barrier!r}: not validated (the trainer runs 'wait' only)"
        )
    overlap = scenario.schedule.backward_overlap
    if overlap and not overlap_validated(scenario, paced):
        why = (
            "unpaced, the trainer overlaps only buckets"
            if schedule_of(scenario).exchanged == GRADIENT
            else "the trainer sends a pseudo-gradient after the whole backward pass"
        )
        notes.append(f"backward overlap {overlap:.3g}: not validated ({why}); run without it")
    if any(i.jitter_cv for i in scenario.islands):
        notes.append("step-time jitter: not validated (paced steps are exact); run without it")
    if scenario.compute.slowdown_while_exchanging:
        notes.append(
            f"compute.slowdown_while_exchanging {scenario.compute.slowdown_while_exchanging:g}: not "
            "validated (a paced step sleeps, and a sleep does not slow; a measured one's mean step "
            "time holds its own slowdown); the scaled scenario leaves it at 0"
        )
    if scenario.network.tcp_window_bytes:
        notes.append(
            "TCP window cap: not validated (the emulated links use the kernel's own windows)"
        )
    if scenario.network.collective != "ring":
        notes.append(
            f"collective {scenario.network.collective!r}: not validated (the trainer runs a ring); "
            "validated as a ring"
        )
    if scenario.network.egress_queue != "fair":
        notes.append(
            f"egress_queue {scenario.network.egress_queue!r}: its cost on equal links is not "
            "validated (the scaled case takes the rates the calibration measured through the "
            "emulation's own shaper, which holds one FIFO per egress under --shaper fifo); only "
            "unequal links' share is priced by the model"
        )
    if scenario.network.reduce_scatter != "all_to_all":
        notes.append(
            f"reduce_scatter {scenario.network.reduce_scatter!r}: not validated (the trainer's "
            "all-reduce makes its first pass as an all-to-all); validated as an all-to-all"
        )
    if scenario.network.on_departure != "restart":
        notes.append(
            f"on_departure {scenario.network.on_departure!r}: not validated (the trainer restarts a broken "
            "collective); validated restarting"
        )
    if scenario.regions:
        notes.append(
            "regions and backbones: not validated (the emulated WAN is one core); run without them"
        )
    if scenario.latencies:
        notes.append(
            "measured round trips ([[latency]]): not validated (the emulated WAN gives each island one "
            "latency); run with the islands' own"
        )
    if scenario.network.loss_rate:
        notes.append("packet loss: not validated (this kernel has no netem); run without it")
    return notes


def clamp_bits_per_s(bits_per_s: float) -> float:
    return min(MAX_BITS_PER_S, max(MIN_BITS_PER_S, bits_per_s))


def island_entries(
    workers: list[Worker], step_factor: float, time_factor: float, rate_factor: float
) -> tuple[list[dict[str, Any]], float]:
    """One scaled island per worker; returns them and the slowest link's rate after clamping over
    before (a ring is paced by its slowest link, so only that one changes transfer / compute)."""
    entries, wanted_slowest, clamped_slowest = [], math.inf, math.inf
    for worker in workers:
        wanted = {
            "up": worker.upload_bytes_per_s * BITS_PER_BYTE * rate_factor,
            "down": worker.download_bytes_per_s * BITS_PER_BYTE * rate_factor,
        }
        clamped = {d: clamp_bits_per_s(v) for d, v in wanted.items()}
        wanted_slowest = min(wanted_slowest, *wanted.values())
        clamped_slowest = min(clamped_slowest, *clamped.values())
        entries.append(
            {
                "name": worker.name,
                "step_time_s": worker.step_time_s * step_factor,
                "upload_gbps": clamped["up"] / BITS_PER_GBIT,
                "download_gbps": clamped["down"] / BITS_PER_GBIT,
                "latency_ms": worker.latency_s * MS_PER_S * time_factor,
            }
        )
    return entries, clamped_slowest / wanted_slowest


def scale(scenario: Scenario, options: ScaleOptions = ScaleOptions()) -> ScaledCase:
    """The scaled replica of ``scenario`` (see the module docstring)."""
    schedule = scenario.schedule
    workers = scenario.workers()[: options.max_workers]
    notes = not_validated(scenario, options.pace)
    overlapped = overlap_validated(scenario, options.pace)
    if len(workers) < scenario.worker_count:
        rescaled = "ring volume" if schedule_of(scenario).coupled else "payload"
        if schedule.compression != NONE:
            rescaled = "gather time"
        notes.append(
            f"M {scenario.worker_count} -> {len(workers)} (first workers; {rescaled} rescaled)"
        )
    declared = schedule_of(scenario)
    h, p, tau, schedule_notes = scaled_schedule(schedule, declared, options.max_inner_steps)
    notes += schedule_notes
    original_h = declared.period_steps(schedule)
    fastest_s = min(w.step_time_s for w in workers)
    step_factor = options.step_time_s / fastest_s
    time_factor = step_factor * h / original_h
    layer_values, embedding_values = trainer_model_values(n_layers(p))
    model, volume_ratio = scaled_model(scenario, workers, layer_values, embedding_values, p)
    islands, kept = island_entries(workers, step_factor, time_factor, volume_ratio / time_factor)
    if abs(kept - 1) > 1e-9:
        notes.append(
            f"the slowest link was clamped to {MIN_BITS_PER_S / BITS_PER_MBIT:.0f}-"
            f"{MAX_BITS_PER_S / BITS_PER_MBIT:.0f} Mbit/s: transfer/compute is {1 / kept:.2f}x the original's"
        )
    document: dict[str, Any] = {
        "name": f"{scenario.name}-scaled",
        "seed": scenario.seed,
        "model": model,
        "schedule": {
            "algorithm": schedule.algorithm,
            "inner_steps": h,
            "outer_steps": PROBE_OUTER_STEPS,
            "fragments": p,
            "overlap_steps": tau,
            "bits": schedule.bits,
        },
        "trainer": {
            **TRAINER,
            "n_layer": n_layers(p),
            "n_embd": width(n_layers(p)),
            "pace_islands": options.pace,
        },
        "island": islands,
    }
    if schedule.compression != NONE:
        notes += add_gather(
            document, scenario, len(workers), volume_ratio / time_factor, time_factor
        )
    if not declared.coupled:
        add_syncer(document, scenario, time_factor, volume_ratio / time_factor)
    if overlapped:
        document["schedule"]["backward_overlap"] = schedule.backward_overlap
    if scenario.exchange.calls != "flat":
        document["exchange"] = scaled_calls(scenario, model["parameters"], overlapped, n_layers(p))
    case = ScaledCase(scenario, document, time_factor, 1 / kept, notes)
    document["schedule"]["outer_steps"], one_outer_s = fitting_outer_steps(
        case, schedule, options.target_wall_s
    )
    if (
        "inner_steps" not in declared.reads
    ):  # the trainer evaluates every H steps; these syncs ignore H
        document["schedule"]["inner_steps"] = document["schedule"]["outer_steps"]
    if churn_validated(scenario):
        add_churn(case, workers, one_outer_s)
    return case


def scaled_model(
    scenario: Scenario,
    workers: list[Worker],
    layer_values: list[int],
    embedding_values: int,
    fragments: int,
) -> tuple[dict[str, Any], float]:
    """The scaled ``[model]`` and the factor by which the scaled run's transfer time per exchange,
    at the original's rates, exceeds the original's: the ring volume's ratio (dense, coupled), the
    payload's (a Decoupled DiLoCo learner moves each fragment once each way) or the gather's time
    (top-k, ``topk.replica``)."""
    schedule, declared, m = scenario.schedule, schedule_of(scenario), len(workers)
    layout = TopK.of(schedule)
    if layout is not None:
        payload_bytes = replica.topk_payload_bytes(layer_values, declared, fragments, layout)
        original_bytes = sum(declared.priced_fragments(scenario)[1])
        ratio = replica.gather_ratio(scenario, workers, payload_bytes, original_bytes)
        return replica.topk_model_entry(layer_values, embedding_values), ratio
    payload_bytes = wire_payload_bytes(
        layer_values, declared, fragments, m if declared.coupled else 1, schedule.bits
    )
    model = model_entry(layer_values, embedding_values, payload_bytes, schedule.bits)
    if declared.coupled:
        return model, ring_volume_bytes(m, payload_bytes) / ring_volume_bytes(
            scenario.worker_count, scenario.payload_bytes
        )
    return model, payload_bytes / scenario.payload_bytes


def add_gather(
    document: dict[str, Any],
    scenario: Scenario,
    scaled_workers: int,
    rate_factor: float,
    time_factor: float,
) -> list[str]:
    """Top-k compression: its keys, how its payloads are gathered, and the object store's link (its
    rates clamped as the islands' are); returns notes on what changed."""
    document["schedule"].update(replica.schedule_keys(scenario, scaled_workers))
    document["network"] = {"gather": scenario.network.gather}
    notes = replica.gather_notes(scenario, scaled_workers)
    if scenario.network.gather != STORE:
        return notes
    store = replica.store_entry(scenario, scaled_workers, rate_factor, time_factor)
    for key in ("ingress_gbps", "egress_gbps"):
        if key in store:
            wanted = store[key] * BITS_PER_GBIT
            store[key] = clamp_bits_per_s(wanted) / BITS_PER_GBIT
            if store[key] * BITS_PER_GBIT != wanted:
                notes.append(
                    f"store.{key} clamped to {store[key] * BITS_PER_GBIT / BITS_PER_MBIT:.0f} Mbit/s "
                    f"(wanted {wanted / BITS_PER_MBIT:.3g})"
                )
    document["store"] = store
    return notes


def add_syncer(
    document: dict[str, Any], scenario: Scenario, time_factor: float, rate_factor: float
) -> None:
    """Decoupled DiLoCo: the quorum, the grace window (seconds shrink by k), and the syncer's link
    scaled as the islands' are (none stays none: a non-blocking core)."""
    schedule, syncer = scenario.schedule, scenario.syncer
    window = schedule.grace_window
    document["schedule"].update(
        quorum=schedule.quorum,
        grace_window=window if isinstance(window, str) else window * time_factor,
    )
    document["syncer"] = {"latency_ms": syncer.latency_ms * time_factor}
    if syncer.bandwidth_gbps is not None:
        rate = clamp_bits_per_s(syncer.bandwidth_gbps * BITS_PER_GBIT * rate_factor)
        document["syncer"]["bandwidth_gbps"] = rate / BITS_PER_GBIT


def add_churn(case: ScaledCase, workers: list[Worker], one_outer_s: float) -> None:
    """The scenario's events and absent islands at the scaled times, and the elastic trainer's keys."""
    document, k = case.document, case.time_factor
    end_s = document["schedule"]["outer_steps"] * one_outer_s
    events = [
        {"at_s": event.at_s * k, "island": worker.name, "kind": event.kind}
        for event in case.original.events
        for worker in workers
        if event.island in (worker.name, worker.island)
    ]
    kept = [event for event in events if event["at_s"] < end_s]
    if len(kept) < len(events):
        case.notes.append(
            f"churn: {len(events) - len(kept)} event(s) after the scaled run's end "
            f"({end_s:.1f} s) dropped"
        )
    detection_s = max(MIN_DETECTION_S, case.original.network.detection_timeout_s * k)
    document["event"] = kept
    for entry, worker in zip(document["island"], workers):
        entry["present"] = worker.present
    document["network"] = {"detection_timeout_s": detection_s}
    document["model"]["bytes_per_param"] = JOIN_STATE_BYTES_PER_VALUE
    document["trainer"].update(
        elastic=True, collective_timeout_s=max(MIN_COLLECTIVE_TIMEOUT_S, 2 * one_outer_s)
    )
    case.notes.append(
        f"churn: events at at_s x k; detection timeout "
        f"{case.original.network.detection_timeout_s:g} s -> {detection_s:.3g} s"
    )


def fitting_outer_steps(case: ScaledCase, schedule: Any, target_wall_s: float) -> tuple[int, float]:
    """As many outer steps (DDP: steps) as the simulator says fit in ``target_wall_s``, and the
    seconds of one: the mean over ``PROBE_OUTER_STEPS`` (eager updates need two to exchange at all)."""
    one_s = simulate(case.scenario()).summary["wall_time_s"] / PROBE_OUTER_STEPS
    fitting = max(MIN_OUTER_STEPS, math.floor(target_wall_s / one_s))
    return min(schedule.outer_steps, fitting), one_s


def to_toml(document: dict[str, Any]) -> str:
    """A scenario document as TOML: top-level values, then tables, then arrays of tables (the subset
    of TOML a scenario uses)."""
    lines = [
        f"{key} = {toml_value(value)}"
        for key, value in document.items()
        if not isinstance(value, (dict, list))
    ]
    for key, value in document.items():
        if isinstance(value, dict):
            lines += ["", f"[{key}]", *(f"{k} = {toml_value(v)}" for k, v in value.items())]
        elif isinstance(value, list):
            for entry in value:
                lines += ["", f"[[{key}]]", *(f"{k} = {toml_value(v)}" for k, v in entry.items())]
    return "\n".join(lines) + "\n"


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, list)):  # a JSON string or array of strings and numbers is TOML too
        return json.dumps(value)
    return repr(value)
