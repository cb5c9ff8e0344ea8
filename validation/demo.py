"""The demo's real run: one validation case, with the smallest calibration that case needs.

``islands demo`` ends as ``islands validate`` does, on its own scenario: scaled down (``scaling``),
trained for real over the emulated WAN (kernel htb between namespaces as root, else in-process
shaping), simulated with a calibration, predicted beside measured (``case.validate_scaled``). Two
choices keep it short on 2 cores:

* ``DEMO_OPTIONS``: at most ``DEMO_WORKERS`` islands (one process each) and about
  ``DEMO_TARGET_WALL_S`` of training; the scaling keeps the transfer / compute ratio per interval,
  so the scenario's utilisation is kept with fewer islands;
* the calibration probes only what this run uses: its own M (validate probes 2 to M) at its slowest
  scaled link's rate (validate probes 10 and 100 Mbit/s and interpolates), so the simulator reads the
  achieved rate where it was measured.
"""

from __future__ import annotations

from islands.scenarios import Scenario

from .calibration import Calibration, measure
from .compare import Comparison
from .scaling import ScaledCase, ScaleOptions, scale

DEMO_STEM = "isdemo"  # its emulated WANs: isdemocalib, isdemorun (validate's are isv...)
DEMO_WORKERS = 2
DEMO_TARGET_WALL_S = 10.0
DEMO_OPTIONS = ScaleOptions(max_workers=DEMO_WORKERS, target_wall_s=DEMO_TARGET_WALL_S)
TARGET_ERROR = 0.05
TARGET_FIGURES = ("wall time", "compute utilisation")


def demo_case(scenario: Scenario) -> ScaledCase:
    return scale(scenario, DEMO_OPTIONS)


def islands_of(case: ScaledCase) -> int:
    return len(case.document["island"])


def calibrate_for(case: ScaledCase, kernel: bool | None) -> Calibration:
    """Probe the trainer's exchange among the case's M islands at its slowest link's rate only, in its
    wire format."""
    m = islands_of(case)
    return measure(
        m,
        kernel,
        (case.slowest_bits_per_s,),
        min_islands=m,
        stem=DEMO_STEM,
        wire_bits=(case.scenario().schedule.bits,),
    )


def verdict(comparison: Comparison) -> str:
    """Whether wall time and utilisation are within ``TARGET_ERROR`` of measured, in one line."""
    errors = [comparison.error(name) for name in TARGET_FIGURES]
    met = all(error is not None and abs(error) <= TARGET_ERROR for error in errors)
    shown = ", ".join(
        f"{name} {100 * error:+.1f}%"
        for name, error in zip(TARGET_FIGURES, errors)
        if error is not None
    )
    return f"{shown}: {'within' if met else 'NOT within'} {100 * TARGET_ERROR:.0f}% of measured"
