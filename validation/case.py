"""One validation case: scale a scenario, train it for real under emulation, simulate exactly that
scaled scenario (calibrated), compare, and write the comparison as JSON and an overlay plot.

    >>> from islands.validation.case import validate_case
    >>> comparison = validate_case("worked-example", load("worked-example"), ScaleOptions(), calibration,
    ...                            Path("runs/check"), kernel=None)

Compute speed, two ways (``ScaleOptions.pace``): *paced*, each inner step is real forward and
backward work, then a sleep up to the island's scaled step time, and the simulator gets those step
times (a prediction made before the run); *measured*, steps run unpaced and the simulator gets each
island's measured mean compute seconds per inner step (calibrated after the run).

Churn (DiLoCo with ``[[event]]`` entries): the elastic launcher plays the scaled events in the real
run (``churn``), and leaves, joins, lost compute and join time are compared too.

Top-k compression: the case's own exchange is probed alone first (``topk.costs``), and the
simulator priced from that probe and the links' ratio instead of the dense exchange's calibration;
through an object store, the bytes the store host took in and sent out are compared too
(``store_figures``: M payloads in per round, M x K out).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from islands.emulation import Shaper
from islands.emulation.link_specs import CUBIC, FIFO
from islands.errors import UserError
from islands.io import json_text, write_table, write_text
from islands.scenarios import Scenario
from islands.scenarios.fifo import fifo_unpriced
from islands.schedules import schedule_of
from islands.schedules.buckets import layout_of
from islands.schedules.compression import NONE
from islands.schedules.gather import peers_of
from islands.simulator import SimResult, simulate
from islands.simulator.network.collectives import calls_of
from islands.trainer.kinds import make_run_plan
from islands.units import MS_PER_S

from .calibration import Calibration, simulator_overrides
from .churn_run import churn_figures, train_elastic
from .compare import Comparison, Figure, compare, relative_error
from .external import measured_step_overrides
from .plot import write_overlay
from .run import VALIDATE_STEM, Measured, interface_bytes_per_worker, train_scaled
from .scaling import ScaledCase, ScaleOptions, scale, to_toml
from .topk.costs import GatherCosts, gather_overrides, measure_gather_costs


def compute_note(case: ScaledCase, measured: Measured, paced: bool) -> str:
    per_step_s = measured.run_info["mean_step_compute_s"]
    if paced:
        targets = sorted({round(i["step_time_s"], 4) for i in case.document["island"]})
        return (
            f"compute: paced to {', '.join(f'{t} s' for t in targets)} per inner step "
            f"(measured mean {per_step_s:.4f} s on rank 0)"
        )
    note = f"compute: unpaced; simulator calibrated from measured step times (rank 0: {per_step_s:.4f} s)"
    buckets = measured.run_info.get("backward_buckets")
    if not buckets:
        return note
    return f"{note}; {buckets_note(case.scenario(), buckets, per_step_s)}"


def buckets_note(scenario: Scenario, buckets: dict, step_s: float) -> str:
    """Where the real backward pass had DDP's buckets ready (``run.json``'s ``backward_buckets``,
    rank 0's, as fractions of its first-to-last window, and its first bucket's time before the end
    of a ``step_s`` compute) against the simulator's assumptions: ready times proportional to the
    values produced (``BucketLayout.ready_fractions``), the first at ``backward_overlap``."""
    model = layout_of(scenario.exchange, scenario.model.parameters, scenario.model.bytes_per_param)
    shown = [
        ", ".join(f"{x:.2f}" for x in xs)
        for xs in (buckets["ready_fractions"], model.ready_fractions())
    ]
    overlap = buckets["first_ready_to_end_s"] / step_s if step_s > 0 else 0.0
    return (
        f"buckets ready at {shown[0]} of the first-to-last bucket window (simulated: {shown[1]}), "
        f"the first {overlap:.2f} of a step before its compute's end (the scenario's "
        f"{scenario.schedule.backward_overlap:g}: priced at the measured); "
        f"{100 * buckets['started_in_backward']:.0f}% of calls started inside their backward pass"
    )


MAX_OVERLAP = math.nextafter(1.0, 0.0)  # schedule.backward_overlap is below 1


def measured_overlap_overrides(run_info: dict) -> list[str]:
    """An unpaced run's DDP buckets priced where its real backward pass had them ready: the overlap
    its first bucket gave, ``backward_buckets``' seconds from the first bucket's ready time to the
    end of the backward pass over rank 0's mean compute seconds a step, below 1 (the key's range);
    nothing where the run made no buckets during its backward pass."""
    buckets, step_s = run_info.get("backward_buckets"), run_info["mean_step_compute_s"]
    if not buckets or not step_s > 0:
        return []
    overlap = min(MAX_OVERLAP, buckets["first_ready_to_end_s"] / step_s)
    return [f"schedule.backward_overlap={overlap!r}"]


def complete_prediction(name: str, case: ScaledCase, overrides: list[str]) -> SimResult:
    """The calibrated simulation of the scaled case, refused in one line if it stopped short."""
    predicted = simulate(case.scenario(tuple(overrides)))
    if not predicted.summary["complete"]:
        raise UserError(
            f"{name}: the prediction of the scaled scenario stopped short "
            f"({predicted.summary['incomplete_reason']}): nothing to compare a run with"
        )
    return predicted


def validate_case(
    name: str,
    scenario: Scenario,
    options: ScaleOptions,
    calibration: Calibration,
    out_dir: Path,
    kernel: bool | None,
    shaper: Shaper = Shaper(),
) -> Comparison:
    return validate_scaled(
        name, scale(scenario, options), options.pace, calibration, out_dir, kernel, shaper=shaper
    )


def validate_scaled(
    name: str,
    case: ScaledCase,
    paced: bool,
    calibration: Calibration,
    out_dir: Path,
    kernel: bool | None,
    stem: str = VALIDATE_STEM,
    shaper: Shaper = Shaper(),
) -> Comparison:
    """Train the scaled ``case`` for real, simulate it calibrated, compare; write the outputs to ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    scaled_path = out_dir / "scaled.toml"
    write_text(scaled_path, to_toml(case.document))
    elastic = "event" in case.document
    train = train_elastic if elastic else train_scaled
    islands, wire_bits = case.document["island"], case.scenario().schedule.bits
    topk = case.scenario().schedule.compression != NONE
    costs = (
        measure_gather_costs(scaled_path, case, kernel, stem, shaper) if topk else None
    )  # the top-k exchange alone, before the run
    overrides = prediction_overrides(case, calibration, costs) + unequal_fifo_overrides(
        case.scenario(), shaper
    )
    predicted = complete_prediction(
        name, case, overrides
    )  # before the run: a prediction cut short is refused
    measured = train(
        scaled_path, make_run_plan(case.scenario()), out_dir / "run", kernel, stem, shaper
    )
    if not paced:
        overrides += measured_step_overrides(measured.summary, case.scenario())
        overrides += measured_overlap_overrides(measured.run_info)
        predicted = complete_prediction(name, case, overrides)
    notes = [
        f"WAN: {measured.wan_label}",
        compute_note(case, measured, paced),
        f"time scale k = {case.time_factor:.3g} (scaled interval / original)",
        *case.notes,
        *([] if costs is None else [costs_note(costs, stream_ratio(calibration))]),
        *(
            []
            if topk or calibration.measured_bits(wire_bits, len(islands))
            else [
                f"exchange priced at bf16's rate: the calibration did not measure {wire_bits}-bit exchanges "
                f"among {len(islands)} islands (give --calibration a new file)"
            ]
        ),
    ]
    comparison = compare(
        name,
        predicted.summary,
        predicted.trace,
        measured.summary,
        measured.trace,
        interface_bytes_per_worker(measured),
        notes,
    )
    if measured.store_bytes is not None:
        comparison.figures += store_figures(case.scenario(), measured.store_bytes)
    if elastic:
        comparison.figures += churn_figures(
            predicted.summary, predicted.trace, measured.summary, case.document
        )
    write_table(predicted.trace, out_dir / "predicted_trace.csv")
    write_overlay(out_dir / "overlay.png", comparison, predicted.trace, measured.trace)
    document = {
        "case": name,
        "scenario": case.original.source,
        "scaled_scenario": case.document,
        "compute": "paced" if paced else "measured",
        "calibration": dataclasses.asdict(calibration),
        "simulator_overrides": overrides,
        "gather_costs": None if costs is None else dataclasses.asdict(costs),
        "time_factor": case.time_factor,
        "ratio_change": case.ratio_change,
        "figures": [dataclasses.asdict(f) for f in comparison.figures],
        "syncs": comparison.syncs,
        "notes": comparison.notes,
        "interface_bytes": measured.interface_bytes,
        "predicted": predicted.summary,
        "measured": measured.summary,
    }
    write_text(out_dir / "validation.json", json_text(document, indent=2, default=str) + "\n")
    return comparison


def prediction_overrides(
    case: ScaledCase, calibration: Calibration, costs: GatherCosts | None
) -> list[str]:
    """The simulator's calibration of the scaled case: its top-k exchange's probe (``costs``) and the
    links' ratio, else the dense exchange's calibration (which refuses an M it did not measure)."""
    if costs is not None:
        return gather_overrides(case.document, costs, stream_ratio(calibration))
    islands, bits = case.document["island"], case.scenario().schedule.bits
    return simulator_overrides(calibration, islands, bits, case_calls(case.scenario()))


def unequal_fifo_overrides(scaled: Scenario, shaper: Shaper) -> list[str]:
    """Under one FIFO per egress, the scaled case's exchange charged for what unequal links do
    behind FIFOs (``scenarios/fifo.py``, "Unequal links"), which the calibration, made on equal
    links, cannot hold: the FIFO priced at no cost of its own on equal links (``fifo_k_s`` and
    ``fifo_k_so`` 0: the calibrated rates hold that), so that only the unequal links' share is
    added. Nothing where the FIFO prices no exchange of the case (``fifo_unpriced``)."""
    if (
        shaper.kind != FIFO
        or fifo_unpriced(scaled) is not None
        or scaled.network.ring_efficiency < 1  # refused beside a FIFO: it holds the queue's cost
    ):
        return []
    return [
        'network.egress_queue="fifo"',
        f"network.fifo_queue_ms={shaper.queue_ms!r}",
        "network.fifo_k_s=0",
        "network.fifo_k_so=0",
        'network.reduce_scatter="all_to_all"',  # the trainer's first pass
        f'network.tcp_congestion_control="{CUBIC}"',  # its only use, picking k_s and k_so: given
    ]


def case_calls(scaled: Scenario) -> int:
    """The scaled case's collective calls per whole-model exchange (``scaling.scaled_calls``: the
    original's, per tensor or in buckets); 1 flat."""
    return calls_of(scaled, scaled.payload_bytes)


def stream_ratio(calibration: Calibration) -> float:
    """What one TCP stream carries of a configured rate: the best of the calibration's probes (a busy
    machine only slows a transfer: 78-95% in one calibration on two loaded cores, 95.0-95.9% on idle
    ones, the frames' 1448 payload bytes of 1514); 1 in-process."""
    return max(calibration.link_ratios, default=1.0)


def costs_note(costs: GatherCosts, link_ratio: float) -> str:
    return (
        f"top-k exchange probed alone ({costs.values} values, unshaped links, no latency): "
        f"{costs.screen_s * MS_PER_S:.0f} ms before its transfer, {costs.fixed_s * MS_PER_S:.0f} ms "
        f"of its own per round; every rate at {100 * link_ratio:.1f}% of the configured"
        + (
            "; the object store a host behind its own shaped link (HTTP)"
            if costs.hosted_store
            else ""
        )
    )


def store_figures(scenario: Scenario, store_bytes: dict[str, int]) -> list[Figure]:
    """The store host's bytes against the closed form: every worker PUTs each payload once (M in per
    round), and GETs the K of the round (M x K out); its interface counts the frames' headers too."""
    payloads = schedule_of(scenario).priced_fragments(scenario)[1]
    per_round = sum(payloads) * scenario.schedule.outer_steps
    m = scenario.worker_count
    rows = (
        ("store ingress (interface)", m * per_round, store_bytes["rx_bytes"]),
        ("store egress (interface)", m * peers_of(scenario) * per_round, store_bytes["tx_bytes"]),
    )
    return [
        Figure(name, "bytes", predicted, measured, relative_error(predicted, measured))
        for name, predicted, measured in rows
    ]
