"""The bundled validation matrix: cases as plain data, one table of errors, the medians.

Each case is a bundled scenario with ``--set`` overrides and a worker cap; ``validate_case`` scales
it, runs it for real and simulates it. Bandwidths are the original scenario's (the scaling keeps
transfer / compute per interval), so "several bandwidths" means several transfer/compute ratios.
"""

from __future__ import annotations

import functools
import statistics
from dataclasses import dataclass
from pathlib import Path

from islands.emulation import Shaper
from islands.errors import UserError
from islands.io import json_text, write_text
from islands.scenarios import Scenario, ScenarioSource
from islands.tables import render

from .calibration import Calibration
from .case import validate_case
from .compare import Comparison, error_text, value_text
from .scaling import ScaleOptions

TARGET_MEDIAN = 0.03
TARGET_WORST = 0.10
GATHER_TARGET_WALL = 0.03  # issue 47: the gather and store cases' wall time, each
GATHER_TARGET_SYNC = 0.08  # and every one of their syncs
ERROR_COLUMNS = ("wall time", "compute utilisation")


@dataclass(frozen=True)
class SuiteCase:
    name: str
    scenario: str
    overrides: tuple[str, ...]
    workers: int
    what: str


WE = "worked-example"
CASES: tuple[SuiteCase, ...] = (
    SuiteCase(
        "ddp-bf16-m2",
        WE,
        ("schedule.algorithm=ddp", "island.*.bandwidth_gbps=200"),
        2,
        "DDP, bf16, transfer/compute 0.53",
    ),
    SuiteCase(
        "ddp-fp32-m3",
        WE,
        ("schedule.algorithm=ddp", "schedule.bits=32", "island.*.bandwidth_gbps=200"),
        3,
        "DDP, fp32 on the wire, three islands",
    ),
    SuiteCase("diloco-bf16-m4", WE, (), 4, "DiLoCo, the worked example (1 Gbit/s)"),
    SuiteCase(
        "diloco-int8-m2-h50",
        WE,
        ("schedule.bits=8", "schedule.inner_steps=50", "island.*.bandwidth_gbps=5"),
        2,
        "DiLoCo, int8, H=50, 5 Gbit/s",
    ),
    SuiteCase(
        "diloco-bf16-m3-slow",
        WE,
        ("island.*.bandwidth_gbps=0.5",),
        3,
        "DiLoCo, 0.5 Gbit/s: long stalls",
    ),
    SuiteCase(
        "streaming-bf16-p2-m3",
        WE,
        ("schedule.algorithm=streaming", "schedule.fragments=2"),
        3,
        "Streaming, P=2, bf16",
    ),
    SuiteCase(
        "streaming-int8-p4-m4",
        WE,
        ("schedule.algorithm=streaming", "schedule.fragments=4", "schedule.bits=8"),
        4,
        "Streaming, P=4, int8",
    ),
    SuiteCase(
        "streaming-starved-p5-m2",
        WE,
        (
            "schedule.algorithm=streaming",
            "schedule.fragments=5",
            "schedule.overlap_steps=60",
            "island.*.bandwidth_gbps=0.25",
        ),
        2,
        "Streaming, P=5, under-provisioned: a fragment takes 2.5x its overlap window",
    ),
    SuiteCase(
        "eager-int8-p4-m4",
        WE,
        ("schedule.algorithm=eager", "schedule.fragments=4", "schedule.bits=8"),
        4,
        "Eager updates, P=4, int8: every exchange overlaps a whole outer period",
    ),
    SuiteCase(
        "eager-starved-p2-m2",
        WE,
        ("schedule.algorithm=eager", "schedule.fragments=2", "island.*.bandwidth_gbps=0.15"),
        2,
        "Eager updates, P=2, 0.15 Gbit/s: a round takes 1.4x the period, exchanges queue",
    ),
    SuiteCase(
        "decoupled-int8-p2-m2",
        WE,
        (
            "schedule.algorithm=decoupled",
            "schedule.fragments=2",
            "schedule.overlap_steps=2",
            "schedule.bits=8",
        ),
        2,
        "Decoupled DiLoCo, P=2, int8: a learner's round trip to the syncer outlasts its overlap",
    ),
    SuiteCase(
        "decoupled-straggler-m3",
        "mixed-fleet",
        (
            "schedule.algorithm=decoupled",
            "schedule.fragments=2",
            "schedule.overlap_steps=2",
            "island.*.bandwidth_gbps=0.5",
        ),
        3,
        "Decoupled DiLoCo, one learner 2.7x slower: the fast ones never wait for it",
    ),
    SuiteCase(
        "straggler-diloco-m3",
        "mixed-fleet",
        ("island.*.bandwidth_gbps=0.5",),
        3,
        "DiLoCo, one island 2.7x slower (paced)",
    ),
    SuiteCase("home-lab-streaming-m3", "home-lab", (), 3, "Streaming int8, asymmetric home links"),
    SuiteCase(
        "unequal-diloco-m3",
        "unequal-links",
        ("island.*.latency_ms=0",),
        3,
        "DiLoCo int8, links 4:2:1, no latency: the slow island's downlink queue fills",
    ),
    SuiteCase(
        "unequal-diloco-m4-latency",
        "unequal-links",
        (),
        4,
        "DiLoCo int8, links 8:4:2:1, 40-120 ms one-way latency",
    ),
)
TOPK = ("schedule.compression=topk", "schedule.topk=256", "schedule.inner_steps=20")
GATHER_CASES = (
    SuiteCase(
        "topk-ring-m3",
        WE,
        (*TOPK, "schedule.bits=8", "island.*.bandwidth_gbps=10"),
        3,
        "DiLoCo, top-k 6.25% at 8 bits, all-gathered around the ring",
    ),
    SuiteCase(
        "topk-direct-m3",
        WE,
        (*TOPK, "schedule.bits=8", 'network.gather="direct"', "island.*.bandwidth_gbps=10"),
        3,
        "DiLoCo, top-k 6.25% at 8 bits, every payload sent straight to every peer",
    ),
    SuiteCase(
        "topk-store-m3-k2",
        WE,
        (
            *TOPK,
            "schedule.bits=2",
            'network.gather="store"',
            "schedule.gather_peers=6",
            "island.*.upload_gbps=10",
            "island.*.download_gbps=40",
            "store.ingress_gbps=80",
            "store.egress_gbps=30",
            "store.latency_ms=100",
        ),
        3,
        "DiLoCo, top-k 6.25% at 2 bits through an object store host, K = 2 of 3, its egress "
        "binding, links 1:4",
    ),
)
CASES += GATHER_CASES
QUICK = ("diloco-int8-m2-h50", "streaming-starved-p5-m2")


def select(quick: bool, names: tuple[str, ...] = ()) -> tuple[SuiteCase, ...]:
    """The cases named (in the suite's order), else the quick ones, else every one; an unknown name
    is refused in one line."""
    unknown = [name for name in names if name not in {case.name for case in CASES}]
    if unknown:
        raise UserError(
            f"--case {unknown[0]}: no such case (the suite's: {', '.join(c.name for c in CASES)})"
        )
    if names:
        return tuple(c for c in CASES if c.name in names)
    return tuple(c for c in CASES if c.name in QUICK) if quick else CASES


@functools.cache
def case_scenario(case: SuiteCase) -> Scenario:
    """The case's scenario: its bundled file with its overrides, read once (``islands validate
    --suite`` asks for it first for the wire formats to calibrate, then to run the case)."""
    return ScenarioSource.read(case.scenario, case.overrides).scenario


def case_options(options: ScaleOptions, case: SuiteCase) -> ScaleOptions:
    """The invocation's scaling options with the case's own number of workers."""
    return ScaleOptions(**{**options.__dict__, "max_workers": case.workers})


def run_suite(
    cases: tuple[SuiteCase, ...],
    options: ScaleOptions,
    calibration: Calibration,
    out_dir: Path,
    kernel: bool | None,
    progress=print,
    shaper: Shaper = Shaper(),
) -> list[tuple[SuiteCase, Comparison]]:
    results = []
    for number, case in enumerate(cases, 1):
        progress(f"[{number}/{len(cases)}] {case.name}: {case.what}")
        scenario = case_scenario(case)
        comparison = validate_case(
            case.name,
            scenario,
            case_options(options, case),
            calibration,
            out_dir / case.name,
            kernel,
            shaper,
        )
        results.append((case, comparison))
    return results


def error_summary(results: list[tuple[SuiteCase, Comparison]]) -> dict[str, dict[str, float]]:
    """Median and worst absolute relative error per column."""
    summary = {}
    for column in ERROR_COLUMNS:
        errors = [abs(error) for _, c in results if (error := c.error(column)) is not None]
        summary[column] = {"median": statistics.median(errors), "worst": max(errors)}
    return summary


def suite_table(results: list[tuple[SuiteCase, Comparison]]) -> str:
    rows = []
    for case, comparison in results:
        wall, util = (next(f for f in comparison.figures if f.name == n) for n in ERROR_COLUMNS)
        rows.append(
            [
                case.name,
                f"{wall.predicted:.2f} s",
                f"{wall.measured:.2f} s",
                error_text(wall.error),
                value_text(util.predicted, util.unit),
                value_text(util.measured, util.unit),
                error_text(util.error),
                error_text(comparison.error("mean sync")),
                error_text(worst_sync_error(comparison)),
            ]
        )
    summary = error_summary(results)
    for statistic in ("median", "worst"):
        rows.append(
            [
                f"{statistic} |error|",
                "",
                "",
                f"{100 * summary['wall time'][statistic]:.1f}%",
                "",
                "",
                f"{100 * summary['compute utilisation'][statistic]:.1f}%",
                "",
                "",
            ]
        )
    header = [
        "case",
        "wall pred",
        "wall meas",
        "error",
        "util pred",
        "util meas",
        "error",
        "mean sync err",
        "worst sync err",
    ]
    return render(rows, header)


def worst_sync_error(comparison: Comparison) -> float | None:
    """The sync of the largest |error|, signed; None where no sync has one."""
    errors = [s["error"] for s in comparison.syncs if s["error"] is not None]
    return max(errors, key=abs) if errors else None


def verdict(results: list[tuple[SuiteCase, Comparison]]) -> str:
    summary = error_summary(results)
    met = all(s["median"] <= TARGET_MEDIAN and s["worst"] <= TARGET_WORST for s in summary.values())
    return (
        f"target (median <= {100 * TARGET_MEDIAN:.0f}%, worst <= {100 * TARGET_WORST:.0f}% on wall time and "
        f"utilisation): {'met' if met else 'NOT met'}"
    )


def gather_verdict(results: list[tuple[SuiteCase, Comparison]]) -> str | None:
    """Whether every gather and store case's wall time and every one of its syncs is within its
    target (issue 47); None where none of them ran."""
    gathered = [(case, c) for case, c in results if case in GATHER_CASES]
    if not gathered:
        return None
    met = all(
        abs(c.error("wall time") or 0.0) <= GATHER_TARGET_WALL
        and abs(worst_sync_error(c) or 0.0) <= GATHER_TARGET_SYNC
        for _, c in gathered
    )
    return (
        f"top-k target (each case's wall time within {100 * GATHER_TARGET_WALL:.0f}%, every sync "
        f"within {100 * GATHER_TARGET_SYNC:.0f}%): {'met' if met else 'NOT met'}"
    )


def write_suite_json(
    path: Path, results: list[tuple[SuiteCase, Comparison]], calibration: Calibration
) -> None:
    document = {
        "calibration": calibration.__dict__,
        "errors": error_summary(results),
        "cases": [
            {
                "case": case.name,
                "scenario": case.scenario,
                "overrides": list(case.overrides),
                "workers": case.workers,
                "what": case.what,
                "figures": [f.__dict__ for f in comparison.figures],
                "notes": comparison.notes,
            }
            for case, comparison in results
        ],
    }
    write_text(path, json_text(document, indent=2, default=str) + "\n")
