"""A network profile: what ``islands calibrate`` measured among real hosts (or emulated ones), and how
a scenario takes it (``--network-profile FILE`` on simulate, plan, sweep and report).

The file (JSON) holds, for hosts named after the scenario's islands:

* ``hosts``: each host's achieved ``upload_gbps`` and ``download_gbps``. A copy from host a to host
  b alone moves at min(a's uplink, b's downlink) under the star model, so a host's uplink is the
  fastest copy it sent and its downlink the fastest it received (``host_rates``);
* ``rtt_ms``: the measured round trip of every pair of hosts;
* ``exchange``: the project's own exchange among all the hosts, timed as the trainer runs it
  (``validation/probe.py``): the screening's seconds per value, the members' end spread, and
  ``hop_overhead_s``, the exchange's fixed cost less its ring's round trips, per hop: (fixed seconds
  - 2(M-1) x the slowest one-way latency) / 2(M-1). It may be negative: the trainer's exchange pays
  three phases of latency however many members, where a ring pays 2(M-1) hops; and ``burst_bytes``,
  what the links sent at once when an exchange started on them idle (a token bucket: tc tbf's
  burst, a provider's allowance), fitted as the intercept of the exchange's data time in its bytes.

A scenario takes it (``apply_profile``) as: every island's upload and download rate from its host;
a ``[[latency]]`` entry per pair of islands whose round trip is the measured one plus twice the hop
overhead, at least 0 (replacing the scenario's own latencies and ``network.rtt_csv``), so that a
ring of M pays the exchange's fixed cost; every link's token bucket of ``burst_bytes``;
``network.exchange_cpu_s_per_value`` and ``network.exchange_end_spread_s`` from the exchange. An
island with replicas takes its host's figures for each of them; two replicas of one island talk at
the island's own ``latency_ms`` (one host cannot measure that).
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass
from itertools import combinations
from pathlib import Path
from typing import Any

from islands.io import json_text, parse_json, read_bounded_text, write_text
from islands.units import MS_PER_S

from .errors import ScenarioError
from .model import PairLatency
from .spec import is_finite_number, shown_value

KIND = "islands network profile"
VERSION = 1
MAX_PROFILE_BYTES = 16 * 2**20  # a profile of thousands of hosts is a few MB


@dataclass(frozen=True)
class Host:
    name: str
    upload_gbps: float
    download_gbps: float


@dataclass(frozen=True)
class ExchangeCost:
    members: int                 # M: the hosts that took part
    cpu_s_per_value: float       # screening, per value of the exchanged tensor
    hop_overhead_s: float        # fixed cost less the ring's round trips, per ring hop (may be negative)
    end_spread_s: float          # the first member's end before the last's
    burst_bytes: float = 0.0     # what each link sends at once when an exchange starts on it idle


@dataclass(frozen=True)
class NetworkProfile:
    label: str                   # where it was measured: real hosts, or how the WAN was emulated
    hosts: tuple[Host, ...]
    rtt_ms: tuple[PairLatency, ...]
    exchange: ExchangeCost

    def to_json(self) -> str:
        return json_text({"kind": KIND, "version": VERSION, **asdict(self)}, indent=2) + "\n"

    def save(self, path: Path) -> None:
        write_text(path, self.to_json())

    def host(self, name: str) -> Host | None:
        return next((host for host in self.hosts if host.name == name), None)


def read_profile(path: str | Path) -> NetworkProfile:
    """The profile in ``path``; a missing, corrupt or foreign file is refused in one line."""
    values = parse_json(read_bounded_text(path, "network profile", MAX_PROFILE_BYTES), path, "network profile",
                        ": write it with islands calibrate --out")
    if not isinstance(values, dict) or values.get("kind") != KIND:
        raise ScenarioError(str(path), "kind", f"not a network profile (no \"kind\": \"{KIND}\"): write one with "
                            "islands calibrate")
    if values.get("version") != VERSION:
        raise ScenarioError(str(path), "version",
                            f"{shown_value(values.get('version'))} is not {VERSION}: calibrate again")
    try:
        return NetworkProfile(
            label=str(values["label"]),
            hosts=unique_hosts(tuple(Host(str(h["name"]), positive(h["upload_gbps"]), positive(h["download_gbps"]))
                                     for h in values["hosts"]), str(path)),
            rtt_ms=unique_pairs(tuple(PairLatency((str(p["between"][0]), str(p["between"][1])),
                                                  non_negative(p["rtt_ms"])) for p in values["rtt_ms"]), str(path)),
            exchange=ExchangeCost(int(values["exchange"]["members"]),
                                  non_negative(values["exchange"]["cpu_s_per_value"]),
                                  number(values["exchange"]["hop_overhead_s"]),
                                  non_negative(values["exchange"]["end_spread_s"]),
                                  non_negative(values["exchange"].get("burst_bytes", 0.0))))
    except ScenarioError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, OverflowError) as error:
        raise ScenarioError(str(path), "", f"{describe(error)}: the profile is incomplete or has a value out of "
                            "range; calibrate again") from None


def unique_hosts(hosts: tuple[Host, ...], source: str) -> tuple[Host, ...]:
    """Refuse a host listed twice: one entry would win silently."""
    seen: set[str] = set()
    for index, host in enumerate(hosts):
        if host.name in seen:
            raise ScenarioError(source, f"hosts.{index}.name", f"'{host.name}' is listed twice; each host once")
        seen.add(host.name)
    return hosts


def number(value: Any) -> float:
    """A JSON number that is finite as a float (not a string, a boolean or null)."""
    if not is_finite_number(value):
        raise ValueError(f"{shown_value(value)} is not a finite number")
    return float(value)


def unique_pairs(pairs: tuple[PairLatency, ...], source: str) -> tuple[PairLatency, ...]:
    """Refuse a pair of hosts measured twice: one round trip would win silently."""
    seen: set[frozenset[str]] = set()
    for index, pair in enumerate(pairs):
        if frozenset(pair.between) in seen:
            raise ScenarioError(source, f"rtt_ms.{index}", f"the round trip between {' and '.join(pair.between)} "
                                "is listed twice; each pair once")
        seen.add(frozenset(pair.between))
    return pairs


def positive(value: Any) -> float:
    rate = number(value)
    if not rate > 0:
        raise ValueError(f"{shown_value(value)} is not a rate > 0")
    return rate


def non_negative(value: Any) -> float:
    figure = number(value)
    if not figure >= 0:
        raise ValueError(f"{shown_value(value)} is not a finite number >= 0")
    return figure


def describe(error: Exception) -> str:
    return f"missing {error}" if isinstance(error, KeyError) else str(error)


def apply_profile(document: dict[str, Any], profile: NetworkProfile, profile_path: str) -> dict[str, Any]:
    """A copy of a scenario document with the profile's links, round trips and exchange costs."""
    document = copy.deepcopy(document)
    islands = document.get("island") or []
    names = [str(table.get("name")) for table in islands]
    missing = [name for name in names if profile.host(name) is None]
    if missing:
        raise ScenarioError(profile_path, "hosts", f"no host named {', '.join(repr(n) for n in missing)} (it measured "
                            f"{', '.join(h.name for h in profile.hosts)}): name each host after its island "
                            "(islands calibrate --name)")
    for table in islands:
        host = profile.host(str(table["name"]))
        table.pop("bandwidth_gbps", None)
        table["upload_gbps"], table["download_gbps"] = host.upload_gbps, host.download_gbps
        table["upload_burst_bytes"] = table["download_burst_bytes"] = profile.exchange.burst_bytes
    document["latency"] = latency_entries(profile, names, profile_path)
    network = document.setdefault("network", {})
    network.pop("rtt_csv", None)
    network["exchange_cpu_s_per_value"] = profile.exchange.cpu_s_per_value
    network["exchange_end_spread_s"] = profile.exchange.end_spread_s
    return document


def latency_entries(profile: NetworkProfile, names: list[str], profile_path: str) -> list[dict[str, Any]]:
    """A ``[[latency]]`` entry per pair of islands: the measured round trip plus two hop overheads."""
    measured = {frozenset(pair.between): pair.rtt_ms for pair in profile.rtt_ms}
    overhead_ms = 2 * profile.exchange.hop_overhead_s * MS_PER_S
    entries = []
    for a, b in combinations(dict.fromkeys(names), 2):
        if frozenset((a, b)) not in measured:
            raise ScenarioError(profile_path, "rtt_ms",
                                f"no round trip between '{a}' and '{b}': calibrate them together")
        entries.append({"between": [a, b], "rtt_ms": max(0.0, measured[frozenset((a, b))] + overhead_ms)})
    return entries
