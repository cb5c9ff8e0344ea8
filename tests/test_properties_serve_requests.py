"""Generated bad requests to the live page's server (``islands serve``: the JSON bodies its page
sends, ``{"scenario", "overrides", "target"}``): a valid body changed at one place
(``helpers/mutations.py``: a value of another type, NaN, an infinity, an integer of 401 digits,
arrays 100,000 deep, a key removed or added or written twice) or cut at any byte. The server answers
each with the edited scenario (200) or a refusal of one line (422), never an error of its own (500)."""

from __future__ import annotations

import pytest
from helpers.mutations import cuts, json_text, mutated
from hypothesis import given
from starlette.testclient import TestClient

from islands.analysis.live.app import create_app
from islands.analysis.live.jobs import Jobs
from islands.analysis.live.session import Session

VALID = {
    "scenario": "worked-example",
    "overrides": ["schedule.inner_steps=250", "island.0.replicas=4"],
    "target": 0.9,
}
CLIENT = TestClient(create_app(Session.start("worked-example"), Jobs(), []))


def answered(text: str) -> None:
    """POST the body to the route that checks a request without starting a job (``/api/toml``)."""
    answer = CLIENT.post(
        "/api/toml",
        content=text.encode("utf-8", "surrogatepass"),
        headers={"Content-Type": "application/json"},
    )
    assert answer.status_code in (200, 422), answer.text[:300]
    if answer.status_code == 422:
        message = answer.json()["error"]["message"]
        assert message and "\n" not in message and len(message) < 500, message


@given(mutated(VALID))
def test_a_request_changed_at_one_place_is_answered_or_refused_in_one_line(change):
    body, _ = change
    answered(json_text(body))


@pytest.mark.parametrize("length", cuts(len(json_text(VALID))))
def test_a_request_cut_at_any_byte_is_refused_in_one_line(length):
    answered(json_text(VALID)[:length])
