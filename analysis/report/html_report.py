"""One self-contained HTML page about a scenario, for sharing: the summary under each schedule, a
what-if panel of sliders over a simulated grid (``whatif_page``: inline data and script), the plots
(PNG embedded as data URIs) and the plan. It fetches nothing: no external file, script, style or font."""

from __future__ import annotations

import base64
import html
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from islands import __version__
from islands.io import output_format, write_text
from islands.scenarios import Scenario, ScenarioSource, as_source
from islands.schedules import DiLoCo, switch_to
from islands.simulator import SimResult, simulate
from islands.tables import COLUMNS

from ..display_units import count_text, rate_text
from ..parallel import Progress
from ..planner.plan import DEFAULT_TARGETS, make_utilisation_plan
from ..planner.plan_tables import Table, headline, plan_tables
from ..plots.bandwidth import bandwidth_figure
from ..plots.breakdown import breakdown_figure
from ..plots.heatmap import heatmap_figure
from ..plots.loss_time import loss_time_figure
from ..plots.style import png_bytes, schedule_label
from ..plots.worker_timeline import timeline_figure
from ..side_by_side import left_out_notes, simulate_schedules, work_line
from ..sweep.runner import run_sweep
from .marked_axes import MarkedAxis, report_axes
from .whatif import run_whatif
from .whatif_page import STYLE as WHATIF_STYLE
from .whatif_page import whatif_section

TIMELINE_INTERVALS = (0, 2)
HEATMAP_H_FACTORS = (0.1, 0.25, 0.5, 1, 2)
HEATMAP_BANDWIDTH_FACTORS = (0.1, 0.3, 1, 3, 10)

STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1250px; margin: 2em auto; color: #222; line-height: 1.45; }
table { border-collapse: collapse; margin: 0.6em 0 0.4em; }
th, td { padding: 0.25em 0.8em; border-bottom: 1px solid #ddd; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #f3f3f3; }
img { max-width: 100%; border: 1px solid #eee; }
.note { color: #555; font-size: 0.92em; margin: 0.2em 0; }
"""


def html_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{html.escape(cell)}</th>" for cell in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def section(title: str, *parts: str) -> str:
    return f"<section><h2>{html.escape(title)}</h2>{''.join(parts)}</section>"


def note(text: str) -> str:
    return f"<p class='note'>{html.escape(text)}</p>"


def image(figure: Figure, alt: str) -> str:
    encoded = base64.b64encode(png_bytes(figure)).decode("ascii")
    return f"<img alt='{html.escape(alt)}' src='data:image/png;base64,{encoded}'>"


def plan_section(table: Table) -> str:
    return f"<h3>{html.escape(table.title)}</h3>{html_table(table.header, table.rows)}{''.join(map(note, table.notes))}"


def summary_table(summaries: Mapping[str, Mapping[str, Any]]) -> str:
    header = ["schedule", "inner steps", *(name for name, _ in COLUMNS)]
    rows = [
        [schedule_label(name), f"{int(s['inner_steps']):,}", *(cell(s) for _, cell in COLUMNS)]
        for name, s in summaries.items()
    ]
    return html_table(header, rows)


def scenario_table(source: ScenarioSource) -> str:
    islands = source.scenario.islands
    header = ["island", "replicas", "step time", "links", "latency"]
    rows = [
        [
            i.name,
            str(i.replicas),
            f"{i.step_time_s:.3g} s",
            links_text(i.upload_gbps, i.download_gbps),
            f"{i.latency_ms:g} ms",
        ]
        for i in islands
    ]
    return html_table(header, rows)


def links_text(upload_gbps: float, download_gbps: float) -> str:
    """One rate where both ways are equal, else "up 50 Mbit/s, down 500 Mbit/s"."""
    if upload_gbps == download_gbps:
        return rate_text(upload_gbps)
    return f"up {rate_text(upload_gbps)}, down {rate_text(download_gbps)}"


def heatmap_grid(source: ScenarioSource) -> dict[str, list[float]]:
    """H from a tenth to twice the scenario's, bandwidth from a tenth to ten times its fastest island."""
    scenario = source.scenario
    h = scenario.schedule.inner_steps
    bandwidth = max(island.bandwidth_gbps for island in scenario.islands)
    return {
        "schedule.inner_steps": sorted({max(1, round(h * f)) for f in HEATMAP_H_FACTORS}),
        "island.*.bandwidth_gbps": [
            float(f"{bandwidth * f:.3g}") for f in HEATMAP_BANDWIDTH_FACTORS
        ],
    }


def table_heatmap(sweep_table: pd.DataFrame, where: Sequence[str]) -> str:
    """The heatmap of a given sweep table (``islands sweep``), its other parameters pinned by ``where``."""
    caption = (
        "Compute utilisation over the two parameters of the given sweep table (the mean over seeds, "
        "with its sample standard deviation where the sweep ran several)."
    )
    return image(heatmap_figure(sweep_table, where=where), "heatmap of the sweep") + note(caption)


def swept_heatmap(
    source: ScenarioSource,
    jobs: int | None,
    executor: Executor | None,
    progress: Progress | None = None,
) -> str:
    """DiLoCo's utilisation over H and bandwidth (``heatmap_grid``), swept here."""
    diloco = source.with_symmetric_links().with_overrides(*switch_to(DiLoCo.name))
    table = run_sweep(
        diloco,
        heatmap_grid(source),
        jobs=jobs,
        executor=executor,
        progress=progress,
        max_events=source.max_events,
    )
    caption = (
        "DiLoCo compute utilisation by H and bandwidth per island (every island's link at that rate): "
        "move right for a longer sync interval, up for a faster link."
    )
    return image(heatmap_figure(table), "heatmap of utilisation by H and bandwidth") + note(caption)


def tokens_text(scenario: Scenario) -> str:
    """What the loss plot takes each run to consume."""
    if scenario.model.tokens_per_step:
        return "the scenario's tokens (model.tokens_per_step x inner steps x workers)"
    return "20 N tokens (Chinchilla-optimal: the scenario gives no model.tokens_per_step)"


def build_report(
    scenario: str | Path | ScenarioSource,
    overrides: Sequence[str] = (),
    target: float = 0.95,
    targets: Sequence[float] = DEFAULT_TARGETS,
    sweep_table: pd.DataFrame | None = None,
    fragments: bool = True,
    seeds: int = 1,
    jobs: int | None = None,
    executor: Executor | None = None,
    progress: Callable[[str], Progress | None] | None = None,
    where: Sequence[str] = (),
    results: Mapping[str, SimResult] | None = None,
    marked: Sequence[MarkedAxis] = (),
) -> str:
    """The report as an HTML string. ``sweep_table`` (from ``islands sweep``) replaces the default
    heatmap sweep, ``where`` pins its other parameters (``KEY=VALUE``); ``fragments`` and ``seeds``
    are the plan's (see ``make_utilisation_plan``); every run is held to the source's ``max_events``;
    ``results``: the schedules already simulated at equal work (``simulate_schedules``), if at hand;
    ``marked``: the what-if axes the user marks (``--axis``, ``marked_axes``), checked by the caller;
    ``progress(stage)``: the progress callback of each long stage (``progress.Stages``)."""
    stage = progress or (lambda name: None)
    source = as_source(scenario, overrides)
    base = source.scenario
    # a given sweep table is drawn first, so that a --where or an axis it lacks is refused before any work
    given = table_heatmap(sweep_table, where) if sweep_table is not None else None
    results = results or simulate_schedules(source)
    summaries = {name: result.summary for name, result in results.items()}
    plan = make_utilisation_plan(
        source,
        target,
        targets,
        fragments=fragments,
        seeds=seeds,
        jobs=jobs,
        executor=executor,
        progress=stage("plan searches"),
        max_events=source.max_events,
    )
    whatif = run_whatif(
        source,
        report_axes(base, marked),
        executor=executor,
        jobs=jobs,
        progress=stage("what-if grid"),
    )
    heatmap = given or swept_heatmap(source, jobs, executor, stage("heatmap sweep"))
    timeline_run = simulate(base, source.max_events)
    parts = [
        f"<h1>{html.escape(base.name)}</h1>",
        note(base.description) if base.description else "",
        section(
            "Scenario",
            scenario_table(source),
            note(
                f"{base.worker_count} workers; {count_text(base.model.parameters)} parameters, "
                f"{base.schedule.bits}-bit on the wire; H={base.schedule.inner_steps}, "
                f"P={base.schedule.fragments}, tau={base.schedule.overlap_steps}, "
                f"{base.schedule.outer_steps} outer steps (DDP: steps)."
            ),
        ),
        section(
            "Summary under each schedule",
            note(work_line(summaries, base.model.tokens_per_step)),
            summary_table(summaries),
            *(note(line) for line in left_out_notes(source)),
            note(headline(plan)),
        ),
        section("What if", whatif_section(whatif)),
        section(
            "Bandwidth over time",
            image(bandwidth_figure(results, base), "bandwidth over time"),
            note(
                "One worker's uplink under each schedule: DDP sends every step, DiLoCo one burst per "
                "outer interval, Streaming DiLoCo one fragment at a time while compute goes on."
            ),
        ),
        section(
            "Timeline",
            image(timeline_figure(timeline_run.trace, base, TIMELINE_INTERVALS), "timeline"),
            note(
                "One row per worker: compute (green), transfers in flight (blue band), stalls waiting for a "
                "transfer (red), idle time waiting for other workers (orange)."
            ),
        ),
        section(
            "Where the time goes", image(breakdown_figure(summaries, base.name), "time breakdown")
        ),
        section(
            "Predicted loss against wall-clock time",
            image(loss_time_figure(summaries, base), "predicted loss against wall-clock time"),
            note(
                f"Each run above consumes {tokens_text(base)} evenly over its wall time (log axis), its loss "
                "at equal tokens from the published tables (islands quality shows each factor and what is not "
                "priced); dashed: the same pace on to DDP's final loss. `islands plan --objective "
                "time-to-loss` searches H and wire precision for the soonest."
            ),
        ),
        section("Utilisation by H and bandwidth", heatmap),
        section(
            "Plan",
            note(f"Found by searching the simulator: {plan.runs} runs."),
            *(plan_section(table) for table in plan_tables(plan)),
        ),
        note(
            f"Written by islands {__version__} from {source.source}"
            + (
                f" with {' '.join('--set ' + o for o in source.overrides)}"
                if source.overrides
                else ""
            )
            + "."
        ),
    ]
    title = html.escape(f"islands report: {base.name}")
    return (
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{title}</title>"
        f"<style>{STYLE}{WHATIF_STYLE}</style></head><body>{''.join(parts)}</body></html>"
    )


REPORT_FORMATS = ("html", "htm")


def write_report(path: str | Path, text: str) -> Path:
    """Write the page to ``path`` (.html or .htm; ``-``: stdout)."""
    output_format(path, REPORT_FORMATS)
    write_text(path, text)
    return Path(path)
