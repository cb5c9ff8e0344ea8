"""The live page: one HTML document with its style and script inline (no library, no font, nothing
fetched but this server's own API), from ``static/`` (page.html, page.css, page.js). The script
builds the controls from the panel (``controls``), sends every change as the scenario's ``--set``
overrides, and draws each part of a job as it comes (``figures``): tables from the cells the server
formatted, the plots as SVG it writes itself.

A change while a job runs waits for its first figures, unless the job has run ``SUPERSEDE_MS``
already: then (or once they are shown) the change supersedes it (the server stops it). A job
running longer than ``PROGRESS_MS`` shows its progress and a Cancel button.

``document.body.dataset`` tells a test (or a curious user) where the page is: ``change`` counts the
changes, ``answered`` the change the figures (or the refusal) are of, ``status`` the last job's state
(``running`` while its later parts are computed),
``shownMs`` how long the last change took to show its figures, ``completeMs`` all its parts.
"""

from __future__ import annotations

import html
import json
from importlib import resources
from typing import Any

SUPERSEDE_MS = 400
PROGRESS_MS = 250

STATIC = "static"


def static_text(name: str) -> str:
    """One of the page's files (``static/``), as installed with the package."""
    return (resources.files(__package__) / STATIC / name).read_text(encoding="utf-8")


def embedded_json(document: dict[str, Any]) -> str:
    """JSON safe inside a ``<script>`` element (no ``</`` to end it early)."""
    return json.dumps(document, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")


def page_html(initial: dict[str, Any]) -> str:
    """The page, opening on ``initial`` (``app.panel_document``)."""
    script = (
        static_text("page.js")
        .replace("__SUPERSEDE_MS__", str(SUPERSEDE_MS))
        .replace("__PROGRESS_MS__", str(PROGRESS_MS))
    )
    title = html.escape(f"islands serve: {initial['panel']['name']}")
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<link rel='icon' href='data:,'><title>{title}</title>"
        f"<style>{static_text('page.css')}</style></head><body>{static_text('page.html')}"
        f"<script type='application/json' id='initial'>{embedded_json(initial)}</script>"
        f"<script>{script}</script></body></html>"
    )
