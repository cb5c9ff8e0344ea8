"""Generated bad network profiles (``--network-profile FILE``, what ``islands calibrate`` writes): a
valid profile drawn (hosts, every pair's round trip, an exchange, a collective and one FIFO per
egress or not), then
changed at one place (``helpers/mutations.py``: a value of another type, out of range, NaN, an
infinity, 401 digits, 100,000 levels deep; a key or entry removed, one added, one written twice), or
cut at any byte. Each is read, or refused in one line naming the profile; a scenario that reads
alone and takes a profile that reads is refused, if at all, in one line naming the profile (the
scenario is not what is wrong), and ``islands simulate`` answers 0 or 2 in one line, never a
traceback."""

from __future__ import annotations

import contextlib
import io
import json
from itertools import combinations
from pathlib import Path
from typing import Any

import pytest
from helpers.mutations import answer, cuts, json_text, mutated
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from islands.cli import main
from islands.errors import UserError
from islands.scenarios import ScenarioError, ScenarioSource
from islands.scenarios.profile import KIND, VERSION, read_profile

FIXTURES = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
NAMES = ("a", "b", "c", "d")
RATES = st.sampled_from((0.05, 0.5, 1.0, 10.0))


@st.composite
def profiles(draw) -> dict[str, Any]:
    """A profile as ``NetworkProfile.to_json`` writes one, for 2 to 4 hosts."""
    names = NAMES[: draw(st.integers(2, len(NAMES)))]
    document: dict[str, Any] = {
        "kind": KIND,
        "version": VERSION,
        "label": "drawn",
        "hosts": [
            {"name": name, "upload_gbps": draw(RATES), "download_gbps": draw(RATES)}
            for name in names
        ],
        "rtt_ms": [
            {"between": [a, b], "rtt_ms": draw(st.sampled_from((0.0, 1.0, 40.0)))}
            for a, b in combinations(names, 2)
        ],
    }
    if draw(st.booleans()):
        document["exchange"] = {
            "members": len(names),
            "cpu_s_per_value": draw(st.sampled_from((0.0, 1e-9))),
            "hop_overhead_s": draw(st.sampled_from((-0.001, 0.0, 0.002))),
            "end_spread_s": 0.001,
            "burst_bytes": draw(st.sampled_from((0.0, 1e5))),
        }
    if draw(st.booleans()):
        document["collective"] = {
            "test": draw(st.sampled_from(("all_reduce", "all_gather"))),
            "members": len(names),
            "ranks": len(names),
            "call_latency_s": 1e-4,
            "bus_gbps": [
                {"size_bytes": 1e6, "bus_gbps": 0.01},
                {"size_bytes": 1e8, "bus_gbps": 0.02},
            ],
        }
    if draw(st.booleans()):
        document["fifo"] = {
            "queue_ms": draw(st.sampled_from((20.0, 200.0))),
            "streams": draw(st.sampled_from((1, 4))),
            "tcp_congestion_control": draw(st.sampled_from(("cubic", "bbr"))),
        }
    return document


def scenario_text(names: tuple[str, ...]) -> str:
    islands = "".join(
        f'[[island]]\nname = "{name}"\nstep_time_s = 1.0\nbandwidth_gbps = 1\n' for name in names
    )
    return (
        'name = "hosts"\n[model]\nparameters = 1e6\nbytes_per_param = 2\n'
        '[schedule]\nalgorithm = "diloco"\ninner_steps = 2\nouter_steps = 1\n' + islands
    )


def taken(scenario: Path, profile: Path) -> None:
    """The scenario (valid alone) with the profile: read, or refused in one line naming the profile."""
    source = ScenarioSource.read(scenario)
    if answer(lambda: read_profile(profile), profile) is not None:
        answer(lambda: source.with_network_profile(profile), profile)


def simulate_answers(scenario: Path, profile: Path) -> None:
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(["simulate", str(scenario), "--network-profile", str(profile)])
    assert code in (0, 2) and len(err.getvalue().splitlines()) == (code == 2), err.getvalue()


@given(profiles(), st.data())
@FIXTURES
def test_a_profile_changed_at_one_place_is_read_or_refused_naming_it(tmp_path, document, data):
    changed, what = data.draw(mutated(document))
    profile, scenario = tmp_path / "profile.json", tmp_path / "scenario.toml"
    profile.write_text(json_text(changed))
    scenario.write_text(scenario_text(tuple(host["name"] for host in document["hosts"])))
    taken(scenario, profile)
    simulate_answers(scenario, profile)


@given(profiles())
@FIXTURES
def test_a_drawn_profile_reads_and_a_scenario_of_its_hosts_takes_it(tmp_path, document):
    """The strategy's own check: every drawn profile is valid, and fits a scenario named after its hosts."""
    profile, scenario = tmp_path / "profile.json", tmp_path / "scenario.toml"
    profile.write_text(json.dumps(document))
    scenario.write_text(scenario_text(tuple(host["name"] for host in document["hosts"])))
    try:
        ScenarioSource.read(scenario).with_network_profile(profile)
    except (
        ScenarioError
    ) as error:  # a drawn collective may be too slow to price: the profile's fault, said
        assert error.source == str(profile) and error.key == "collective", error


@pytest.mark.parametrize("collective", [False, True])
def test_a_profile_cut_at_any_byte_is_refused_naming_it(tmp_path, collective):
    """With a collective, the hosts' FIFO too."""
    whole = {
        "kind": KIND,
        "version": VERSION,
        "label": "cut",
        "hosts": [
            {"name": "a", "upload_gbps": 1.0, "download_gbps": 0.5},
            {"name": "b", "upload_gbps": 10.0, "download_gbps": 10.0},
        ],
        "rtt_ms": [{"between": ["a", "b"], "rtt_ms": 12.5}],
        "exchange": {
            "members": 2,
            "cpu_s_per_value": 1e-9,
            "hop_overhead_s": 0.002,
            "end_spread_s": 0.001,
        },
    }
    if collective:
        whole["collective"] = {
            "test": "all_reduce",
            "members": 2,
            "ranks": 2,
            "call_latency_s": 1e-4,
            "bus_gbps": [
                {"size_bytes": 1e6, "bus_gbps": 0.1},
                {"size_bytes": 1e8, "bus_gbps": 0.4},
            ],
        }
        whole["fifo"] = {"queue_ms": 20.0, "streams": 2, "tcp_congestion_control": "bbr"}
    data = (json.dumps(whole, indent=2) + "\n").encode()
    path = tmp_path / "profile.json"
    path.write_bytes(data)
    complete = read_profile(path)
    for length in cuts(len(data)):
        path.write_bytes(data[:length])
        read = answer(lambda: read_profile(path), path)
        assert read is None or (not data[length:].strip() and read == complete), length


# --- the failures these suites found, each as its shrunk case -------------------------------------

TWO_HOSTS = {
    "kind": KIND,
    "version": VERSION,
    "label": "t",
    "hosts": [
        {"name": "a", "upload_gbps": 1.0, "download_gbps": 1.0},
        {"name": "b", "upload_gbps": 1.0, "download_gbps": 1.0},
    ],
    "rtt_ms": [{"between": ["a", "b"], "rtt_ms": 10.0}],
}
EXCHANGE = {"members": 2, "cpu_s_per_value": 0.0, "hop_overhead_s": 0.0, "end_spread_s": 0.0}


@pytest.mark.parametrize(
    "change, message",
    [
        (
            {
                "hosts": [
                    {"name": "a", "upload_gbps": 1000001, "download_gbps": 1.0},
                    TWO_HOSTS["hosts"][1],
                ]
            },
            "profile.json: hosts.0.upload_gbps: must be <= 1e+06 Gbit/s (see docs/limits.md) (got 1000001)",
        ),
        (
            {"exchange": {**EXCHANGE, "members": 0}},
            "profile.json: exchange.members: must be a whole number, 1 to the 2 hosts (got 0)",
        ),
        (
            {"rtt_ms": [{"between": "ab", "rtt_ms": 10.0}]},
            "profile.json: rtt_ms.0.between: must list two hosts (got 'ab')",
        ),
        (
            {"rtt_ms": [{"between": ["a", "a"], "rtt_ms": 10.0}]},
            "profile.json: rtt_ms.0.between: must name two different hosts that hosts lists (got ['a', 'a'])",
        ),
        (
            {"exchange": {**EXCHANGE, "hop_overhead_s": 60.0}},
            "profile.json: rtt_ms between 'a' and 'b' plus 2 x exchange.hop_overhead_s: must be <= 120000 ms",
        ),
        (
            {
                "hosts": [
                    {"name": 5, "upload_gbps": 1.0, "download_gbps": 1.0},
                    TWO_HOSTS["hosts"][1],
                ]
            },
            "profile.json: hosts.0.name: a host's name must be text, not empty (got 5)",
        ),
        ({"extra": 1}, "profile.json: the file: unknown key 'extra'"),
        (
            {"fifo": {"queue_ms": 20.0, "streams": 2.5, "tcp_congestion_control": "cubic"}},
            "profile.json: fifo.streams: must be a whole number (got 2.5)",
        ),
        (
            {"fifo": {"queue_ms": 0.0, "streams": 2, "tcp_congestion_control": "cubic"}},
            "profile.json: fifo.queue_ms: must be > 0 (got 0.0)",
        ),
        (
            {"fifo": {"queue_ms": 20.0, "streams": 2, "tcp_congestion_control": "reno"}},
            "profile.json: fifo.tcp_congestion_control: must be one of 'cubic', 'bbr' (got 'reno')",
        ),
    ],
)
def test_a_profile_the_fuzzing_found_wrong_is_refused_naming_it(tmp_path, change, message):
    """Were wrong before: a rate past the scenario's limit was refused naming the scenario file; an
    exchange of 0 members, a pair written as the text "ab" (read as a and b) and a host's round trip
    with itself were read; a name of 5 read as '5'; an unknown key was ignored."""
    scenario, profile = tmp_path / "scenario.toml", tmp_path / "profile.json"
    scenario.write_text(scenario_text(("a", "b")))
    profile.write_text(json.dumps({**TWO_HOSTS, **change}))
    with pytest.raises(ScenarioError) as refused:
        ScenarioSource.read(scenario).with_network_profile(profile)
    assert str(refused.value).startswith(str(tmp_path)) and message in str(refused.value), (
        refused.value
    )


def test_a_key_written_twice_is_refused_naming_it(tmp_path):
    """json.loads keeps the last of two values silently: one measured figure would be lost."""
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(TWO_HOSTS)[:-1] + ', "label": "again"}')
    with pytest.raises(
        UserError, match="profile.json: the key 'label' is written twice in one object"
    ):
        read_profile(path)
