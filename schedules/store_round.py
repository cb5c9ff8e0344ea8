"""One round through the object store (``network.gather = "store"``), declared once: the requests a
member makes, in series, each a round trip to the store. The simulator prices exactly these
(``simulator/network/gather_rounds.py``) and the trainer makes exactly these
(``trainer/exchange/gathering.py``); ``schedules/gather.py`` counts their payloads.

What a real stack does. Templar, which ran Covenant-72B over Cloudflare R2 (one-covenant/templar's
``src/tplr/comms.py``, read at 030c7f83), PUTs a peer's payload and awaits the answer; then, for each
of the K peers at once, asks the store whether the object is there (a HEAD, again until it is) and
GETs it, over S3 clients it keeps open; old objects are deleted by a task it starts after the PUT and
never waits for. A member's round here, in series, each request on a connection kept open (a round
trip, no handshake):

1. ``PUT`` its payload: its bytes reach the store one way after they leave, the answer comes back one
   way later (the PUT stage);
2. ``LIST`` the round's objects (their names' prefix, as S3's ListObjectsV2), again every ``POLL_S``
   until every member's object is there: one request where Templar makes a HEAD per peer at once, the
   same round trip (the GET stage from here);
3. ``GET`` the K picked payloads, one request each, all at once: a round trip, then their bytes.

Off the critical path, ``DELETE`` its payloads of the rounds before, once a round's LIST has shown
every member's object (every member has then finished the rounds before), in the background: no one
waits for it, and closing the rounds deletes what is left.

How the wait is counted: the simulator's PUTs end together (a stage ends for everyone at once), so
when a member's own PUT is answered every object has been in for one way, and its first LIST sees them
all: one request, one round trip. A member whose peers' PUTs land later (compute that differs inside
a round, which the simulator's stage does not have) polls again every ``POLL_S``, a round trip each,
and learns of the last object up to ``POLL_S`` plus a round trip after it landed: not priced.

A round thus pays 2 x 3 = 6 one-way latencies l to the store (a worker's access latency, the
backbone's, the store's), 2 in the PUT stage and 4 in the GET stage, on top of its bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

PUT_STAGE, GET_STAGE = 0, 1  # the simulator's two stages: the payloads up, then down


@dataclass(frozen=True)
class StoreRequest:
    """One request of a round: its verb, what it names, and the stage whose time it adds to (None:
    off the critical path)."""

    method: str
    names: str
    stage: int | None


PUT = StoreRequest("PUT", "the member's own payload", PUT_STAGE)
LIST = StoreRequest("LIST", "the round's objects, by their prefix", GET_STAGE)
GET = StoreRequest("GET", "the K picked payloads, one request each, all at once", GET_STAGE)
DELETE = StoreRequest("DELETE", "the member's payloads of the rounds before", None)

CRITICAL_PATH = (PUT, LIST, GET)  # in series, each a round trip
OFF_PATH = (DELETE,)  # in the background, waited for by no one
POLL_S = 0.002  # how long a member waits before it LISTs again


def one_ways(stage: int) -> int:
    """One-way latencies to the store that ``stage`` pays: a round trip per request on the path."""
    return 2 * sum(request.stage == stage for request in CRITICAL_PATH)


ROUND_ONE_WAYS = one_ways(PUT_STAGE) + one_ways(GET_STAGE)
