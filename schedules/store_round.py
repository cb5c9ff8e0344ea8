"""One round through the object store (``network.gather = "store"``), declared once: the requests a
member makes, in series, each a round trip to the store. The simulator prices exactly these
(``simulator/network/gather_rounds.py``) and the trainer makes exactly these
(``trainer/exchange/gathering.py``); ``schedules/gather.py`` counts their payloads.

What a real stack does. Templar, which ran Covenant-72B over Cloudflare R2 (one-covenant/templar's
``src/tplr/comms.py``, read at 030c7f83), PUTs a peer's payload and awaits the answer; then, for each
of the K peers at once, asks the store whether the object is there (a HEAD, again until it is) and
GETs it, over S3 clients it keeps open; old objects are deleted by a task it starts after the PUT and
never waits for. A member's round here, in series, each request on a connection kept open (a round
trip; the handshakes are the first round's, below):

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

The store's own time to answer a request, its service time r (``request_ms`` of the scenario's
``[store]``: what a real store's time to first byte holds besides the round trip, tens of ms for an S3
PUT or GET, more for a LIST), is paid once per request on the path, where its server pays it: a PUT's
once its bytes are in (the object is there after it, then the answer goes back), a LIST's once it
arrives (it answers the names there then), a GET's once it arrives, before its first byte. The K GETs
go at once, each on its own connection, and are served at once: one r, not K. A handshake is the
network's, not a request: it pays none. A round thus waits 3 r (``ROUND_REQUESTS``), 1 in the PUT
stage and 2 in the GET stage, first round or not; the DELETE pays its own in the background.

The connections, opened by a member's first round and kept open after it. Each request goes on a
connection of its own kind (``StoreRequest.connection``): the PUT and the LIST on the member's own
(one: they go in series), the K GETs on K fetch connections (one each: they go at once), the DELETEs
on one of their own (one thread makes them, in the background, so no GET ever waits for a
connection a DELETE holds). A request whose kind holds fewer connections than it uses opens the
rest before it is sent, all at once: one handshake time, ``h`` round trips (``handshake_round_trips``
of the scenario's ``[store]``: 1 for TCP, which the trainer's plain-HTTP store pays; 2 with TLS 1.3
and 3 with TLS 1.2 on top, as S3 and R2 are reached over HTTPS). A member's first round thus opens
1 + K connections in two handshake times, the PUT's and the GETs': it pays 4 h one-way latencies
more than a steady round (``FIRST_ROUND_HANDSHAKES``), and its first DELETE, in the next round,
opens one more off the critical path. So does a joiner's first round, and a worker's back from a
departure (a new process); a round whose K grows (every worker's payload averaged, and a worker
joined) opens the fetch connections it lacks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

PUT_STAGE, GET_STAGE = 0, 1  # the simulator's two stages: the payloads up, then down
OWN, FETCH, SWEEP = "own", "fetch", "sweep"  # the kinds of a member's connections (the docstring)
TCP_HANDSHAKE_ROUND_TRIPS = 1  # a TCP connection's, before its first request: store's default
Held = Mapping[str, int]  # the connections a member holds open, by kind


@dataclass(frozen=True)
class StoreRequest:
    """One request of a round: its verb, what it names, the stage whose time it adds to (None: off
    the critical path), the kind of connection it goes on, and whether it is one request per payload
    picked, all at once, each on a connection of its own."""

    method: str
    names: str
    stage: int | None
    connection: str
    per_payload: bool = False

    def connections(self, peers: int) -> int:
        """The connections it uses at once in a round of ``peers`` payloads picked."""
        return peers if self.per_payload else 1

    def lacking(self, held: Held, peers: int) -> int:
        """The connections it opens before it is sent, for a member holding ``held``: those of its
        kind it uses at once and does not hold (none where it holds enough)."""
        return max(0, self.connections(peers) - held.get(self.connection, 0))


PUT = StoreRequest("PUT", "the member's own payload", PUT_STAGE, OWN)
LIST = StoreRequest("LIST", "the round's objects, by their prefix", GET_STAGE, OWN)
GET = StoreRequest(
    "GET", "the K picked payloads, one request each, all at once", GET_STAGE, FETCH, True
)
DELETE = StoreRequest("DELETE", "the member's payloads of the rounds before", None, SWEEP)

CRITICAL_PATH = (PUT, LIST, GET)  # in series, each a round trip
OFF_PATH = (DELETE,)  # in the background, waited for by no one
POLL_S = 0.002  # how long a member waits before it LISTs again

NOTHING_HELD: Held = {}  # a member's, before its first round


def requests(stage: int) -> int:
    """Requests on the path that ``stage`` waits for, one after another (the K GETs at once: one),
    each a round trip and the store's time to answer it once."""
    return sum(request.stage == stage for request in CRITICAL_PATH)


def one_ways(stage: int) -> int:
    """One-way latencies to the store that ``stage`` pays: a round trip per request on the path."""
    return 2 * requests(stage)


def opening(held: Held, peers: int) -> list[tuple[StoreRequest, int]]:
    """The requests on the path of a round of ``peers`` payloads that open connections, for a member
    that holds ``held`` before it, and how many each opens (all at once, before it is sent). (The
    DELETE's opens with the first one, off the path.)"""
    holding = dict(held)
    opened = []
    for request in CRITICAL_PATH:
        lacking = request.lacking(holding, peers)
        if lacking > 0:
            opened.append((request, lacking))
            holding[request.connection] = request.connections(peers)
    return opened


def handshakes(stage: int, held: Held, peers: int) -> int:
    """Handshake times that ``stage`` waits for a member holding ``held``: one per request of the
    stage that opens connections (those it opens go at once)."""
    return sum(request.stage == stage for request, _ in opening(held, peers))


def held_after(held: Held, peers: int) -> dict[str, int]:
    """The connections on the path a member holds open after a round of ``peers`` payloads."""
    holding = dict(held)
    for request, lacking in opening(held, peers):
        holding[request.connection] = holding.get(request.connection, 0) + lacking
    return holding


def handshake_one_ways(stage: int, held: Held, peers: int, round_trips: int) -> int:
    """One-way latencies to the store that ``stage``'s handshakes add, at ``round_trips`` each."""
    return 2 * round_trips * handshakes(stage, held, peers)


ROUND_ONE_WAYS = one_ways(PUT_STAGE) + one_ways(GET_STAGE)
ROUND_REQUESTS = requests(PUT_STAGE) + requests(GET_STAGE)  # the service times a round waits
FIRST_ROUND_HANDSHAKES = handshakes(PUT_STAGE, NOTHING_HELD, 1) + handshakes(
    GET_STAGE, NOTHING_HELD, 1
)  # a member's first round: the PUT's own connection, then the K GETs' at once
