"""A network profile: what ``islands calibrate`` measured among real hosts (or emulated ones), and how
a scenario takes it (``--network-profile FILE`` on simulate, plan, sweep and report).

The file (JSON) holds, for hosts named after the scenario's islands:

* ``hosts``: each host's achieved ``upload_gbps`` and ``download_gbps``. A copy from host a to host
  b alone moves at min(a's uplink, b's downlink) under the star model, so a host's uplink is the
  fastest copy it sent and its downlink the fastest it received (``host_rates``);
* ``rtt_ms``: the measured round trip of every pair of hosts;
* ``exchange``: the project's own exchange among all the hosts, timed as the trainer runs it
  (``validation/exchange_probe.py``): the screening's seconds per value, the members' end spread, and
  ``hop_overhead_s``, the exchange's fixed cost less its ring's round trips, per hop: (fixed seconds
  - 2(M-1) x the slowest one-way latency) / 2(M-1). It may be negative: the trainer's exchange pays
  three phases of latency however many members, where a ring pays 2(M-1) hops; and ``burst_bytes``,
  what the links sent at once when an exchange started on them idle (a token bucket: tc tbf's
  burst, a provider's allowance), fitted as the intercept of the exchange's data time in its bytes.
  Optional: a profile built from a user's own tool files (``validation/toolfiles/hosts_profile.py``) has none;
* ``collective`` (optional): a collective benchmark among the hosts (nccl-tests' ``all_reduce_perf``
  or ``all_gather_perf``): its ``test``, the ``members`` (hosts) and ``ranks`` it ran on, the
  ``call_latency_s`` fitted as the intercept of its time against message size at small sizes, and
  ``bus_gbps``, its bus bandwidth at each message size (``size_bytes``; all_gather's is the gathered
  total, as nccl-tests prints it). ``ring_terms`` turns it into what a ring pays beyond the model's
  hop latencies and the slowest link's rate;
* ``fifo`` (optional): the hosts' egress is one FIFO queue (``islands calibrate --egress-queue fifo``):
  its depth ``queue_ms``, the TCP ``streams`` each host sent through it at once in the collective,
  and the hosts' ``tcp_congestion_control``.

A scenario takes it (``apply_profile``) as: every island's upload and download rate from its host;
a ``[[latency]]`` entry per pair of islands whose round trip is the measured one plus twice the hop
overhead, at least 0 (replacing the scenario's own latencies and ``network.rtt_csv``), so that a
ring of M pays the exchange's fixed cost; every link's token bucket of ``burst_bytes``;
``network.exchange_cpu_s_per_value`` and ``network.exchange_end_spread_s`` from the exchange (a
profile without one leaves the scenario's own costs and buckets). An island with replicas takes its
host's figures for each of them; two replicas of one island talk at the island's own
``latency_ms`` (one host cannot measure that). A collective sets ``exchange.call_overhead_s`` and
``network.ring_efficiency`` (``ring_terms``). Under a ``fifo`` block the scenario's egress becomes
that FIFO (``network.egress_queue``, ``fifo_queue_ms``, ``streams``, ``tcp_congestion_control``), and the
collective sets ``network.fifo_k_s`` in place of the ring efficiency: the k_s that makes the FIFO's
model give the measured efficiency at the slowest host's uplink (``scenarios/fifo.py``), so that the
scenario prices the FIFO at its own rates, and charges it once.
"""

from __future__ import annotations

import copy
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import asdict, dataclass
from itertools import combinations
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from islands.io import json_text, parse_json, read_bounded_text, write_text
from islands.numbers import is_finite_number, is_whole_number
from islands.schedules import SCHEDULES
from islands.units import BITS_PER_BYTE, BITS_PER_GBIT, MS_PER_S

from .errors import ScenarioError
from .fifo import FIFO, FITTED, Fifo, fitted_k_s, fitted_k_u
from .model import PairLatency
from .spec import (
    CONGESTION_CONTROLS,
    ISLAND_KEYS,
    LATENCY_KEYS,
    MAX_CALL_OVERHEAD_S,
    MAX_GBPS,
    MAX_LATENCY_MS,
    NETWORK_KEYS,
    Key,
    between,
    one_of,
    shown_value,
)

KIND = "islands network profile"
COLLECTIVE_TESTS = ("all_reduce", "all_gather")
VERSION = 1
MAX_PROFILE_BYTES = 16 * 2**20  # a profile of thousands of hosts is a few MB
MAX_RANKS = 2**20  # a collective's processes: far beyond any cluster
# the profile's figures that set no scenario key alone: held to the ranges of those they make
HOP_OVERHEAD = Key("float", check=between(-MAX_LATENCY_MS / 1e3, MAX_LATENCY_MS / 1e3, " s"))
CALL_LATENCY = Key("float", check=between(0, MAX_CALL_OVERHEAD_S, " s"))
MESSAGE_BYTES = Key("float", check=between(1, 2**50, " B"))
BUS_GBPS = Key(
    "float",
    check=lambda rate: (
        None if 0 < rate <= MAX_GBPS else f"must be above 0 and <= {MAX_GBPS:g} Gbit/s"
    ),
)  # a small message's bus rate is far below any link's


@dataclass(frozen=True)
class Host:
    name: str
    upload_gbps: float
    download_gbps: float


@dataclass(frozen=True)
class ExchangeCost:
    members: int  # M: the hosts that took part
    cpu_s_per_value: float  # screening, per value of the exchanged tensor
    hop_overhead_s: float  # fixed cost less the ring's round trips, per ring hop (may be negative)
    end_spread_s: float  # the first member's end before the last's
    burst_bytes: float = 0.0  # what each link sends at once when an exchange starts on it idle


@dataclass(frozen=True)
class BusRate:
    size_bytes: float  # the message size nccl-tests prints
    bus_gbps: float  # its bus bandwidth: the rate each link of the ring carried


@dataclass(frozen=True)
class CollectiveCost:
    test: str  # COLLECTIVE_TESTS: what was timed
    members: int  # M: the hosts it ran among
    ranks: int  # n: its processes (the bus bandwidth's 2(n-1)/n or (n-1)/n is in n)
    call_latency_s: float  # the intercept of its time against message size, at small sizes
    bus_gbps: tuple[BusRate, ...]  # by message size, smallest first


@dataclass(frozen=True)
class FifoEgress:
    """The hosts' egress as one FIFO queue, as the user's tools ran through it."""

    queue_ms: float  # its depth (tc tbf's latency)
    streams: int  # TCP connections each host sent through it at once in the collective
    tcp_congestion_control: str  # the hosts' (CONGESTION_CONTROLS)


@dataclass(frozen=True)
class NetworkProfile:
    label: str  # where it was measured: real hosts, or how the WAN was emulated
    hosts: tuple[Host, ...]
    rtt_ms: tuple[PairLatency, ...]
    exchange: ExchangeCost | None = None
    collective: CollectiveCost | None = None
    fifo: FifoEgress | None = None

    def to_json(self) -> str:
        blocks = {key: value for key, value in asdict(self).items() if value is not None}
        return json_text({"kind": KIND, "version": VERSION, **blocks}, indent=2) + "\n"

    def save(self, path: Path) -> None:
        write_text(path, self.to_json())

    def host(self, name: str) -> Host | None:
        return next((host for host in self.hosts if host.name == name), None)


def read_profile(path: str | Path) -> NetworkProfile:
    """The profile in ``path``; a missing, corrupt or foreign file, or a value of another type or out of
    its range (the scenario's own limits, docs/limits.md, for what the profile sets), is refused in
    one line naming the file and the key."""
    source = str(path)
    values = parse_json(
        read_bounded_text(path, "network profile", MAX_PROFILE_BYTES),
        path,
        "network profile",
        ": write it with islands calibrate --out",
    )
    if not isinstance(values, dict) or values.get("kind") != KIND:
        raise ScenarioError(
            source,
            "kind",
            f'not a network profile (no "kind": "{KIND}"): write one with islands calibrate',
        )
    if values.get("version") != VERSION or not is_whole_number(values.get("version")):
        raise ScenarioError(
            source,
            "version",
            f"{shown_value(values.get('version'))} is not {VERSION}: calibrate again",
        )
    fields(
        values,
        "",
        ("kind", "version", "label", "hosts", "rtt_ms"),
        ("exchange", "collective", "fifo"),
        source,
    )
    if not isinstance(values["label"], str):
        raise ScenarioError(source, "label", f"must be text (got {shown_value(values['label'])})")
    hosts = unique_hosts(
        tuple(
            host_of(entry, f"hosts.{index}", source)
            for index, entry in enumerate(entries(values, "hosts", source))
        ),
        source,
    )
    names = {host.name for host in hosts}
    rtt_ms = unique_pairs(
        tuple(
            pair_of(entry, f"rtt_ms.{index}", names, source)
            for index, entry in enumerate(entries(values, "rtt_ms", source, empty=True))
        ),
        source,
    )
    return NetworkProfile(
        label=values["label"],
        hosts=hosts,
        rtt_ms=rtt_ms,
        exchange=exchange_cost(values["exchange"], len(hosts), source)
        if "exchange" in values
        else None,
        collective=collective_cost(values["collective"], len(hosts), source)
        if "collective" in values
        else None,
        fifo=fifo_egress(values["fifo"], source) if "fifo" in values else None,
    )


def fields(
    values: Any, where: str, required: tuple[str, ...], optional: tuple[str, ...], source: str
) -> None:
    """Refuse ``values`` unless it is an object with every ``required`` key and no key but those and
    ``optional`` (a key misspelt, or written by another version, is no value to leave unread)."""
    if not isinstance(values, dict):
        raise ScenarioError(
            source, where or "the file", f"must be an object (got {shown_value(values)})"
        )
    missing = [key for key in required if key not in values]
    unknown = sorted(set(values) - set(required) - set(optional))
    if missing or unknown:
        problem = (
            f"no {', '.join(missing)}"
            if missing
            else f"unknown key {', '.join(map(repr, unknown))}"
        )
        raise ScenarioError(
            source,
            where or "the file",
            f"{problem}: the profile is incomplete or not one islands "
            "calibrate wrote; calibrate again",
        )


def entries(values: dict[str, Any], key: str, source: str, empty: bool = False) -> list[Any]:
    """The list under ``key``: a list, of at least one entry unless ``empty``."""
    listed = values[key]
    if not isinstance(listed, list) or not (listed or empty):
        raise ScenarioError(
            source,
            key,
            f"must list {'its entries' if empty else 'at least one'} (got {shown_value(listed)})",
        )
    return listed


def name_of(value: Any, where: str, source: str) -> str:
    if not isinstance(value, str) or not value:
        raise ScenarioError(
            source, where, f"a host's name must be text, not empty (got {shown_value(value)})"
        )
    return value


def host_of(entry: Any, where: str, source: str) -> Host:
    fields(entry, where, ("name", "upload_gbps", "download_gbps"), (), source)
    return Host(
        name_of(entry["name"], f"{where}.name", source),
        within(entry["upload_gbps"], ISLAND_KEYS["upload_gbps"], f"{where}.upload_gbps", source),
        within(
            entry["download_gbps"], ISLAND_KEYS["download_gbps"], f"{where}.download_gbps", source
        ),
    )


def pair_of(entry: Any, where: str, hosts: set[str], source: str) -> PairLatency:
    """One measured round trip: between two different hosts the profile lists."""
    fields(entry, where, ("between", "rtt_ms"), (), source)
    between = entry["between"]
    if not (isinstance(between, list) and len(between) == 2):
        raise ScenarioError(
            source, f"{where}.between", f"must list two hosts (got {shown_value(between)})"
        )
    a, b = (name_of(name, f"{where}.between", source) for name in between)
    if a == b or not {a, b} <= hosts:
        raise ScenarioError(
            source,
            f"{where}.between",
            f"must name two different hosts that hosts lists (got {shown_value(between)})",
        )
    return PairLatency(
        (a, b), within(entry["rtt_ms"], LATENCY_KEYS["rtt_ms"], f"{where}.rtt_ms", source)
    )


def within(value: Any, key: Key, where: str, source: str) -> float:
    """A number in the range of the scenario key ``key`` (what the profile sets in a scenario is held
    to the scenario's limits, and refused here, naming the profile)."""
    if not is_finite_number(value):
        raise ScenarioError(source, where, f"must be a finite number (got {shown_value(value)})")
    problem = key.check(value) if key.check is not None else None
    if problem:
        raise ScenarioError(source, where, f"{problem} (got {shown_value(value)})")
    return float(value)


def exchange_cost(values: Any, hosts: int, source: str) -> ExchangeCost:
    fields(
        values,
        "exchange",
        ("members", "cpu_s_per_value", "hop_overhead_s", "end_spread_s"),
        ("burst_bytes",),
        source,
    )
    return ExchangeCost(
        members(values["members"], 1, hosts, "exchange", source),
        within(
            values["cpu_s_per_value"],
            NETWORK_KEYS["exchange_cpu_s_per_value"],
            "exchange.cpu_s_per_value",
            source,
        ),
        within(values["hop_overhead_s"], HOP_OVERHEAD, "exchange.hop_overhead_s", source),
        within(
            values["end_spread_s"],
            NETWORK_KEYS["exchange_end_spread_s"],
            "exchange.end_spread_s",
            source,
        ),
        within(
            values.get("burst_bytes", 0.0),
            ISLAND_KEYS["upload_burst_bytes"],
            "exchange.burst_bytes",
            source,
        ),
    )


def members(value: Any, least: int, hosts: int, block: str, source: str) -> int:
    """M: ``least`` to the profile's hosts."""
    if not (is_whole_number(value) and least <= value <= hosts):
        raise ScenarioError(
            source,
            f"{block}.members",
            f"must be a whole number, {least} to the {hosts} hosts (got {shown_value(value)})",
        )
    return value


def collective_cost(values: Any, hosts: int, source: str) -> CollectiveCost:
    """The ``collective`` block, each figure in range; its sizes strictly rising."""
    fields(
        values, "collective", ("test", "members", "ranks", "call_latency_s", "bus_gbps"), (), source
    )
    if values["test"] not in COLLECTIVE_TESTS:
        raise ScenarioError(
            source,
            "collective.test",
            f"{shown_value(values['test'])} is not one of {', '.join(COLLECTIVE_TESTS)}",
        )
    count = members(values["members"], 2, hosts, "collective", source)
    ranks = values["ranks"]
    if not (is_whole_number(ranks) and count <= ranks <= MAX_RANKS):
        raise ScenarioError(
            source,
            "collective.ranks",
            f"must be a whole number, the {count} members to "
            f"{MAX_RANKS} (got {shown_value(ranks)})",
        )
    rates = tuple(
        bus_rate(row, f"collective.bus_gbps.{index}", source)
        for index, row in enumerate(entries(values, "bus_gbps", source))
    )
    if any(later.size_bytes <= earlier.size_bytes for earlier, later in zip(rates, rates[1:])):
        raise ScenarioError(
            source, "collective.bus_gbps", "the sizes must be listed, smallest first, each once"
        )
    return CollectiveCost(
        values["test"],
        count,
        ranks,
        within(values["call_latency_s"], CALL_LATENCY, "collective.call_latency_s", source),
        rates,
    )


def fifo_egress(values: Any, source: str) -> FifoEgress:
    """The ``fifo`` block, each figure in its scenario key's range."""
    fields(values, "fifo", ("queue_ms", "streams", "tcp_congestion_control"), (), source)
    streams = values["streams"]
    if not is_whole_number(streams):
        raise ScenarioError(
            source, "fifo.streams", f"must be a whole number (got {shown_value(streams)})"
        )
    within(streams, NETWORK_KEYS["streams"], "fifo.streams", source)
    control = values["tcp_congestion_control"]
    problem = one_of(*CONGESTION_CONTROLS)(control)
    if problem:
        raise ScenarioError(
            source, "fifo.tcp_congestion_control", f"{problem} (got {shown_value(control)})"
        )
    return FifoEgress(
        within(values["queue_ms"], NETWORK_KEYS["fifo_queue_ms"], "fifo.queue_ms", source),
        int(streams),
        control,
    )


def bus_rate(row: Any, where: str, source: str) -> BusRate:
    fields(row, where, ("size_bytes", "bus_gbps"), (), source)
    return BusRate(
        within(row["size_bytes"], MESSAGE_BYTES, f"{where}.size_bytes", source),
        within(row["bus_gbps"], BUS_GBPS, f"{where}.bus_gbps", source),
    )


def unique_hosts(hosts: tuple[Host, ...], source: str) -> tuple[Host, ...]:
    """Refuse a host listed twice: one entry would win silently."""
    seen: set[str] = set()
    for index, host in enumerate(hosts):
        if host.name in seen:
            raise ScenarioError(
                source, f"hosts.{index}.name", f"{host.name!r} is listed twice; each host once"
            )
        seen.add(host.name)
    return hosts


def unique_pairs(pairs: tuple[PairLatency, ...], source: str) -> tuple[PairLatency, ...]:
    """Refuse a pair of hosts measured twice: one round trip would win silently."""
    seen: set[frozenset[str]] = set()
    for index, pair in enumerate(pairs):
        if frozenset(pair.between) in seen:
            hosts = " and ".join(map(repr, pair.between))
            raise ScenarioError(
                source,
                f"rtt_ms.{index}",
                f"the round trip between {hosts} is listed twice; each pair once",
            )
        seen.add(frozenset(pair.between))
    return pairs


def apply_profile(
    document: dict[str, Any], profile: NetworkProfile, profile_path: str
) -> dict[str, Any]:
    """A copy of a scenario document with the profile's links, round trips and exchange costs."""
    document = copy.deepcopy(document)
    islands = document.get("island") or []
    names = [str(table.get("name")) for table in islands]
    missing = [name for name in names if profile.host(name) is None]
    if missing:
        raise ScenarioError(
            profile_path,
            "hosts",
            f"no host named {', '.join(repr(n) for n in missing)} (it measured "
            f"{', '.join(repr(h.name) for h in profile.hosts)}): name each host after its island "
            "(islands calibrate --name)",
        )
    hosts = {host.name: host for host in profile.hosts}
    for table in islands:
        host = hosts[str(table["name"])]
        table.pop("bandwidth_gbps", None)
        table["upload_gbps"], table["download_gbps"] = host.upload_gbps, host.download_gbps
        if profile.exchange is not None:
            table["upload_burst_bytes"] = table["download_burst_bytes"] = (
                profile.exchange.burst_bytes
            )
    document["latency"] = latency_entries(profile, names, profile_path)
    network = document.setdefault("network", {})
    network.pop("rtt_csv", None)
    if profile.exchange is not None:
        network["exchange_cpu_s_per_value"] = profile.exchange.cpu_s_per_value
        network["exchange_end_spread_s"] = profile.exchange.end_spread_s
    fifo = profile.fifo is not None and rings_collectives(document) and gathers_on_rings(document)
    if fifo:
        take_fifo(network, profile)
    if profile.collective is not None and rings_collectives(document):
        terms = ring_terms(profile, profile_path)
        document.setdefault("exchange", {})["call_overhead_s"] = terms.call_overhead_s
        if fifo:
            network["fifo_k_s"] = terms.fifo_k_s
            if terms.fifo_k_u is not None:
                network["fifo_k_u"] = terms.fifo_k_u
        else:
            network["ring_efficiency"] = terms.ring_efficiency
    return document


def gathers_on_rings(document: dict[str, Any]) -> bool:
    """Whether the scenario's top-k payloads, if any, go round a ring (a FIFO prices rings only)."""
    return document.get("network", {}).get("gather", "ring") == "ring"


def take_fifo(network: dict[str, Any], profile: NetworkProfile) -> None:
    """The profile's FIFO as the scenario's egress, in place of any of its own FIFO keys and ring
    efficiency (the collective's fit sets ``fifo_k_s``; ``fifo_k_so`` is the fit's for its TCP)."""
    fifo = profile.fifo
    assert fifo is not None, "take_fifo needs a profile with a fifo block"
    for key in ("ring_efficiency", "fifo_k_s", "fifo_k_so", "fifo_k_u"):
        network.pop(key, None)
    network.update(
        egress_queue=FIFO,
        fifo_queue_ms=fifo.queue_ms,
        streams=fifo.streams,
        tcp_congestion_control=fifo.tcp_congestion_control,
    )


def rings_collectives(document: dict[str, Any]) -> bool:
    """Whether the scenario's exchanges are ring collectives, which a collective's costs price: not a
    Decoupled learner's round trips to its syncer, nor a staged collective."""
    schedule = SCHEDULES.get(str(document.get("schedule", {}).get("algorithm")))
    coupled = schedule is None or schedule.coupled  # an unknown algorithm is refused by the loader
    return coupled and document.get("network", {}).get("collective", "ring") == "ring"


def latency_entries(
    profile: NetworkProfile, names: list[str], profile_path: str
) -> list[dict[str, Any]]:
    """A ``[[latency]]`` entry per pair of islands: the measured round trip plus two hop overheads."""
    measured = {frozenset(pair.between): pair.rtt_ms for pair in profile.rtt_ms}
    overhead_ms = (
        2 * profile.exchange.hop_overhead_s * MS_PER_S if profile.exchange is not None else 0.0
    )
    entries = []
    for a, b in combinations(dict.fromkeys(names), 2):
        if frozenset((a, b)) not in measured:
            raise ScenarioError(
                profile_path,
                "rtt_ms",
                f"no round trip between '{a}' and '{b}': calibrate them together",
            )
        rtt_ms = within(
            max(0.0, measured[frozenset((a, b))] + overhead_ms),
            LATENCY_KEYS["rtt_ms"],
            f"rtt_ms between '{a}' and '{b}' plus 2 x exchange.hop_overhead_s",
            profile_path,
        )
        entries.append({"between": [a, b], "rtt_ms": rtt_ms})
    return entries


HostName = TypeVar("HostName", bound=Hashable)


def host_rates(
    hosts: Iterable[HostName], rate: Mapping[tuple[HostName, HostName], float]
) -> list[tuple[float, float]]:
    """(uplink, downlink) of each host from the rates of copies by (sender, receiver): alone, a copy
    moves at min(sender's uplink, receiver's downlink), so a host's uplink is the fastest copy it
    sent and its downlink the fastest it received."""
    return [
        (
            max(r for (s, _), r in rate.items() if s == host),
            max(r for (_, d), r in rate.items() if d == host),
        )
        for host in hosts
    ]


@dataclass(frozen=True)
class RingTerms:
    """What a ring collective pays beyond the model's hops and the slowest link (``ring_terms``)."""

    call_overhead_s: float  # the per-call latency less 2(M-1) one-way hops, at least 0
    ring_efficiency: float  # the data's bus rate over the slowest host's, clamped into (0, 1]
    measured_efficiency: float  # before the clamp
    slowest_one_way_s: float
    slowest_gbps: float
    data_bus_gbps: float  # the largest message's bus rate, its per-call latency taken out
    fifo_k_s: float | None = None  # under the profile's FIFO: its k_s at the slowest uplink
    slowest_uplink_gbps: float = 0.0
    # under the profile's FIFO, unequal hosts: the k_u their ring carried, where below the fit's
    fifo_k_u: float | None = None


def bus_factor(test: str, ranks: int) -> float:
    """nccl-tests' bus bandwidth over its algorithm bandwidth: what each link carries per message
    byte, 2(n-1)/n in an all-reduce's ring, (n-1)/n in an all-gather's (of the gathered total)."""
    return (2 if test == "all_reduce" else 1) * (ranks - 1) / ranks


def ring_terms(profile: NetworkProfile, source: str) -> RingTerms:
    """The profile's collective as a ring's fixed cost per call and its share of the slowest link.

    The per-call latency L holds the ring's 2(M-1) one-way hops: the call overhead is L less 2(M-1)
    x the slowest pair's one-way latency (half its round trip), at least 0. The largest message of
    size S took t = S f / B (B its bus bandwidth, f ``bus_factor``), of which t - L moved data: its
    links carried S f / (t - L), over the slowest host's rate (min over hosts of their uplink and
    downlink) the ring's efficiency. A model that charges L and the data at that rate remakes t."""
    collective = profile.collective
    assert collective is not None, "ring_terms needs a profile with a collective"
    slowest_one_way_s = max(pair.rtt_ms for pair in profile.rtt_ms) / MS_PER_S / 2
    overhead_s = max(
        0.0, collective.call_latency_s - 2 * (collective.members - 1) * slowest_one_way_s
    )
    largest = collective.bus_gbps[-1]
    carried_gbit = (
        largest.size_bytes
        * bus_factor(collective.test, collective.ranks)
        * BITS_PER_BYTE
        / BITS_PER_GBIT
    )
    data_s = carried_gbit / largest.bus_gbps - collective.call_latency_s
    if not data_s > 0:
        raise ScenarioError(
            source,
            "collective",
            f"its largest message ({largest.size_bytes:.0f} bytes) took no "
            f"longer than its per-call latency ({collective.call_latency_s:.6g} s): measure to larger "
            "sizes (nccl-tests -e)",
        )
    slowest_gbps = min(min(host.upload_gbps, host.download_gbps) for host in profile.hosts)
    efficiency = carried_gbit / data_s / slowest_gbps
    uplink_gbps = min(host.upload_gbps for host in profile.hosts)
    return RingTerms(
        overhead_s,
        min(efficiency, 1.0),
        efficiency,
        slowest_one_way_s,
        slowest_gbps,
        carried_gbit / data_s,
        None
        if profile.fifo is None
        else fifo_k_s(profile.fifo, carried_gbit / data_s, uplink_gbps, source),
        uplink_gbps,
        None if profile.fifo is None else hosts_k_u(profile.hosts, carried_gbit / data_s),
    )


def hosts_k_u(hosts: tuple[Host, ...], bus_gbps: float) -> float | None:
    """``fifo.fitted_k_u`` of the hosts' ring in the simulator's order (a scenario's islands ranked
    by name, each named after its host) at the measured ``bus_gbps``."""
    bytes_per_s = BITS_PER_GBIT / BITS_PER_BYTE  # per Gbit/s
    ranked = sorted(hosts, key=lambda host: host.name)
    up = np.array([host.upload_gbps for host in ranked]) * bytes_per_s
    down = np.array([host.download_gbps for host in ranked]) * bytes_per_s
    return fitted_k_u(up, down, bus_gbps * bytes_per_s)


def fifo_k_s(fifo: FifoEgress, bus_gbps: float, uplink_gbps: float, source: str) -> float:
    """The k_s that makes one FIFO on an egress of ``uplink_gbps`` (the slowest host's uplink: the one
    a ring is charged at, ``simulator/network/ring_caps.py``) give the ring ``bus_gbps``: its efficiency
    there is bus / uplink (at least 0 where the ring moved as fast: no cost to charge)."""
    model = Fifo(
        fifo.streams,
        fifo.queue_ms / MS_PER_S,
        0.0,
        FITTED[fifo.tcp_congestion_control][1],
    )
    egress_bytes_per_s = uplink_gbps * BITS_PER_GBIT / BITS_PER_BYTE
    k_s = fitted_k_s(min(1.0, bus_gbps / uplink_gbps), egress_bytes_per_s, model)
    rule = NETWORK_KEYS["fifo_k_s"].check
    problem = None if rule is None else rule(k_s)
    if problem:
        raise ScenarioError(
            source,
            "collective",
            f"its bus rate, {bus_gbps:.6g} Gbit/s at the slowest uplink's {uplink_gbps:.6g}, makes "
            f"fifo_k_s {k_s:.6g}, which {problem}: the FIFO's model does not reach so slow a ring",
        )
    return k_s
