"""What every plot shares: figure size in pixels, output (PNG, SVG or PDF by the extension), colours
and readable labels.

Figures are built on ``matplotlib.figure.Figure`` with the Agg canvas, never through pyplot, so no
GUI backend is touched and no global figure state leaks between plots.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from islands.errors import UserError
from islands.io import PLOT_FORMATS, output_format, write_bytes
from islands.schedules import DDP, SCHEDULES, Decoupled, DiLoCo, Eager, Streaming

DPI = 100
DEFAULT_SIZE_PX = (1200, 800)
MIN_SIZE_PX = 300
MAX_SIZE_PX = 8000

KIND_COLOURS = {
    "compute": "#4c9a2a",
    "comm": "#2b6cb0",
    "stall": "#d64545",
    "idle": "#f0a030",
    "wasted": "#8c8c8c",
}
KIND_LABELS = {
    "compute": "compute",
    "comm": "transfer in flight",
    "stall": "stall (waiting for a transfer)",
    "idle": "idle (waiting for other workers)",
    "wasted": "transfer thrown away",
}
TRANSFER_KINDS = ("comm", "wasted")  # drawn in a band of their own, over the worker's activity
SCHEDULE_COLOURS = {
    DDP.name: "#7a4fa0",
    DiLoCo.name: "#2b6cb0",
    Streaming.name: "#1b9e77",
    Eager.name: "#d95f02",
    Decoupled.name: "#b83280",
}
MORE_SCHEDULE_COLOURS = (
    "#c05621",
    "#b83280",
    "#2c7a7b",
    "#744210",
    "#4a5568",
)  # registered later, in order


def schedule_label(name: str) -> str:
    """How plots and tables name a schedule: its declared label (the name for anything else)."""
    declared = SCHEDULES.get(name)
    return declared.label if declared else name


def schedule_colour(name: str) -> str:
    """A schedule's colour: its own, or the next of ``MORE_SCHEDULE_COLOURS`` by registry order."""
    if name in SCHEDULE_COLOURS:
        return SCHEDULE_COLOURS[name]
    others = [n for n in SCHEDULES if n not in SCHEDULE_COLOURS]
    index = others.index(name) if name in others else len(others)
    return MORE_SCHEDULE_COLOURS[index % len(MORE_SCHEDULE_COLOURS)]


PARAMETER_LABELS = {
    "schedule.inner_steps": "inner steps H",
    "schedule.fragments": "fragments P",
    "schedule.overlap_steps": "overlap tau (inner steps)",
    "schedule.bits": "wire precision (bits)",
    "schedule.outer_steps": "outer steps",
    "schedule.algorithm": "schedule",
    "island.*.bandwidth_gbps": "bandwidth per island (Gbit/s)",
    "island.*.latency_ms": "latency per island (ms)",
    "island.*.step_time_s": "step time per island (s)",
    "model.parameters": "parameters",
}


def parameter_label(key: str) -> str:
    """An axis label for a grid key; per-island keys name their island."""
    if key in PARAMETER_LABELS:
        return PARAMETER_LABELS[key]
    island = re.fullmatch(r"island\.([^.]+)\.(\w+)", key)
    if island and f"island.*.{island.group(2)}" in PARAMETER_LABELS:
        return PARAMETER_LABELS[f"island.*.{island.group(2)}"].replace(
            "per island", f"of island {island.group(1)}"
        )
    return key


def parse_size(text: str) -> tuple[int, int]:
    """``1200x800`` -> (1200, 800) pixels."""
    match = re.fullmatch(r"(\d+)x(\d+)", text.strip())
    if not match:
        raise UserError(f"--size {text}: write WIDTHxHEIGHT in pixels, e.g. 1200x800")
    width, height = int(match.group(1)), int(match.group(2))
    if not (MIN_SIZE_PX <= width <= MAX_SIZE_PX and MIN_SIZE_PX <= height <= MAX_SIZE_PX):
        raise UserError(f"--size {text}: each side must be {MIN_SIZE_PX} to {MAX_SIZE_PX} pixels")
    return width, height


def new_figure(size_px: tuple[int, int] = DEFAULT_SIZE_PX) -> Figure:
    figure = Figure(figsize=(size_px[0] / DPI, size_px[1] / DPI), dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def figure_bytes(figure: Figure, file_format: str = "png") -> bytes:
    """The figure as PNG, SVG or PDF, exactly its size in pixels (at ``DPI``)."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format=file_format, dpi=DPI)
    return buffer.getvalue()


def png_bytes(figure: Figure) -> bytes:
    return figure_bytes(figure, "png")


def save_figure(figure: Figure, path: str | Path) -> Path:
    """Write the figure in the format its extension names; ``-`` writes PNG to stdout."""
    write_bytes(path, figure_bytes(figure, output_format(path, PLOT_FORMATS)))
    return Path(path)


save_png = save_figure  # the name validation/plot.py imports
