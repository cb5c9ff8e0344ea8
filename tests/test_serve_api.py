"""The live page's server without a browser (Starlette's test client, no socket): its figures are
``islands simulate``'s, its refusals the loader's lines naming the key, its TOML reads back to the
same scenario, and its jobs are superseded, cancelled and killed as docs/how-to/serve.md says.
The page itself, in Chromium, is tests/test_serve_browser.py."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
import tomllib
import urllib.request
from dataclasses import replace

import pytest
from helpers.serve import failing_task, refused, run_cli, simulated, slow_task, stuck_task
from starlette.testclient import TestClient

from islands.analysis.link_rates import rate_steps
from islands.analysis.live.app import create_app
from islands.analysis.live.controls import CHOICES, LINEAR_SPANS, panel
from islands.analysis.live.figures import (
    COLUMN_FIGURES,
    TIMELINE_INTERVALS,
    timeline_data,
    uplink_rows,
)
from islands.analysis.live.jobs import CANCELLED, DONE, FAILED, STOP_GRACE_S, Jobs
from islands.analysis.live.session import Request, Session
from islands.scenarios import ScenarioSource, bundled_names, from_dict, load
from islands.scenarios.spec import ARRAYS, SECTIONS, Key
from islands.schedules import SCHEDULES
from islands.schedules.compression import VALUE_BITS
from islands.simulator import simulate
from islands.tables import COLUMNS

WE = "worked-example"
EDITS = [
    [],
    ["schedule.algorithm=streaming"],
    ["island.0.replicas=3", "schedule.bits=8", "island.0.latency_ms=40"],
    ["model.parameters=1e9", "schedule.algorithm=ddp", "island.0.bandwidth_gbps=10"],
]


@pytest.fixture(scope="module")
def jobs():
    jobs = Jobs()
    jobs.warm(wait=True)
    yield jobs
    jobs.close()


@pytest.fixture(scope="module")
def client(jobs):
    return TestClient(create_app(Session.start(WE), jobs, []))


def finished(client: TestClient, answer) -> dict:
    """The job of an answer, once it ended."""
    job = answer.json()["job"]
    while job["status"] == "running":
        job = client.get(f"/api/jobs/{job['id']}?version={job['version']}&wait_s=5").json()["job"]
    return job


def run(client: TestClient, overrides, target: float = 0.95) -> dict:
    answer = client.post(
        "/api/run", json={"scenario": WE, "overrides": overrides, "target": target}
    )
    assert answer.status_code == 200, answer.text
    job = finished(client, answer)
    assert job["status"] == DONE, job["error"]
    return job["parts"]


def says_one_of(key: Key) -> bool:
    """Whether the key's rule is a list of values (a value of its kind that no list holds is refused
    with "must be one of")."""
    bogus = {"str": "\x00no such value", "int": -7}.get(key.kind)
    return bogus is not None and (key.check and key.check(bogus) or "").startswith("must be one of")


def test_every_key_whose_rule_is_a_list_is_a_menu():
    listed = {
        f"{table}.{name}"
        for table, keys in {**SECTIONS, **ARRAYS}.items()
        for name, key in keys.items()
        if says_one_of(key)
    }
    assert listed == set(CHOICES)
    for key, choices in CHOICES.items():
        table, name = key.split(".")
        spec = {**SECTIONS, **ARRAYS}[table][name]
        assert all(spec.check(choice) is None for choice in choices), key


def test_every_printed_column_has_its_summary_key():
    assert list(COLUMN_FIGURES) == [label for label, _ in COLUMNS]
    summary = simulate(load(WE)).summary
    assert set(COLUMN_FIGURES.values()) <= set(summary)


def test_the_controls_hold_the_file_the_values_in_force_and_sliders_around_them():
    source = ScenarioSource.read(WE)
    controls = panel(source).to_dict()
    sections = {s["id"]: {c["key"]: c for c in s["controls"]} for s in controls["sections"]}
    (island,) = controls["arrays"][0]["rows"]
    row = {c["key"]: c for c in island["controls"]}
    assert row["island.0.replicas"]["value"] == 8
    assert row["island.0.upload_gbps"]["value"] is None  # not in the file
    assert row["island.0.upload_gbps"]["in_force"] == 1.0  # from bandwidth_gbps
    assert row["island.0.latency_ms"]["slider"] == {
        "low": 0.0,
        "high": LINEAR_SPANS["latency_ms"][1],
        "log": False,
    }
    parameters = sections["model"]["model.parameters"]
    assert parameters["slider"] == {"low": 1e9, "high": 1e11, "log": True}  # a tenth to ten times
    bits = sections["schedule"]["schedule.bits"]
    assert bits["choices"] == VALUE_BITS and bits["slider"] is None
    assert sections["schedule"]["schedule.algorithm"]["choices"] == tuple(SCHEDULES)
    assert sections["schedule"]["schedule.inner_steps"]["slider"]["low"] == 50
    assert sections["schedule"]["schedule.elastic"]["kind"] == "bool"


def test_the_overrides_the_server_started_with_are_the_files_values():
    session = Session.start(WE, ["schedule.inner_steps=100"])
    source = session.source(WE)
    controls = {c.key: c for c in panel(source).sections["schedule"]}
    assert controls["schedule.inner_steps"].value == 100
    assert session.command(WE) == "islands simulate worked-example --set schedule.inner_steps=100"


@pytest.mark.parametrize("overrides", EDITS, ids=lambda o: " ".join(o) or "as written")
def test_the_figures_are_what_islands_simulate_prints(client, overrides):
    parts = run(client, overrides)
    printed, summary = simulated(WE, overrides)
    figures = parts["run"]["figures"]
    assert {cell["label"]: cell["text"] for cell in figures} == printed
    assert {cell["key"]: cell["value"] for cell in figures} == {
        key: summary[key] for key in COLUMN_FIGURES.values()
    }


def test_a_refused_edit_names_its_key_with_the_commands_line(client):
    for overrides, key in (
        (["schedule.inner_steps=0"], "schedule.inner_steps"),
        (["island.0.replicas=two"], "island.0.replicas"),
        (["schedule.inner_stepz=1"], "schedule.inner_stepz"),
        (
            ["schedule.algorithm=streaming", "schedule.inner_steps=250", "schedule.fragments=20"],
            "schedule.overlap_steps",
        ),
    ):
        answer = client.post("/api/run", json={"scenario": WE, "overrides": overrides})
        assert answer.status_code == 422
        assert answer.json()["error"] == {"key": key, "message": refused(WE, overrides)}


@pytest.mark.parametrize(
    "body, content_type, message",
    [
        ('{"scenario": "worked-example"}', "text/plain", "send the request as application/json"),
        ("{", "application/json", "the request is not JSON"),
        (
            '{"scenario": "worked-example", "overrides": "a=1"}',
            "application/json",
            "must be a list",
        ),
        ('{"scenario": 3}', "application/json", "the request names no scenario"),
        ('{"scenario": "nope"}', "application/json", "no scenario 'nope' here"),
        ('{"scenario": "worked-example", "target": 2}', "application/json", "must be in (0, 1]"),
        (
            '{"scenario": "worked-example", "target": "x"}',
            "application/json",
            "must be a finite number",
        ),
    ],
)
def test_a_bad_request_is_one_line(client, body, content_type, message):
    answer = client.post("/api/run", content=body, headers={"Content-Type": content_type})
    assert answer.status_code == 422
    error = answer.json()["error"]["message"]
    assert message in error and "\n" not in error


def test_the_loss_is_what_islands_quality_prints(client):
    parts = run(client, ["island.0.replicas=4"])
    code, text, _ = run_cli(["quality", WE, "--set", "island.0.replicas=4"])
    assert code == 0
    lines = [line.split() for line in text.splitlines()]
    for row in parts["loss"]["rows"]:
        words = [*row["label"].split(), row["loss_text"], *row["relative_text"].split()]
        assert any(line[: len(words)] == words for line in lines), row


def test_the_least_bandwidth_is_islands_plans_headline(client):
    parts = run(client, ["schedule.inner_steps=250"], target=0.9)
    code, text, _ = run_cli(
        ["plan", WE, "--set", "schedule.inner_steps=250", "--target-utilisation", "0.9"]
    )
    assert code == 0
    assert parts["plan"]["headline"] in text.splitlines()
    assert parts["plan"]["headline"].startswith(
        "For 90% compute utilisation each island needs: DDP "
    )


@pytest.mark.parametrize(
    "scenario, overrides",
    [
        (WE, ["schedule.algorithm=ddp", "schedule.outer_steps=30"]),
        (WE, ["schedule.algorithm=streaming"]),
        ("mixed-fleet", []),
        ("home-lab", []),
    ],
)
def test_the_uplink_is_the_links_tables(scenario, overrides):
    result = simulate(load(scenario, overrides))
    window_s = result.summary["wall_time_s"] / 3
    times, levels = rate_steps(uplink_rows(result, window_s), 0, "up")
    all_times, all_levels = rate_steps(result.links, 0, "up")
    inside = all_times <= window_s
    assert len(times[times <= window_s]) > 3
    assert times[times <= window_s].tolist() == all_times[inside].tolist()
    assert levels[times <= window_s].tolist() == all_levels[inside].tolist()


def test_the_timeline_holds_every_span_of_its_intervals():
    scenario = load(WE, ["schedule.algorithm=streaming"])
    trace = simulate(scenario).trace
    timeline = timeline_data(trace, scenario)
    start, stop = TIMELINE_INTERVALS
    window = trace[(trace["outer_step"] >= start) & (trace["outer_step"] < stop)]
    assert len(timeline["spans"]) == len(window) > 0
    assert timeline["workers"] == [f"dc-{i}" for i in range(8)]
    assert {kind["kind"] for kind in timeline["kinds"]} == set(window["kind"])


@pytest.mark.parametrize("scenario", bundled_names())
def test_the_saved_toml_reads_back_to_the_same_scenario(scenario):
    session = Session.start(scenario)
    request = Request(scenario, ("seed=3",))
    name, text = session.toml(request)
    edited = session.edited(request).scenario
    assert name.endswith(".toml") and text.startswith("# written by islands ")
    assert replace(from_dict(tomllib.loads(text), "saved"), source=edited.source) == edited


def test_the_saved_toml_simulates_to_the_same_figures(tmp_path):
    session = Session.start(WE)
    overrides = ("schedule.algorithm=streaming", "island.0.step_time_s=2")
    _, text = session.toml(Request(WE, overrides))
    path = tmp_path / "saved.toml"
    path.write_text(text)
    assert simulated(str(path), []) == simulated(WE, overrides)


def test_a_job_gives_its_parts_as_they_come(jobs):
    job = jobs.submit("test", slow_task, (0.3,))
    seen = jobs.wait(job.id, 0, 10)
    assert seen is not None and seen.version >= 1
    while job.status == "running":
        jobs.wait(job.id, job.version, 10)
    assert job.status == DONE and job.parts == {"slept": {"steps": job.parts["slept"]["steps"]}}
    assert job.parts["slept"]["steps"] >= 10  # a step every 10 ms for 0.3 s


def test_a_newer_job_supersedes_the_running_one_whose_worker_stays(jobs):
    first = jobs.submit("test", slow_task, (30,))
    worker = jobs.workers[first.id]
    second = jobs.submit("test", slow_task, (0.05,))
    assert first.status == CANCELLED and first.error == "superseded by a newer change"
    while second.status == "running":
        jobs.wait(second.id, second.version, 10)
    assert second.status == DONE
    deadline = time.monotonic() + 10
    while first.id in jobs.workers and time.monotonic() < deadline:
        time.sleep(0.01)
    assert worker.process.is_alive()  # it stopped the job at its next step, and waits, warm


def test_a_job_that_does_not_stop_is_killed_with_its_worker(jobs):
    job = jobs.submit("test", stuck_task, (30,))
    worker = jobs.workers[job.id]
    started = time.monotonic()
    assert jobs.cancel(job.id).status == CANCELLED
    code = worker.exit_code(10)
    took_s = time.monotonic() - started
    assert not worker.process.is_alive() and took_s < STOP_GRACE_S + 5, took_s
    assert code == -signal.SIGKILL, (code, job.error)


def test_a_failing_job_says_why_in_one_line(jobs):
    job = jobs.submit("test", failing_task, ("no good",))
    while job.status == "running":
        jobs.wait(job.id, job.version, 10)
    assert job.status == FAILED and job.error == "no good"


def test_islands_serve_serves_the_page_until_interrupted():
    server = subprocess.Popen(
        [sys.executable, "-m", "islands", "serve", WE, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = server.stdout.readline()
        url = re.search(r"http://\S+", line).group()
        assert line == f"serving {WE} at {url} (Ctrl-C to stop)\n"
        with urllib.request.urlopen(url, timeout=30) as page:
            assert "<title>islands serve: seed-10b-1gbps</title>" in page.read().decode()
    finally:
        server.send_signal(signal.SIGINT)
        _, err = server.communicate(timeout=30)
    assert server.returncode == 0, err


@pytest.mark.parametrize("scenario", bundled_names())
def test_every_bundled_scenario_has_its_controls(client, scenario):
    answer = client.get(f"/api/panel?scenario={scenario}")
    assert answer.status_code == 200
    document = answer.json()
    rows = {array["id"]: len(array["rows"]) for array in document["panel"]["arrays"]}
    assert rows["island"] == len(tomllib.loads(load_text(scenario)).get("island", []))
    assert document["command"] == f"islands simulate {scenario}"


def load_text(scenario: str) -> str:
    from islands.scenarios import resolve

    return resolve(scenario).read_text(encoding="utf-8")


def test_the_report_of_the_edited_scenario_is_a_download(client):
    body = {"scenario": WE, "overrides": ["schedule.outer_steps=2"], "target": 0.9}
    job = finished(client, client.post("/api/report", json=body))
    assert job["status"] == DONE and job["parts"]["report"]["name"] == "seed-10b-1gbps-report.html"
    assert "content" not in job["parts"]["report"]  # the page reads the job; the file is fetched
    page = client.get(f"/api/jobs/{job['id']}/download")
    assert page.headers["content-disposition"] == (
        'attachment; filename="seed-10b-1gbps-report.html"'
    )
    assert "<h1>seed-10b-1gbps</h1>" in page.text
    assert "Written by islands" in page.text and "--set schedule.outer_steps=2" in page.text
    assert len(page.text.encode()) == job["parts"]["report"]["bytes"]
