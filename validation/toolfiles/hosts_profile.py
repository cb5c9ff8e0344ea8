"""A network profile from files a user measured on their own hosts, with no islands trainer on them
(``islands calibrate --host ... --iperf3 ... [--ping ...] [--nccl-tests FILE]``; the files are read by
``readers.py``, the profile is ``scenarios/profile.py``'s).

* **Hosts.** ``--host NAME=ADDRESS[,ADDRESS...]`` names each host after its island and lists every
  address or host name it appears under in the iperf3 files (behind NAT a client sees itself at its
  private address and is reached at its public one). An iperf3 file's client is the host of its
  ``local_host``; its server the host of its ``remote_host`` (or of the name the client was given).
  An address no ``--host`` lists is refused, naming the file: nothing is guessed.
* **Rates.** Each direction an iperf3 file measured is a copy from one host to another, at what its
  receiver got over all parallel streams. A host's uplink is the fastest it sent, its downlink the
  fastest it received (``host_rates``, the star model ``hostprobe`` uses): every host needs a file in
  which it sent and one in which it received (one --bidir file or a file and its -R for a pair).
* **Round trips.** ``--ping A:B=FILE`` for a pair, else the smallest TCP round trip of that pair's
  iperf3 files where a sending client reported one: taken under load, so it includes what queued.
* **Collective.** ``--nccl-tests FILE`` among all the hosts: the per-call latency is the intercept
  of the least-squares line of time against size over the sizes up to ``SMALL_BYTES``; the bus
  bandwidth of every size is size x ``bus_factor`` / time. ``scenarios.profile.ring_terms`` makes
  it a call overhead and a ring efficiency.
* **One FIFO per egress.** ``--egress-queue fifo`` (with ``--queue-ms``, ``--streams`` and
  ``--tcp-congestion-control`` as the hosts ran): the profile's ``fifo`` block, and in place of the
  ring efficiency the FIFO model's k_s that gives the collective's bus rate at the slowest uplink
  (``scenarios.profile.fifo_k_s``), which a scenario then prices at its own rates.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

from islands.errors import UserError
from islands.scenarios.model import PairLatency
from islands.scenarios.profile import (
    BusRate,
    CollectiveCost,
    FifoEgress,
    Host,
    NetworkProfile,
    RingTerms,
    bus_factor,
    host_rates,
    ring_terms,
)
from islands.units import BITS_PER_BYTE, BITS_PER_GBIT, MS_PER_S

from .readers import NcclTable, read_iperf3, read_nccl_tests, read_ping

SMALL_BYTES = 1 << 20  # the per-call latency is fitted over the sizes up to 1 MiB


@dataclass(frozen=True)
class ToolFiles:
    hosts: dict[str, tuple[str, ...]]  # island name: the addresses it appears under
    iperf3: tuple[str, ...]
    pings: tuple[tuple[str, str, str], ...]  # (host, host, file)
    nccl_tests: str | None = None
    nccl_ranks: int | None = None
    fifo: FifoEgress | None = None  # the hosts' egress, where it is one FIFO queue


def address_key(address: str) -> str:
    """An address as compared: without case, and an IPv4 address mapped into IPv6 as itself."""
    return address.strip().lower().removeprefix("::ffff:")


def profile_from_files(files: ToolFiles) -> tuple[NetworkProfile, list[str]]:
    """The profile, and the lines that say where each figure came from."""
    names = list(files.hosts)
    book = {
        address_key(address): name
        for name, addresses in files.hosts.items()
        for address in addresses
    }
    rates, tcp_rtt_s = iperf3_links(files.iperf3, book)
    hosts = host_links(names, rates)
    rtt, rtt_lines = round_trips(names, files.pings, tcp_rtt_s, book)
    lines = [
        "hosts (from iperf3: the fastest each sent, and received):",
        *(
            f"  {host.name}: up {host.upload_gbps:.6g} Gbit/s, down {host.download_gbps:.6g} Gbit/s"
            for host in hosts
        ),
        "round trips:",
        *rtt_lines,
    ]
    label = (
        f"{len(names)} hosts ({', '.join(names)}) from iperf3{', ping' if files.pings else ''}"
        f"{' and nccl-tests' if files.nccl_tests else ''} files"
    )
    profile = NetworkProfile(label, hosts, rtt, fifo=files.fifo)
    if files.nccl_tests:
        table = read_nccl_tests(files.nccl_tests)
        profile = NetworkProfile(
            label,
            hosts,
            rtt,
            collective=collective_of(table, files.nccl_ranks, len(names)),
            fifo=files.fifo,
        )
        lines += collective_lines(profile, table)
    return profile, lines


def iperf3_links(
    paths: tuple[str, ...], book: dict[str, str]
) -> tuple[dict[tuple[str, str], float], dict[frozenset[str], float]]:
    """(the fastest bits per second from host to host, the smallest TCP round trip seconds by pair)."""
    rates: dict[tuple[str, str], float] = {}
    rtt_s: dict[frozenset[str], float] = {}
    for path in paths:
        run = read_iperf3(path)
        client = book.get(address_key(run.local_host))
        server = book.get(address_key(run.remote_host)) or book.get(address_key(run.target))
        if client is None:
            raise UserError(
                f"{path}: start.connected.0.local_host: {run.local_host} (the client) is no --host's "
                f"address: add it to its host's --host NAME=ADDRESS,... ({given(book)})"
            )
        if server is None:
            names = (
                run.remote_host
                if run.target == run.remote_host
                else f"neither {run.remote_host} nor {run.target}"
            )
            raise UserError(
                f"{path}: start.connected.0.remote_host: {names} (the server) is no --host's address: "
                f"add it to its host's --host NAME=ADDRESS,... ({given(book)})"
            )
        if client == server:
            raise UserError(
                f"{path}: start.connected: both ends are --host {client}: one file per pair of hosts"
            )
        for direction, bits_per_s in (
            ((client, server), run.sent_bits_per_s),
            ((server, client), run.received_bits_per_s),
        ):
            if bits_per_s is not None:
                rates[direction] = max(bits_per_s, rates.get(direction, 0.0))
        if run.min_rtt_s is not None:
            pair = frozenset((client, server))
            rtt_s[pair] = min(run.min_rtt_s, rtt_s.get(pair, run.min_rtt_s))
    return rates, rtt_s


def given(book: dict[str, str]) -> str:
    by_name: dict[str, list[str]] = {}
    for address, name in book.items():
        by_name.setdefault(name, []).append(address)
    return "given: " + "; ".join(
        f"{name}={','.join(addresses)}" for name, addresses in by_name.items()
    )


def host_links(names: list[str], rates: dict[tuple[str, str], float]) -> tuple[Host, ...]:
    """Each host's uplink and downlink (Gbit/s), refused where no file has it send or receive."""
    for name in names:
        if not any(sender == name for sender, _ in rates):
            raise UserError(
                f"--iperf3: no file has host {name} sending: run iperf3 -c from {name}, or -R (or "
                f"--bidir) against {name} as the server"
            )
        if not any(receiver == name for _, receiver in rates):
            raise UserError(
                f"--iperf3: no file has host {name} receiving: run iperf3 -c to {name}, or -R (or "
                f"--bidir) from {name} as the client"
            )
    return tuple(
        Host(name, up / BITS_PER_GBIT, down / BITS_PER_GBIT)
        for name, (up, down) in zip(names, host_rates(names, rates))
    )


def round_trips(
    names: list[str],
    pings: tuple[tuple[str, str, str], ...],
    tcp_rtt_s: dict[frozenset[str], float],
    book: dict[str, str],
) -> tuple[tuple[PairLatency, ...], list[str]]:
    """Every pair's round trip: its ping file's, else its iperf3 files' TCP one, and a line each."""
    pinged = {}
    for a, b, path in pings:
        run = read_ping(path)
        other = next(
            (
                book[key]
                for key in map(address_key, filter(None, (run.target, run.address)))
                if key in book
            ),
            None,
        )
        if other is not None and other not in (a, b):
            raise UserError(
                f"{path}: PING line: it pinged {run.target}, --host {other}'s address, not {a}'s or {b}'s"
            )
        how = f"median of {run.replies} replies" if run.replies else "average of its rtt line"
        pinged[frozenset((a, b))] = (run.rtt_s, f"ping, {how}, {path}")
    pairs, lines = [], []
    for a, b in combinations(names, 2):
        pair = frozenset((a, b))
        if pair in pinged:
            rtt_s, how = pinged[pair]
        elif pair in tcp_rtt_s:
            rtt_s, how = (
                tcp_rtt_s[pair],
                "iperf3's smallest TCP round trip, under load: give --ping for the idle one",
            )
        else:
            raise UserError(
                f"--ping: no round trip between {a} and {b}: give --ping {a}:{b}=FILE (iperf3 has one only "
                "where a client sent, on Linux)"
            )
        pairs.append(PairLatency((a, b), rtt_s * MS_PER_S))
        lines.append(f"  {a}-{b}: {rtt_s * MS_PER_S:.6g} ms ({how})")
    return tuple(pairs), lines


def collective_of(table: NcclTable, ranks_flag: int | None, hosts: int) -> CollectiveCost:
    """The profile's collective block of one nccl-tests table among all ``hosts``."""
    path = table.path
    if table.ranks is not None and ranks_flag is not None and table.ranks != ranks_flag:
        raise UserError(f"{path}: ranks: the file says {table.ranks}, --nccl-ranks {ranks_flag}")
    ranks = table.ranks or ranks_flag
    if ranks is None:
        raise UserError(
            f"{path}: ranks: no '#  Rank N ... on HOST' or NCCL 'nranks N' line: give --nccl-ranks N"
        )
    members = table.members or ranks
    if ranks < 2 or members != hosts:
        counted = "" if table.members else " (one host per rank: no '#  Rank N ... on HOST' lines)"
        raise UserError(
            f"{path}: ranks: the run was among {members} hosts{counted}, the profile's --host names "
            f"{hosts}: run it among all of them, one or more ranks each"
        )
    factor = bus_factor(table.test, ranks)
    return CollectiveCost(
        table.test,
        members,
        ranks,
        call_latency_s(table),
        tuple(
            BusRate(
                row.size_bytes, row.size_bytes * factor * BITS_PER_BYTE / BITS_PER_GBIT / row.time_s
            )
            for row in table.rows
        ),
    )


def call_latency_s(table: NcclTable) -> float:
    """The intercept of the least-squares line of time against size, over the sizes up to SMALL_BYTES."""
    small = [row for row in table.rows if row.size_bytes <= SMALL_BYTES]
    if len(small) < 2:
        raise UserError(
            f"{table.path}: size: {len(small)} size(s) of at most {SMALL_BYTES} bytes, where the per-call "
            "latency is fitted: measure from small sizes (nccl-tests -b 8)"
        )
    sizes, times = [float(row.size_bytes) for row in small], [row.time_s for row in small]
    slope, intercept = statistics.linear_regression(sizes, times)
    if intercept < 0:
        raise UserError(
            f"{table.path}: time: the line through its {len(small)} sizes up to {SMALL_BYTES} bytes meets "
            f"size 0 at {intercept:.6g} s: their times do not fall to a fixed cost"
        )
    return intercept


def collective_lines(profile: NetworkProfile, table: NcclTable) -> list[str]:
    """What the collective block says, and the scenario keys it makes (``ring_terms``)."""
    collective = profile.collective
    assert collective is not None, "collective_lines needs a profile with a collective"
    terms: RingTerms = ring_terms(profile, table.path)
    largest = collective.bus_gbps[-1]
    small = sum(1 for row in table.rows if row.size_bytes <= SMALL_BYTES)
    lines = [
        f"collective ({Path(table.path).name}: {collective.test}, as {table.test_from}; {collective.ranks} ranks "
        f"on {collective.members} hosts):",
        f"  per-call latency {collective.call_latency_s:.6g} s (the intercept over its {small} sizes up to "
        f"{SMALL_BYTES} bytes); bus {largest.bus_gbps:.6g} Gbit/s at its largest size, {largest.size_bytes:.0f} "
        "bytes",
        f"  exchange.call_overhead_s = {terms.call_overhead_s:.6g} (the latency less 2 x {collective.members - 1} "
        f"one-way hops of {terms.slowest_one_way_s:.6g} s, at least 0)",
        f"  network.ring_efficiency = {terms.ring_efficiency:.6g} (the largest size's bus rate without its "
        f"per-call latency, {terms.data_bus_gbps:.6g} Gbit/s, over the slowest host's {terms.slowest_gbps:.6g})",
    ]
    if terms.measured_efficiency > 1:
        lines.append(
            f"  clamped to 1: the collective moved {terms.measured_efficiency:.4g} x the slowest host's "
            "iperf3 rate; iperf3 under-read a link (try -P 4), or the files are of different networks"
        )
    if profile.fifo is not None and terms.fifo_k_s is not None:
        fifo = profile.fifo
        lines.append(
            f"  network.fifo_k_s = {terms.fifo_k_s:.6g} in its place, behind one FIFO per egress "
            f"(streams = {fifo.streams}, {fifo.queue_ms:g} ms deep, {fifo.tcp_congestion_control}): "
            f"the k_s whose model gives {terms.data_bus_gbps:.6g} Gbit/s at the slowest uplink, "
            f"{terms.slowest_uplink_gbps:.6g} Gbit/s (scenarios/fifo.py)"
        )
    if terms.fifo_k_u is not None:
        lines.append(
            f"  network.fifo_k_u = {terms.fifo_k_u:.6g}: the hosts' links are unequal, and the fit's "
            f"k_u would carry their ring (in the order of their names) below the "
            f'{terms.data_bus_gbps:.6g} Gbit/s it moved (scenarios/fifo.py, "Unequal links")'
        )
    return lines
