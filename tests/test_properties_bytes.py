"""Every byte counted, over drawn scenarios (hypothesis, ``helpers/strategies.py``): the bytes a run's
summary says its workers sent are the bytes its links carried, the integral of the links table
(``islands simulate --links``: each link's rate over time) over the run, whatever left, joined,
failed, broke a ring or was cut off.

* In all: the workers' bytes (``bytes_per_worker`` x ``workers``, the trace's bytes summed) are
  what every worker's uplink carried.
* Worker by worker, where the trace credits each byte to the worker whose link carried it: a
  learner's bytes are its uplink's (its uploads to the syncer; what the syncer sends back is no
  learner's); a ring member's are its downlink's (a ring moves as much into each member as out of
  it, and a joiner's download of the weights is credited to the joiner, whose downlink carries it);
  a staged collective's are its senders' uplinks' (a stage cut in flight moved more out of some
  members than into them), where no download goes to a joiner or a late worker.

Token buckets are left out: a burst is sent in no time, which the links table does not draw
(``simulator/network/links.py``). The counts player keeps no rows and no links (``returning.no_rows``):
its bytes are checked against the event model's over many seeds instead
(``tests/test_simulator_returning.py``). The learners player's runs are played here too: its rows and
links are the event model's (``tests/test_simulator_learners.py``).
"""

from __future__ import annotations

import pandas as pd
import pytest
from helpers.strategies import Drawn, scenarios
from hypothesis import assume, given

from islands.simulator import RunSetup, SimResult, simulate
from islands.simulator.fast.learners import LEARNERS, why_not
from islands.simulator.result import result_of
from islands.units import BITS_PER_BYTE, BITS_PER_GBIT

# The flow model ends a transfer within a billionth of the clock of its end (``COMPLETION_TOLERANCE``):
# the bytes its links carried may fall short of its bytes by that share of a second's worth
RELATIVE = 1e-6


def carried_bytes(links: pd.DataFrame, direction: str) -> pd.Series:
    """Each worker's link of ``direction``: the bytes it carried, its rate integrated over the run."""
    access = links[(links["worker"] >= 0) & (links["direction"] == direction)]
    seconds = access["time_end_s"] - access["time_start_s"]
    carried = seconds * access["rate_gbps"] * BITS_PER_GBIT / BITS_PER_BYTE
    return carried.groupby(access["worker"]).sum()


def sent_bytes(trace: pd.DataFrame) -> pd.Series:
    """Each worker's bytes in its trace (comm and wasted rows)."""
    return trace.groupby("worker")["bytes"].sum()


def worker_by_worker(drawn: Drawn) -> str | None:
    """The link direction whose carried bytes are each worker's own (see the module's docstring), or
    None where only the totals agree."""
    network = drawn.document["network"]
    if drawn.algorithm == "decoupled":
        return "up"
    if network["collective"] == "ring":
        return "down"
    downloads = drawn.moves_membership or drawn.document["schedule"].get("barrier") == "deadline"
    return None if downloads else "up"


BURST_KEYS = ("burst_bytes", "upload_burst_bytes", "download_burst_bytes")


def without_token_buckets(drawn: Drawn) -> Drawn:
    """The drawn scenario with its token buckets taken out (see the module's docstring): taken out,
    not filtered, as so many draws have one that filtering starves the search."""
    for island in drawn.document["island"]:
        for key in BURST_KEYS:
            island.pop(key, None)
    return drawn


def assert_every_byte_carried(drawn: Drawn, result: SimResult) -> None:
    summary, trace, links = result.summary, result.trace, result.links
    total = summary["bytes_per_worker"] * summary["workers"]
    sent = sent_bytes(trace)
    assert float(sent.sum()) == pytest.approx(total, rel=1e-9)
    assert float(carried_bytes(links, "up").sum()) == pytest.approx(total, rel=RELATIVE, abs=1.0)
    wasted = trace.loc[trace["kind"] == "wasted", "bytes"].sum()
    assert summary["wasted_bytes_per_worker"] * summary["workers"] == pytest.approx(
        wasted, rel=1e-9, abs=1e-6
    )
    direction = worker_by_worker(drawn)
    if direction is not None:
        carried = carried_bytes(links, direction).reindex(sent.index, fill_value=0.0)
        assert carried.to_numpy() == pytest.approx(sent.to_numpy(), rel=RELATIVE, abs=1.0)


@given(scenarios().map(without_token_buckets))
def test_the_summarys_bytes_are_what_the_links_carried(drawn):
    assert_every_byte_carried(drawn, simulate(drawn.scenario(), player="events"))


@given(scenarios(algorithms=("decoupled",), permanent=False).map(without_token_buckets))
def test_the_learners_players_bytes_are_what_the_links_carried(drawn):
    setup = RunSetup.of(drawn.scenario())
    assume(why_not(setup) is None)
    played = LEARNERS.play(setup, LEARNERS.budget(setup))
    assert_every_byte_carried(drawn, result_of(setup, played))
