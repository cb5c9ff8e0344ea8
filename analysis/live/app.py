"""The live page's web server: a Starlette application (run by uvicorn, ``islands serve``).

Starlette is the small, well-kept ASGI toolkit FastAPI is built on: routes, JSON and a test client
(tests/test_serve_api.py drives the API without a browser or a socket); uvicorn is its usual server.
The page and everything it uses come from this server, inline: nothing is fetched elsewhere.

Routes (JSON bodies: ``{"scenario": ID, "overrides": ["KEY=VALUE", ...], "target": 0.95}``):

* ``GET /``: the page; ``GET /api/panel?scenario=ID``: a scenario's controls;
* ``POST /api/run``: validate the edited scenario and start its figures (a job), or refuse it
  (422, the loader's one line and the key it names);
* ``GET /api/jobs/ID?version=N&wait_s=S``: the job once it moved past version N (long polling);
  ``POST /api/jobs/ID/cancel``; ``GET /api/jobs/ID/download``: a finished report;
* ``POST /api/toml``: the edited scenario as a TOML file; ``POST /api/report``: start the static
  report of the edited scenario (a job).

The JSON routes take only ``application/json`` bodies (a page of another site cannot send one without
asking first), and only requests addressed to this host (TrustedHostMiddleware: DNS rebinding).
"""

from __future__ import annotations

import json
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request as HttpRequest
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from islands.errors import UserError

from .controls import panel
from .figures import compute_figures
from .jobs import DONE, Job, Jobs
from .page import page_html
from .session import Session, compute_report, error_of, request_of

MAX_WAIT_S = 30.0
FIRST_WAIT_S = 0.15  # a new job's answer waits this long for its first part: no second round trip
LOCAL_HOSTS = ["127.0.0.1", "localhost", "[::1]", "::1", "testserver"]


def refused(error: UserError, status: int = 422) -> JSONResponse:
    return JSONResponse({"error": error_of(error)}, status_code=status)


async def json_body(request: HttpRequest) -> Any:
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        raise UserError("send the request as application/json")
    try:
        return json.loads(await request.body())
    except (ValueError, UnicodeDecodeError) as error:
        raise UserError(f"the request is not JSON ({error})") from None


def panel_document(session: Session, scenario: str) -> dict[str, Any]:
    source = session.source(scenario)
    return {
        "scenario": scenario,
        "scenarios": session.choices(),
        "command": session.command(scenario),
        "panel": panel(source).to_dict(),
    }


def job_response(job: Job | None) -> JSONResponse:
    if job is None:
        return JSONResponse({"error": {"key": "", "message": "no such job"}}, status_code=404)
    return JSONResponse({"job": job.snapshot()})


def create_app(session: Session, jobs: Jobs, hosts: list[str] | None = None) -> Starlette:
    """The application serving ``session``'s scenarios, its figures computed by ``jobs``."""

    async def home(request: HttpRequest) -> Response:
        return HTMLResponse(page_html(panel_document(session, session.first)))

    async def panel_route(request: HttpRequest) -> Response:
        try:
            return JSONResponse(panel_document(session, request.query_params.get("scenario", "")))
        except UserError as error:
            return refused(error, 404)

    async def run(request: HttpRequest) -> Response:
        try:
            asked = request_of(await json_body(request))
            source = await run_in_threadpool(session.edited, asked)
        except UserError as error:
            return refused(error)
        started = jobs.submit("figures", compute_figures, (source, asked.target))
        return job_response(await run_in_threadpool(jobs.wait, started.id, 0, FIRST_WAIT_S))

    async def report(request: HttpRequest) -> Response:
        try:
            asked = request_of(await json_body(request))
            source = await run_in_threadpool(session.edited, asked)
        except UserError as error:
            return refused(error)
        return job_response(jobs.submit("report", compute_report, (source, asked.target)))

    async def toml(request: HttpRequest) -> Response:
        try:
            name, text = await run_in_threadpool(session.toml, request_of(await json_body(request)))
        except UserError as error:
            return refused(error)
        return JSONResponse({"name": name, "toml": text})

    async def job(request: HttpRequest) -> Response:
        try:
            version = int(request.query_params.get("version", "-1"))
            wait_s = min(max(float(request.query_params.get("wait_s", "0")), 0.0), MAX_WAIT_S)
        except ValueError:
            return refused(UserError("version and wait_s must be numbers"), 400)
        found = await run_in_threadpool(jobs.wait, request.path_params["id"], version, wait_s)
        return job_response(found)

    async def cancel(request: HttpRequest) -> Response:
        return job_response(jobs.cancel(request.path_params["id"]))

    async def download(request: HttpRequest) -> Response:
        found = jobs.get(request.path_params["id"])
        if found is None or found.status != DONE or "report" not in found.parts:
            return refused(UserError("no finished report for this job"), 404)
        part = found.parts["report"]
        return Response(
            part["content"],
            media_type="text/html",
            headers={"Content-Disposition": f'attachment; filename="{part["name"]}"'},
        )

    routes = [
        Route("/", home),
        Route("/api/panel", panel_route),
        Route("/api/run", run, methods=["POST"]),
        Route("/api/report", report, methods=["POST"]),
        Route("/api/toml", toml, methods=["POST"]),
        Route("/api/jobs/{id:int}", job),
        Route("/api/jobs/{id:int}/cancel", cancel, methods=["POST"]),
        Route("/api/jobs/{id:int}/download", download),
    ]
    allowed = ["*"] if hosts is None else [*LOCAL_HOSTS, *hosts]
    return Starlette(
        routes=routes, middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=allowed)]
    )
