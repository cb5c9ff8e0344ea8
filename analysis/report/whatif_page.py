"""The report's what-if panel: one range slider per axis of the grid (``whatif``), the figures of
the combination the sliders pick and worker 0's uplink over its first intervals, redrawn by a small
inline script from the grid embedded as JSON. No server and no library: the plot is SVG the script
writes, so the page stays small and works from a mail attachment, offline."""

from __future__ import annotations

import html
import json
from typing import Any

from .whatif import FIGURES, PLOT_INTERVALS, WhatIfAxis, WhatIfGrid, grid_runs

FIGURE_LABELS = {
    "compute_utilisation": "compute utilisation",
    "stall_s": "stall per worker",
    "bytes_per_worker": "sent per worker",
    "wall_time_s": "wall time",
    "avg_bandwidth_gbps": "average bandwidth",
}
FIGURE_UNITS = {
    "compute_utilisation": "fraction",
    "stall_s": "s",
    "bytes_per_worker": "B",
    "wall_time_s": "s",
    "avg_bandwidth_gbps": "Gbit/s",
}

STYLE = """
.whatif { display: grid; grid-template-columns: minmax(260px, 1fr) 2fr; gap: 1.5em; align-items: start; }
.whatif label { display: block; margin-top: 0.6em; font-size: 0.92em; }
.whatif input[type=range] { width: 100%; }
.whatif output { font-weight: 600; }
.whatif dl { display: grid; grid-template-columns: auto auto; gap: 0.2em 1em; margin: 0.4em 0; }
.whatif dd { margin: 0; font-weight: 600; text-align: right; }
.whatif .error { color: #a00; }
.whatif code { font-size: 0.85em; word-break: break-all; }
#whatif-plot { width: 100%; height: auto; border: 1px solid #eee; }
@media print { .whatif { display: none; } }
"""

SCRIPT = r"""
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("whatif-data").textContent);
  var sliders = data.axes.map(function (axis) { return document.getElementById("whatif-" + axis.key); });
  var SVG = "http://www.w3.org/2000/svg";
  var W = 640, H = 240, LEFT = 70, RIGHT = 15, TOP = 15, BOTTOM = 40;
  function scaled(x, units) {  // in the largest unit it reaches; 2 decimals, none from 100 on
    var unit = units[0];
    units.forEach(function (u) { if (Math.abs(x) >= u[1]) unit = u; });
    var v = x / unit[1];
    return v.toFixed(Math.abs(v) >= 100 ? 0 : 2) + " " + unit[0];
  }
  var FORMATS = {
    "fraction": function (x) { return (100 * x).toFixed(1) + "%"; },
    "s": function (x) { return scaled(x, [["s", 1], ["min", 60], ["h", 3600], ["days", 86400]]); },
    "B": function (x) { return scaled(x, [["B", 1], ["kB", 1e3], ["MB", 1e6], ["GB", 1e9], ["TB", 1e12]]); },
    "Gbit/s": function (x) {
      return scaled(x * 1e9, [["bit/s", 1], ["kbit/s", 1e3], ["Mbit/s", 1e6], ["Gbit/s", 1e9], ["Tbit/s", 1e12]]);
    }
  };
  function point(stops) {  // the first axis varies slowest
    var flat = 0;
    stops.forEach(function (stop, i) { flat = flat * data.axes[i].texts.length + stop; });
    return data.points[flat];
  }
  function node(name, attributes, text) {
    var element = document.createElementNS(SVG, name);
    Object.keys(attributes).forEach(function (key) { element.setAttribute(key, attributes[key]); });
    if (text !== undefined) element.textContent = text;
    return element;
  }
  function label(x, y, anchor, text) {
    return node("text", {x: x, y: y, "text-anchor": anchor, "font-size": 11}, text);
  }
  function plot(p) {
    var svg = document.getElementById("whatif-plot");
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    svg.setAttribute("data-points", p.error ? 0 : p.times_s.length);
    svg.setAttribute("data-peak-gbps", "");
    if (p.error) { svg.appendChild(label(W / 2, H / 2, "middle", "not a valid scenario")); return; }
    var peak = Math.max.apply(null, p.rates_gbps.concat([0]));
    svg.setAttribute("data-peak-gbps", String(peak));
    var span = p.window_s > 0 ? p.window_s : 1, ceiling = peak > 0 ? peak * 1.15 : 1;
    function x(t) { return (LEFT + (W - LEFT - RIGHT) * t / span).toFixed(1); }
    function y(r) { return (H - BOTTOM - (H - TOP - BOTTOM) * r / ceiling).toFixed(1); }
    var d = "M" + x(0) + " " + y(0);
    p.times_s.forEach(function (t, i) { d += " H" + x(t) + " V" + y(p.rates_gbps[i]); });
    d += " H" + x(span);
    svg.appendChild(node("path", {d: d + " V" + y(0) + " Z", fill: "#1f77b4", "fill-opacity": "0.3"}));
    svg.appendChild(node("path", {d: d, fill: "none", stroke: "#1f77b4", "stroke-width": "1.2"}));
    svg.appendChild(node("path", {d: "M" + LEFT + " " + TOP + " V" + y(0) + " H" + (W - RIGHT), fill: "none",
                                  stroke: "#444"}));
    svg.appendChild(label(LEFT - 6, Number(y(peak)) + 4, "end", FORMATS["Gbit/s"](peak)));
    svg.appendChild(label(LEFT - 6, Number(y(0)) + 4, "end", "0"));
    svg.appendChild(label(LEFT, H - BOTTOM + 16, "middle", "0"));
    svg.appendChild(label(W - RIGHT, H - BOTTOM + 16, "end", FORMATS["s"](span)));
    svg.appendChild(label((W + LEFT) / 2, H - 6, "middle", "time since start; worker 0's uplink rate"));
  }
  function update() {
    var stops = sliders.map(function (slider) { return Number(slider.value); });
    var overrides = [];
    stops.forEach(function (stop, i) {
      var axis = data.axes[i];
      document.getElementById("whatif-" + axis.key + "-value").textContent = axis.texts[stop];
      overrides = overrides.concat(axis.overrides[stop]);
    });
    var p = point(stops);
    data.figures.forEach(function (figure) {
      var element = document.querySelector("[data-figure='" + figure.key + "']");
      var value = p.error ? null : p[figure.key];
      element.textContent = value === null ? "n/a" : FORMATS[figure.unit](value);
      element.setAttribute("data-value", value === null ? "" : String(value));
    });
    document.getElementById("whatif-error").textContent = p.error ? "Not a valid scenario: " + p.error : "";
    document.getElementById("whatif-overrides").textContent = overrides.length ?
      overrides.map(function (o) { return "--set " + o; }).join(" ") : "none (the scenario above)";
    plot(p);
  }
  sliders.forEach(function (slider) { slider.addEventListener("input", update); });
  update();
})();
"""


def axis_text(axis: WhatIfAxis, value: Any) -> str:
    """What a slider shows at a stop: ``x0.3`` for the bandwidth scale, ``1.56%`` for the density,
    the value for the others (a marked axis's as typed)."""
    if isinstance(value, str):
        return value
    if axis.key == "density":
        return f"{100 * value:.3g}%"
    return f"x{value:g}" if axis.key == "bandwidth_scale" else f"{value:g}"


def grid_document(grid: WhatIfGrid) -> dict[str, Any]:
    """The grid as the page's script reads it."""
    return {
        "axes": [
            {
                "key": axis.key,
                "texts": [axis_text(axis, v) for v in axis.values],
                "overrides": [list(o) for o in axis.overrides],
            }
            for axis in grid.axes
        ],
        "figures": [{"key": key, "unit": FIGURE_UNITS[key]} for key in FIGURES],
        "points": list(grid.points),
    }


def embedded_json(document: dict[str, Any]) -> str:
    """JSON safe inside a ``<script>`` element (no ``</`` to end it early)."""
    return json.dumps(document, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")


def slider(axis: WhatIfAxis) -> str:
    name = f"whatif-{axis.key}"
    return (
        f"<label for='{name}'>{html.escape(axis.label)}: <output id='{name}-value'>"
        f"{html.escape(axis_text(axis, axis.values[axis.start]))}</output></label>"
        f"<input type='range' id='{name}' name='{axis.key}' min='0' max='{len(axis.values) - 1}' step='1' "
        f"value='{axis.start}'>"
    )


def figure_rows() -> str:
    return "".join(
        f"<dt>{html.escape(FIGURE_LABELS[key])}</dt><dd data-figure='{key}'></dd>"
        for key in FIGURES
    )


def grid_summary(grid: WhatIfGrid) -> str:
    """How many runs the grid holds and, if the budget shrank it, from how many and which axes it fixed."""
    runs, valid = grid_runs(grid.axes), sum("error" not in point for point in grid.points)
    text = (
        f"{runs} combinations, {valid} valid scenarios (the others show the rule they break), "
        f"about {grid.events:.3g} simulator events by the simulator's own estimate."
    )
    if runs < grid.full_runs:
        fixed = "".join(
            f" {axis.label} fixed at {axis_text(axis, axis.values[0])}." for axis in grid.fixed
        )
        text += (
            f" The full grid of {grid.full_runs} combinations would take more than the "
            f"{grid.max_events:.3g} simulator events the page allows, so the stops farthest from the "
            f"scenario were left out.{fixed}"
        )
    return text


def whatif_section(grid: WhatIfGrid) -> str:
    """The panel's HTML, with its data and script."""
    caption = (
        f"Each combination of the sliders is one simulator run, made when this page was written: "
        f"{grid_summary(grid)} The H slider keeps the work equal, as the table above: every stop runs the "
        f"scenario's inner steps per worker, in (inner steps / H) outer steps. The plot spans the first "
        f"{PLOT_INTERVALS} outer intervals (or the whole run)."
    )
    return (
        f"<div class='whatif'><form id='whatif-form' onsubmit='return false'>"
        f"{''.join(slider(axis) for axis in grid.axes)}</form>"
        f"<div><dl>{figure_rows()}</dl><p id='whatif-error' class='error'></p>"
        f"<svg id='whatif-plot' data-figure='uplink_gbps' viewBox='0 0 640 240' role='img' "
        f"aria-label='uplink rate over time'></svg>"
        f"<p class='note'>Overrides on top of the report's scenario: <code id='whatif-overrides'></code></p>"
        f"</div></div>"
        f"<p class='note'>{html.escape(caption)}</p>"
        f"<script type='application/json' id='whatif-data'>{embedded_json(grid_document(grid))}</script>"
        f"<script>{SCRIPT}</script>"
    )
