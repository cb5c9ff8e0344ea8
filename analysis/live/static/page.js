// The live page's script (islands serve): inlined into the page by page.py, which fills in the
// __NAMES__ below. Plain JavaScript, no library: see page.py's docstring for how it works.
(function () {
  "use strict";
  var SUPERSEDE_MS = __SUPERSEDE_MS__, PROGRESS_MS = __PROGRESS_MS__, STEPS = 1000;
  var initial = JSON.parse(document.getElementById("initial").textContent);
  var state = {scenario: initial.scenario, command: initial.command, panel: initial.panel,
               overrides: {}, target: "0.95", controls: {}};
  var flight = null, pending = false, changes = 0, changeAt = 0, ticker = null;
  var body = document.body;
  body.dataset.change = "0"; body.dataset.answered = "-1"; body.dataset.status = "idle";

  function el(name, attributes, children) {
    var element = document.createElement(name);
    Object.keys(attributes || {}).forEach(function (key) {
      if (key === "text") element.textContent = attributes[key];
      else element.setAttribute(key, attributes[key]);
    });
    (children || []).forEach(function (child) { if (child) element.appendChild(child); });
    return element;
  }
  function api(method, url, data) {
    var options = {method: method, headers: {}};
    if (data !== undefined) {
      options.headers["Content-Type"] = "application/json";
      options.body = JSON.stringify(data);
    }
    return fetch(url, options).then(function (response) { return response.json(); });
  }
  function shown(value) {
    if (value === null || value === undefined) return "";
    return typeof value === "string" ? value : String(value);
  }

  // ---- controls ----
  function sliderPosition(slider, value) {
    if (slider.log) return STEPS * Math.log(value / slider.low) / Math.log(slider.high / slider.low);
    return STEPS * (value - slider.low) / (slider.high - slider.low);
  }
  function sliderValue(c, position) {
    var s = c.slider, v = s.log ? s.low * Math.pow(s.high / s.low, position / STEPS)
                                : s.low + (s.high - s.low) * position / STEPS;
    return c.kind === "int" ? String(Math.round(v)) : String(Number(v.toPrecision(3)));
  }
  function fitSlider(c, range, text) {
    var v = Number(text);
    if (!c.slider || text === "" || !isFinite(v)) return;
    if (c.slider.log && v > 0 && (v < c.slider.low || v > c.slider.high)) {
      c.slider = {low: c.kind === "int" ? Math.max(1, Math.round(v / 10)) : v / 10, high: v * 10, log: true};
    }
    if (!c.slider.log && v > c.slider.high) c.slider = {low: c.slider.low, high: v, log: false};
    range.value = String(Math.max(0, Math.min(STEPS, Math.round(sliderPosition(c.slider, v)))));
  }
  function quoted(c, text) {  // a string key's value as TOML (a menu's names need no quotes)
    return (c.kind === "str" && !c.choices.length) ? JSON.stringify(text) : text;
  }
  function setEdit(c, text) {
    var original = shown(c.value);
    if (text === "" || text === original) delete state.overrides[c.key];
    else state.overrides[c.key] = quoted(c, text);
    state.controls[c.key].classList.toggle("edited", c.key in state.overrides);
    changed();
  }
  function controlElement(c) {
    var id = "c-" + c.key, errors = el("span", {"class": "error", "data-error-for": c.key});
    var label = el("label", {"for": id, title: c.doc, text: c.name});
    var start = shown(c.value !== null ? c.value : c.in_force), parts;
    if (c.choices.length) {
      var menu = el("select", {id: id, name: c.key});
      c.choices.forEach(function (choice) { menu.appendChild(el("option", {value: String(choice), text: String(choice)})); });
      menu.value = start;
      menu.addEventListener("change", function () { setEdit(c, menu.value); });
      parts = [label, menu, el("span")];
    } else if (c.kind === "bool") {
      var box = el("input", {type: "checkbox", id: id, name: c.key});
      box.checked = start === "true";
      box.addEventListener("change", function () { setEdit(c, box.checked ? "true" : "false"); });
      parts = [label, box, el("span")];
    } else {
      var typed = el("input", {type: "text", id: id, name: c.key, "class": "box", autocomplete: "off",
                               placeholder: c.value === null && c.in_force !== null ? shown(c.in_force) : ""});
      typed.value = c.value === null ? "" : start;
      if (c.suggestions.length) {
        var list = el("datalist", {id: id + "-list"});
        c.suggestions.forEach(function (s) { list.appendChild(el("option", {value: s})); });
        typed.setAttribute("list", id + "-list");
        document.body.appendChild(list);
      }
      var range = null;
      if (c.slider) {
        range = el("input", {type: "range", min: "0", max: String(STEPS), step: "1", "class": "slider",
                             "aria-label": c.key});
        fitSlider(c, range, start);
        range.addEventListener("input", function () {
          typed.value = sliderValue(c, Number(range.value));
          setEdit(c, typed.value);
        });
      }
      typed.addEventListener("change", function () {
        var text = typed.value.trim();
        if (range) fitSlider(c, range, text);
        setEdit(c, text);
      });
      parts = range ? [label, range, typed] : [label, el("span"), typed];
    }
    var element = el("div", {"class": "control", "data-key": c.key}, parts.concat([errors]));
    state.controls[c.key] = element;
    return element;
  }
  function controlGroup(controls) {
    var main = controls.filter(function (c) { return c.main; });
    var more = controls.filter(function (c) { return !c.main; });
    var nodes = main.map(controlElement);
    if (more.length) {
      nodes.push(el("details", {}, [el("summary", {text: "more keys (" + more.length + ")"})]
        .concat(more.map(controlElement))));
    }
    return nodes;
  }
  var ARRAY_TITLES = {island: "Islands", backbone: "Backbones", region: "Regions", latency: "Measured round trips"};
  function buildControls() {
    var box = document.getElementById("controls");
    while (box.firstChild) box.removeChild(box.firstChild);
    document.querySelectorAll("datalist").forEach(function (d) { d.remove(); });
    state.controls = {};
    var p = state.panel;
    p.sections.filter(function (s) { return s.id === "model" || s.id === "schedule"; }).forEach(function (s) {
      box.appendChild(el("section", {"data-section": s.id}, [el("h2", {text: s.title})].concat(controlGroup(s.controls))));
    });
    p.arrays.forEach(function (a) {
      var rows = a.rows.map(function (row) {
        return el("div", {"class": "array", "data-row": a.id + "." + row.index},
                  [el("h3", {text: a.id + " " + row.index + ": " + row.title})].concat(controlGroup(row.controls)));
      });
      box.appendChild(el("section", {"data-array": a.id}, [el("h2", {text: ARRAY_TITLES[a.id] || a.id})].concat(rows)));
    });
    p.sections.filter(function (s) { return s.id !== "model" && s.id !== "schedule"; }).forEach(function (s) {
      box.appendChild(el("section", {"data-section": s.id}, [el("h2", {text: s.title})].concat(controlGroup(s.controls))));
    });
    var target = {key: "target", name: "target utilisation", kind: "float", value: 0.95, in_force: 0.95,
                  doc: "the compute utilisation the plan's least bandwidth is searched for", main: true,
                  choices: [], suggestions: [], slider: {low: 0.5, high: 0.99, log: false}};
    box.appendChild(el("section", {"data-section": "plan"}, [el("h2", {text: "Plan"}), controlElement(target)]));
  }

  // ---- requests ----
  function overrideList() {
    return Object.keys(state.overrides).filter(function (k) { return k !== "target"; })
      .map(function (k) { return k + "=" + state.overrides[k]; });
  }
  function request() {
    return {scenario: state.scenario, overrides: overrideList(),
            target: Number("target" in state.overrides ? state.overrides.target : state.target)};
  }
  function shellWord(text) {  // as Python's shlex.quote
    return /^[A-Za-z0-9_@%+=:,.\/-]+$/.test(text) ? text : "'" + text.replace(/'/g, "'\"'\"'") + "'";
  }
  function showCommand() {
    var words = overrideList().map(function (o) { return "--set " + shellWord(o); });
    document.getElementById("command").textContent = [state.command].concat(words).join(" ");
  }
  function changed() {
    changes += 1;
    body.dataset.change = String(changes);
    showCommand();
    if (flight && !flight.shown && performance.now() - flight.since < SUPERSEDE_MS) {
      if (!pending) setTimeout(function () { if (pending) { pending = false; send(); } }, SUPERSEDE_MS);
      pending = true;
      return;
    }
    send();
  }
  function clearErrors() {
    document.querySelectorAll("[data-error-for]").forEach(function (e) { e.textContent = ""; });
    document.querySelectorAll(".control.refused").forEach(function (e) { e.classList.remove("refused"); });
    document.getElementById("error").textContent = "";
  }
  function showError(error, change) {
    clearErrors();
    var slot = document.querySelector("[data-error-for='" + error.key + "']");
    if (slot) { slot.textContent = error.message; slot.parentNode.classList.add("refused"); }
    else document.getElementById("error").textContent = error.message;
    document.getElementById("results").classList.add("stale");
    document.getElementById("stale-note").textContent = "The figures are of the last scenario that ran.";
    body.dataset.status = "refused";
    body.dataset.answered = String(change);
  }
  function send() {
    pending = false;
    var change = changes, mine = {since: performance.now(), id: null, change: change, job: null};
    flight = mine;
    changeAt = mine.since;
    clearInterval(ticker);
    document.getElementById("progress").classList.remove("shown");
    ticker = setInterval(function () { if (flight === mine) progress(mine); }, PROGRESS_MS);
    api("POST", "/api/run", request()).then(function (answer) {
      if (flight !== mine) return;
      if (answer.error) { flight = null; showError(answer.error, change); return; }
      mine.id = answer.job.id;
      if (mine.cancelAsked) api("POST", "/api/jobs/" + mine.id + "/cancel", {});
      body.dataset.job = String(mine.id);
      body.dataset.status = "running";
      clearErrors();
      follow(mine, answer.job);
    });
  }
  function follow(mine, job) {
    if (flight !== mine) return;
    mine.job = job;
    draw(job, mine);
    if (job.status !== "running") {
      finish(job, mine);
      return;
    }
    api("GET", "/api/jobs/" + job.id + "?version=" + job.version + "&wait_s=5").then(function (answer) {
      if (answer.job) follow(mine, answer.job);
    });
  }
  function finish(job, mine) {
    flight = null;
    clearInterval(ticker);
    document.getElementById("progress").classList.remove("shown");
    body.dataset.status = job.status;
    body.dataset.answered = String(mine.change);
    if (job.status === "done") body.dataset.completeMs = (performance.now() - changeAt).toFixed(1);
    if (job.status !== "done") {
      document.getElementById("error").textContent = job.status === "cancelled" ?
        "Cancelled: the figures are of the last scenario that ran." : job.error;
    }
    if (pending) send();
  }
  var STAGES = {run: "the scenario as edited", schedules: "each schedule at equal work",
                plan: "the least bandwidth for the target"};
  function progress(mine) {  // shown once a job has run PROGRESS_MS, redrawn every PROGRESS_MS
    var elapsed = (performance.now() - mine.since) / 1000, step = mine.job && mine.job.step;
    if (elapsed * 1000 < PROGRESS_MS) return;
    document.getElementById("progress").classList.add("shown");
    document.getElementById("progress-bar").max = step ? Math.max(1, step.total) : 1;
    document.getElementById("progress-bar").value = step ? step.done : 0;
    document.getElementById("progress-text").textContent = (step ? (STAGES[step.stage] || step.stage) + ": " +
      step.done + " of " + step.total + " done" : "starting") + ", " + elapsed.toFixed(1) + " s";
  }

  // ---- figures ----
  var drawn = {};
  function draw(job, mine) {
    progress(mine);
    if (mine.drawnFor !== job.id) {
      mine.drawnFor = job.id;
      drawn = {};
      ["run-part", "schedules-part", "loss-part", "plan-part"].forEach(function (id) {
        document.getElementById(id).classList.add("stale");
      });
    }
    Object.keys(job.parts).forEach(function (name) {
      if (drawn[name]) return;
      drawn[name] = true;
      PARTS[name](job.parts[name]);
      document.getElementById(name + "-part").classList.remove("stale");
      if (name === "run") {
        mine.shown = true;
        body.dataset.shownMs = (performance.now() - changeAt).toFixed(1);
        body.dataset.answered = String(mine.change);
      }
    });
    document.getElementById("results").classList.remove("stale");
    document.getElementById("stale-note").textContent = "";
  }
  function replace(id, nodes) {
    var box = document.getElementById(id);
    while (box.firstChild) box.removeChild(box.firstChild);
    nodes.forEach(function (node) { if (node) box.appendChild(node); });
  }
  function figureCell(tag, cell) {
    return el(tag, {"data-figure": cell.key || "", "data-value": cell.value === null ? "" : String(cell.value),
                    text: cell.text});
  }
  function notes(lines) { return lines.map(function (line) { return el("p", {"class": "note", text: line}); }); }
  var PARTS = {
    run: function (part) {
      replace("headline", [document.createTextNode(part.headline)]);
      replace("figures", part.figures.map(function (cell) {
        return el("div", {}, [el("dt", {text: cell.label}), figureCell("dd", cell)]);
      }));
      replace("run-notes", notes(part.notes));
      document.getElementById("islands-table").textContent = part.islands;
      drawTimeline(part.timeline);
    },
    schedules: function (part) {
      if (part.error) { replace("schedules-table", notes([part.error])); replace("bandwidth-plots", []); return; }
      var header = el("tr", {}, ["schedule", "inner steps"].concat(part.rows[0].figures.map(function (c) { return c.label; }))
        .map(function (text) { return el("th", {text: text}); }));
      var rows = part.rows.map(function (row) {
        return el("tr", {"data-schedule": row.schedule}, [el("td", {text: row.label}), el("td", {text: row.inner_steps})]
          .concat(row.figures.map(function (cell) { return figureCell("td", cell); })));
      });
      replace("schedules-table", [el("p", {"class": "note", text: part.work}),
                                  el("table", {}, [el("thead", {}, [header]), el("tbody", {}, rows)])].concat(notes(part.notes)));
      drawBandwidth(part.rows);
    },
    loss: function (part) {
      var rows = part.rows.map(function (row) {
        return el("tr", {"data-schedule": row.schedule}, [
          el("td", {text: row.label}),
          el("td", {"data-figure": "loss", "data-value": String(row.loss), text: row.loss_text}),
          el("td", {"data-figure": "relative_to_dp", "data-value": String(row.relative_to_dp), text: row.relative_text}),
          el("td", {text: row.tokens_text}),
          el("td", {"class": "note", style: "text-align: left; white-space: normal", text: row.notes.join("; ")})]);
      });
      replace("loss-table", [el("p", {"class": "note", text: part.title}), el("table", {}, rows)]);
    },
    plan: function (part) {
      if (part.error) { replace("plan-table", notes([part.error])); return; }
      var rows = part.rows.map(function (row) {
        return el("tr", {"data-schedule": row.schedule}, [el("td", {text: row.label}),
          el("td", {"data-figure": "least_bandwidth_gbps", "data-value": row.value === null ? "" : String(row.value), text: row.text})]);
      });
      replace("plan-table", [el("p", {id: "plan-headline", text: part.headline}), el("table", {}, rows)]
        .concat(notes(part.notes.concat(["Found by searching the simulator: " + part.runs + " runs."]))));
    }
  };

  // ---- plots (SVG) ----
  var SVG = "http://www.w3.org/2000/svg";
  function node(name, attributes, text) {
    var element = document.createElementNS(SVG, name);
    Object.keys(attributes).forEach(function (key) { element.setAttribute(key, attributes[key]); });
    if (text !== undefined) element.textContent = text;
    return element;
  }
  function label(x, y, anchor, text) { return node("text", {x: x, y: y, "text-anchor": anchor, "font-size": 11}, text); }
  function scaled(x, units) {
    var unit = units[0];
    units.forEach(function (u) { if (Math.abs(x) >= u[1]) unit = u; });
    var v = x / unit[1];
    return Number(v.toPrecision(3)) + " " + unit[0];
  }
  function seconds(x) { return scaled(x, [["s", 1], ["min", 60], ["h", 3600], ["days", 86400]]); }
  function rate(gbps) { return scaled(gbps * 1e9, [["bit/s", 1], ["kbit/s", 1e3], ["Mbit/s", 1e6], ["Gbit/s", 1e9], ["Tbit/s", 1e12]]); }
  function drawBandwidth(rows) {
    var svg = document.getElementById("bandwidth-plot"), W = 720, PANEL = 56, LEFT = 150, RIGHT = 12, GAP = 22;
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    var peak = Math.max.apply(null, rows.map(function (r) { return r.uplink.peak_gbps; }).concat([0]));
    var ceiling = peak > 0 ? peak * 1.15 : 1;
    svg.setAttribute("viewBox", "0 0 " + W + " " + (rows.length * (PANEL + GAP) + 10));
    svg.setAttribute("data-peak-gbps", String(peak));
    rows.forEach(function (row, i) {
      var u = row.uplink, top = 8 + i * (PANEL + GAP), span = u.window_s > 0 ? u.window_s : 1;
      var g = node("g", {"data-schedule": row.schedule, "data-points": u.times_s.length, "data-peak-gbps": String(u.peak_gbps)});
      function x(t) { return (LEFT + (W - LEFT - RIGHT) * t / span).toFixed(1); }
      function y(r) { return (top + PANEL - PANEL * r / ceiling).toFixed(1); }
      var d = "M" + x(0) + " " + y(0);
      u.times_s.forEach(function (t, k) { d += " H" + x(t) + " V" + y(u.rates_gbps[k]); });
      d += " H" + x(span);
      g.appendChild(node("path", {d: d + " V" + y(0) + " Z", fill: row.colour, "fill-opacity": "0.3"}));
      g.appendChild(node("path", {d: d, fill: "none", stroke: row.colour, "stroke-width": "1"}));
      g.appendChild(node("path", {d: "M" + LEFT + " " + top + " V" + y(0) + " H" + (W - RIGHT), fill: "none", stroke: "#444"}));
      g.appendChild(label(LEFT - 8, top + PANEL / 2 + 4, "end", row.label));
      g.appendChild(label(LEFT - 8, Number(y(peak)) + 4, "end", rate(peak)));
      g.appendChild(label(LEFT - 8, Number(y(0)), "end", "0"));
      g.appendChild(label(W - RIGHT, top + PANEL + 14, "end", seconds(span) + (u.cut ? " (first steps only)" : "")));
      g.appendChild(label(LEFT, top + PANEL + 14, "middle", "0 s"));
      svg.appendChild(g);
    });
  }
  function drawTimeline(t) {
    var svg = document.getElementById("timeline"), W = 720, ROW = 14, LEFT = 90, RIGHT = 12, TOP = 6;
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    if (!t) { svg.setAttribute("viewBox", "0 0 720 30"); svg.appendChild(label(360, 18, "middle", "no trace in the first intervals")); return; }
    var height = TOP + t.workers.length * ROW + 44, span = Math.max(t.end_s - t.begin_s, 1e-9);
    svg.setAttribute("viewBox", "0 0 " + W + " " + height);
    svg.setAttribute("data-spans", String(t.spans.length));
    function x(s) { return LEFT + (W - LEFT - RIGHT) * (s - t.begin_s) / span; }
    var colours = {}, band = {};
    t.kinds.forEach(function (k) { colours[k.kind] = k.colour; band[k.kind] = k.band; });
    t.workers.forEach(function (name, row) { svg.appendChild(label(LEFT - 6, TOP + row * ROW + 12, "end", name)); });
    var spans = t.spans.filter(function (s) { return !band[s[1]]; })
      .concat(t.spans.filter(function (s) { return band[s[1]]; }));  // transfers drawn over the activity
    spans.forEach(function (s) {
      var thin = band[s[1]], top = TOP + s[0] * ROW + (thin ? 10 : 1), h = thin ? 4 : ROW - 4;
      svg.appendChild(node("rect", {x: x(s[2]).toFixed(1), y: top, width: Math.max(0.5, x(s[3]) - x(s[2])).toFixed(1),
                                    height: h, fill: colours[s[1]], "data-kind": s[1]}));
    });
    var bottom = TOP + t.workers.length * ROW;
    svg.appendChild(label(LEFT, bottom + 14, "start", seconds(t.begin_s)));
    svg.appendChild(label(W - RIGHT, bottom + 14, "end", seconds(t.end_s) +
      (t.left_out ? " (" + t.left_out + " more workers not shown)" : "")));
    var at = LEFT;
    t.kinds.forEach(function (k) {
      svg.appendChild(node("rect", {x: at, y: bottom + 24, width: 10, height: 10, fill: k.colour}));
      svg.appendChild(node("text", {x: at + 14, y: bottom + 33, "font-size": 11}, k.label));
      at += 14 + 6.2 * k.label.length + 16;
    });
  }

  // ---- buttons ----
  function download(name, blob) {
    var link = el("a", {href: URL.createObjectURL(blob), download: name});
    document.body.appendChild(link);
    link.click();
    link.remove();
  }
  document.getElementById("cancel").addEventListener("click", function () {
    if (!flight) return;
    if (flight.id === null) flight.cancelAsked = true;  // sent once the job has its id
    else api("POST", "/api/jobs/" + flight.id + "/cancel", {});
  });
  document.getElementById("save").addEventListener("click", function () {
    api("POST", "/api/toml", request()).then(function (answer) {
      if (answer.error) { showError(answer.error, changes); return; }
      download(answer.name, new Blob([answer.toml], {type: "application/toml"}));
    });
  });
  document.getElementById("report").addEventListener("click", function () {
    var status = document.getElementById("report-status");
    api("POST", "/api/report", request()).then(function (answer) {
      if (answer.error) { showError(answer.error, changes); return; }
      (function poll(job) {
        if (job.status === "running") {
          status.textContent = "writing the report: " + (job.step ? job.step.stage + " " + job.step.done + " of " +
            job.step.total : "starting") + ", " + job.elapsed_s.toFixed(0) + " s";
          api("GET", "/api/jobs/" + job.id + "?version=" + job.version + "&wait_s=5").then(function (a) { poll(a.job); });
          return;
        }
        if (job.status !== "done") { status.textContent = "report: " + job.status + " (" + job.error + ")"; return; }
        status.textContent = "report written: " + job.parts.report.name;
        var link = el("a", {href: "/api/jobs/" + job.id + "/download", download: job.parts.report.name});
        document.body.appendChild(link); link.click(); link.remove();
      })(answer.job);
    });
  });
  function load(scenario) {
    api("GET", "/api/panel?scenario=" + encodeURIComponent(scenario)).then(function (answer) {
      if (answer.error) { document.getElementById("error").textContent = answer.error.message; return; }
      state.scenario = answer.scenario; state.command = answer.command; state.panel = answer.panel;
      state.overrides = {};
      document.getElementById("description").textContent = answer.panel.description;
      buildControls();
      changed();
    });
  }
  document.getElementById("reset").addEventListener("click", function () { load(state.scenario); });
  var menu = document.getElementById("scenario");
  initial.scenarios.forEach(function (name) { menu.appendChild(el("option", {value: name, text: name})); });
  menu.value = state.scenario;
  menu.addEventListener("change", function () { load(menu.value); });
  document.getElementById("description").textContent = state.panel.description;
  buildControls();
  changed();
})();
