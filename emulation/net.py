"""The ``ip`` and ``tc`` commands behind the emulated WAN: names, addresses, shaping, counters.

Everything lives inside network namespaces that this module creates: a *core* namespace holding a
bridge (the WAN core), and one namespace per link ("island") holding the island end of a veth pair
whose other end is a bridge port in the core. The host's own namespace is never touched, and the
namespaces have no default route, so no packet can leave them.

    island namespace               core namespace
    lo, wan<i> 10.213.0.<i+1>/24 --veth-- port<i> -- bridge wanbr -- port<j> --veth-- wan<j> ...
    egress of wan<i>: upload shaping      egress of port<i>: download shaping

Deleting a namespace deletes every interface, address and qdisc inside it, so cleanup is
"end the processes inside, delete the namespaces".
"""

from __future__ import annotations

import ipaddress
import json
import math
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from islands.errors import UserError
from islands.units import BITS_PER_BYTE

SUBNET = ipaddress.ip_network("10.213.0.0/24")  # private; exists only inside our namespaces
MAX_LINKS = 250  # host addresses .1 to .250
BRIDGE = "wanbr"
NETNS_RUN_DIR = "/var/run/netns"

# The shaper's bucket depth: enough tokens for SHAPER_JITTER_S of traffic, so that a dequeue delayed by the
# scheduler (a few ms on a busy 2-core machine) is caught up instead of lost; never less than one GSO
# packet of TCP's minimum two segments (tcp_min_tso_segs), which the shaper would otherwise have to
# split in software. The cost: a transfer that starts on an idle link gets at most SHAPER_JITTER_S of
# head start.
SHAPER_JITTER_S = 0.004
FULL_PACKET_BYTES = 1514
MIN_BURST_BYTES = 2 * FULL_PACKET_BYTES
# TCP hands a link GSO super-packets of up to 64 KiB, which the shaper sends whole: 0.5 ms of a real
# 1 Gbit/s link, but 52 ms of the 10 Mbit/s that validation scales it to. A socket whose packet waits in
# the shaper holds back its next small write until that packet has left (TCP small queues and
# autocorking), so gloo's "ready to receive" waited up to 150 ms behind its flow's last data: with a
# queue per peer but 64 KiB packets, three islands' exchanges at 10 Mbit/s took 1.12-1.27 s for 1.00 s
# of data, with 4 ms packets 1.07-1.08 s. GSO packets are therefore capped at the link's bucket
# (``gso_bytes``): at most SHAPER_JITTER_S of its rate, as at real rates (issue 29, docs/emulation.md).
GSO_MAX_BYTES = 65536
# TCP small queues: a socket keeps at most this many bytes in the qdiscs below it (the kernel's
# default, 4 MB, lets each flow dump megabytes into a queue that holds far less, and the
# overflow is dropped and retransmitted). Set inside every namespace; the host's value is untouched.
TSQ_LIMIT_BYTES = 65536
# The bulk queue beyond the burst: QUEUE_LATENCY_S of traffic at the link's rate, and never less than
# QUEUE_MIN_FLOWS sockets' TSQ allowance. On equal links TSQ bounds what each flow queues at its own
# uplink, so the depth costs no standing delay. It matters where faster islands overfill a slower
# island's downlink: the queue there is a real path's bottleneck buffer, sized by the usual rule, one
# round trip at the rate (a 200 ms round trip: islands 40-120 ms from the core); access links and WAN
# edge routers hold as much or more. With 20 ms (52 ms with its floor at 49 Mbit/s) it overflowed,
# dropping whole 64 KiB GSO packets (about 45 segments each), and TCP's recovery made a 4:1 pair's
# exchanges scatter by -2% to +12%, and now and then +70% (issue 29, docs/emulation.md).
QUEUE_LATENCY_S = 0.200
QUEUE_MIN_FLOWS = 4
# A bottleneck router that queues per flow (fq_codel, RFC 8290, Linux's default qdisc and most
# routers' SQM; cake) serves a sparse flow, such as the ACKs of an upload, before the bulk flows
# queued there, so the ACKs of an island's uploads never wait behind the data that faster islands
# pour into its downlink. With one FIFO they did (up to 200 ms at 13 Mbit/s), the island's uplink,
# the ring's bottleneck, went window-limited and a ring of unequal links ran 15-20% slower than its
# slowest link (issue 29, docs/validation.md). This kernel has no fq_codel or prio qdisc, so htb
# gives packets shorter than ACK_MAX_BYTES their own class, served first (``shaper_commands``).
ACK_MAX_BYTES = 256  # a power of two: the filter masks the length's high bits
ACK_SHARE = 0.1
ACK_QUEUE_PACKETS = 1000
ACK_CLASS, BULK_CLASS = "2:10", "2:20"
# The same routers queue the bulk data per flow and serve the queues in turn, so a short message,
# such as gloo's "ready to receive" (Op::NOTIFY_RECV_READY, 48 bytes per piece, several coalesced
# into one packet above ACK_MAX_BYTES), waits for one packet of each busy flow, not behind all the
# data another island queued there. With one FIFO it waited behind the whole queue (up to 260 ms at
# 10 Mbit/s): the peer's data to that island started that much late, every member of the exchange
# after it waited, and three islands' exchanges at 10 Mbit/s took 1.05-1.42 s for 1.00 s of data
# (issue 29, docs/emulation.md). htb stands in for fq_codel: a class per peer island, and one for
# everything else (OTHER_CLASS, htb's default).
PEER_CLASS_BASE = 0x100
OTHER_CLASS = "2:21"
# netem holds every packet for the whole delay, so its queue (1000 packets by default) must hold
# twice a delay's worth of full-size packets at the link's rate, or it drops them.
NETEM_MIN_LIMIT_PACKETS = 1000
PROCESS_EXIT_WAIT_S = 2.0
UNSHAPED_QDISCS = ("noqueue", "pfifo_fast")  # what a veth has before it is shaped


def run(args: list[str], stdin: str | None = None) -> str:
    """Run a command (with ``stdin``); return its stdout, or raise UserError with the command's first
    error line."""
    try:
        done = subprocess.run(args, input=stdin, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise UserError(f"`{args[0]}` is not installed (needed for the emulated WAN)") from None
    if done.returncode != 0:
        detail = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[0]
        raise UserError(f"`{' '.join(args)}` failed: {detail}")
    return done.stdout


def address(index: int) -> str:
    return str(SUBNET[index + 1])


def wan_interface(index: int) -> str:
    return f"wan{index}"


def bridge_port(index: int) -> str:
    return f"port{index}"


def list_namespaces() -> list[str]:
    """Names of every named network namespace on the host: the files where ``ip netns`` mounts them.

    Read directly: ``ip netns list`` also queries each one and fails on a namespace being created.
    """
    return sorted(os.listdir(NETNS_RUN_DIR)) if os.path.isdir(NETNS_RUN_DIR) else []


def add_namespace(namespace: str) -> None:
    """Create a namespace without IPv6, so that no router solicitations pollute the byte counters."""
    run(["ip", "netns", "add", namespace])
    run(
        [
            "ip",
            "netns",
            "exec",
            namespace,
            "sysctl",
            "-q",
            "-w",
            "net.ipv6.conf.all.disable_ipv6=1",
            "net.ipv6.conf.default.disable_ipv6=1",
            f"net.ipv4.tcp_limit_output_bytes={TSQ_LIMIT_BYTES}",
        ]
    )
    run(["ip", "-n", namespace, "link", "set", "dev", "lo", "up"])


def add_bridge(core: str) -> None:
    run(["ip", "-n", core, "link", "add", "name", BRIDGE, "type", "bridge"])
    run(["ip", "-n", core, "link", "set", "dev", BRIDGE, "up"])


def attach_island(core: str, island_namespace: str, index: int) -> None:
    """A veth pair from a bridge port in the core to wan<index> in the island namespace, addressed."""
    port, wan = bridge_port(index), wan_interface(index)
    run(
        [
            "ip",
            "-n",
            core,
            "link",
            "add",
            "name",
            port,
            "type",
            "veth",
            "peer",
            "name",
            wan,
            "netns",
            island_namespace,
        ]
    )
    run(["ip", "-n", core, "link", "set", "dev", port, "master", BRIDGE, "up"])
    run(
        [
            "ip",
            "-n",
            island_namespace,
            "addr",
            "add",
            f"{address(index)}/{SUBNET.prefixlen}",
            "dev",
            wan,
        ]
    )
    run(["ip", "-n", island_namespace, "link", "set", "dev", wan, "up"])


AVAILABLE_TCP = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")


def check_tcp_available(algorithm: str) -> None:
    """Refuse, in one line, a congestion control this kernel has not loaded."""
    try:
        loaded = AVAILABLE_TCP.read_text().split()
    except OSError as error:
        raise UserError(f"{AVAILABLE_TCP}: cannot read ({error.strerror})") from None
    if algorithm not in loaded:
        raise UserError(
            f"TCP {algorithm!r}: this kernel has {', '.join(loaded)} loaded "
            f"(load it first: modprobe tcp_{algorithm})"
        )


def set_congestion_control(island_namespace: str, index: int, algorithm: str) -> None:
    """Every connection from island ``index`` to the others uses ``algorithm``, set on its route to
    the WAN (a route may name any algorithm the kernel has loaded; a namespace's default only those
    the host allows), so the host's own default does not leak into the emulation."""
    run(
        [
            "ip",
            "-n",
            island_namespace,
            "route",
            "change",
            str(SUBNET),
            "dev",
            wan_interface(index),
            "proto",
            "kernel",
            "scope",
            "link",
            "src",
            address(index),
            "congctl",
            algorithm,
        ]
    )


def burst_bytes(rate_bits_per_s: float) -> int:
    """The bucket of a link shaped to ``rate_bits_per_s``: what it sends at once after idling."""
    return max(MIN_BURST_BYTES, round(rate_bits_per_s / BITS_PER_BYTE * SHAPER_JITTER_S))


def gso_bytes(rate_bits_per_s: float) -> int:
    """The largest GSO packet a link shaped to ``rate_bits_per_s`` is handed: its bucket, at most 64 KiB."""
    return min(GSO_MAX_BYTES, burst_bytes(rate_bits_per_s))


def queue_limit_bytes(rate_bits_per_s: float) -> int:
    """The bulk queue in bytes: the burst plus the larger of QUEUE_LATENCY_S at the rate and the flows' TSQ."""
    queue_bytes = max(
        round(rate_bits_per_s / BITS_PER_BYTE * QUEUE_LATENCY_S), QUEUE_MIN_FLOWS * TSQ_LIMIT_BYTES
    )
    return burst_bytes(rate_bits_per_s) + queue_bytes


def netem_limit_packets(rate_bits_per_s: float, delay_s: float) -> int:
    in_flight_packets = rate_bits_per_s / BITS_PER_BYTE * delay_s / FULL_PACKET_BYTES
    return max(NETEM_MIN_LIMIT_PACKETS, math.ceil(2 * in_flight_packets))


def fifo_limit_bytes(rate_bits_per_s: float, queue_s: float) -> int:
    """One FIFO's depth in bytes: the bucket plus ``queue_s`` at the rate, and at least one GSO packet
    beyond the bucket (tbf refuses a packet larger than its queue)."""
    queue_bytes = max(round(rate_bits_per_s / BITS_PER_BYTE * queue_s), gso_bytes(rate_bits_per_s))
    return burst_bytes(rate_bits_per_s) + queue_bytes


def fifo_commands(
    device: str, rate_bits_per_s: float, parent: list[str], queue_s: float
) -> list[list[str]]:
    """``tc`` arguments for one tbf FIFO at the rate: every packet, ACK or data, to whichever peer, in
    one queue of ``fifo_limit_bytes``; the bucket is ``burst_bytes``, as the fair shaper's."""
    return [
        [
            "qdisc",
            "add",
            "dev",
            device,
            *parent,
            "handle",
            "2:",
            "tbf",
            "rate",
            f"{round(rate_bits_per_s)}bit",
            "burst",
            str(burst_bytes(rate_bits_per_s)),
            "limit",
            str(fifo_limit_bytes(rate_bits_per_s, queue_s)),
        ]
    ]


def shape(
    namespace: str,
    device: str,
    rate_bits_per_s: float,
    delay_s: float | None,
    peers: Sequence[str] = (),
    match: str = "dst",
    fifo_queue_s: float | None = None,
) -> None:
    """Shape the egress of ``device`` to the rate, ACKs first and a queue per peer (``shaper_commands``),
    or with ``fifo_queue_s`` one FIFO of that depth (``fifo_commands``); with ``delay_s``, a netem
    delay in front of it."""
    qdisc = ["tc", "-n", namespace, "qdisc", "add", "dev", device]
    if delay_s is None:
        parent = ["root"]
    else:
        run(
            qdisc
            + [
                "root",
                "handle",
                "1:",
                "netem",
                "delay",
                f"{round(delay_s * 1e6)}us",
                "limit",
                str(netem_limit_packets(rate_bits_per_s, delay_s)),
            ]
        )
        parent = ["parent", "1:"]
    run(
        [
            "ip",
            "-n",
            namespace,
            "link",
            "set",
            "dev",
            device,
            "gso_max_size",
            str(gso_bytes(rate_bits_per_s)),
        ]
    )
    # one tc for them all: a link of M islands has 3(M + 1) of them
    commands = (
        shaper_commands(device, rate_bits_per_s, parent, peers, match)
        if fifo_queue_s is None
        else fifo_commands(device, rate_bits_per_s, parent, fifo_queue_s)
    )
    run(
        ["tc", "-n", namespace, "-batch", "-"],
        stdin="".join(" ".join(command) + "\n" for command in commands),
    )


def unshape(namespace: str, device: str) -> None:
    """Remove the device's shaper, if it has one (deleting the root qdisc deletes everything under it)."""
    roots = json.loads(
        run(["tc", "-n", namespace, "-j", "qdisc", "show", "dev", device, "root"]) or "[]"
    )
    if any(root["kind"] not in UNSHAPED_QDISCS for root in roots):
        run(["tc", "-n", namespace, "qdisc", "del", "dev", device, "root"])


def peer_class(position: int) -> str:
    """The htb class of the ``position``-th peer's queue (tc reads class minors in hex)."""
    return f"2:{PEER_CLASS_BASE + position:x}"


def shaper_commands(
    device: str,
    rate_bits_per_s: float,
    parent: list[str],
    peers: Sequence[str] = (),
    match: str = "dst",
) -> list[list[str]]:
    """``tc`` arguments for an htb shaper at the rate: packets shorter than ACK_MAX_BYTES (TCP's
    ACKs) served before bulk data, and the bulk data queued per peer, the peers served in turn.

    The ACK class is guaranteed ACK_SHARE of the rate, the bulk class the rest, each free to borrow
    what the other leaves, the ACK class first. Under the bulk class each address in ``peers`` (the
    packets' ``match``: "dst" on an upload, "src" on a download) has its own queue, and everything
    else one more; each is guaranteed an equal share and may use the whole rate, and while two or
    more have data they take turns, FULL_PACKET_BYTES at a time, as fq_codel's flows do. Each queue holds
    ``queue_limit_bytes``. The bucket is ``burst_bytes``: htb sends a whole GSO packet (up to
    ``gso_bytes``) on any positive balance, so its own burst is set that much lower, at least one frame
    (with the full bucket, 0.15 s exchanges at 33 Mbit/s took 10% less than their bytes at the rate)."""
    rate = round(rate_bits_per_s)
    ack_rate = max(1, round(rate * ACK_SHARE))
    bulk_rate = rate - ack_rate
    queues = [OTHER_CLASS, *(peer_class(position) for position in range(len(peers)))]
    queue_rate = max(1, bulk_rate // len(queues))
    burst = str(max(FULL_PACKET_BYTES, burst_bytes(rate_bits_per_s) - gso_bytes(rate_bits_per_s)))
    on_device = ["dev", device]

    def klass(parent_id: str, class_id: str, class_rate: int, *extra: str) -> list[str]:
        return [
            "class",
            "add",
            *on_device,
            "parent",
            parent_id,
            "classid",
            class_id,
            "htb",
            "rate",
            f"{class_rate}bit",
            "ceil",
            f"{rate}bit",
            "burst",
            burst,
            "cburst",
            burst,
            *extra,
        ]

    def queue(class_id: str) -> list[list[str]]:
        return [
            klass(BULK_CLASS, class_id, queue_rate, "prio", "1", "quantum", str(FULL_PACKET_BYTES)),
            [
                "qdisc",
                "add",
                *on_device,
                "parent",
                class_id,
                "bfifo",
                "limit",
                str(queue_limit_bytes(rate_bits_per_s)),
            ],
        ]

    def to_peer(position: int, peer: str) -> list[str]:
        return [
            "filter",
            "add",
            *on_device,
            "parent",
            "2:",
            "protocol",
            "ip",
            "prio",
            "2",
            "u32",
            "match",
            "ip",
            match,
            f"{peer}/32",
            "flowid",
            peer_class(position),
        ]

    return [
        [
            "qdisc",
            "add",
            *on_device,
            *parent,
            "handle",
            "2:",
            "htb",
            "default",
            OTHER_CLASS.split(":")[1],
        ],
        klass("2:", "2:1", rate),
        klass("2:1", ACK_CLASS, ack_rate, "prio", "0"),
        [
            "qdisc",
            "add",
            *on_device,
            "parent",
            ACK_CLASS,
            "handle",
            "10:",
            "pfifo",
            "limit",
            str(ACK_QUEUE_PACKETS),
        ],
        klass("2:1", BULK_CLASS, bulk_rate, "prio", "1"),
        *[command for class_id in queues for command in queue(class_id)],
        # TCP, IPv4 total length (bytes 2-3 of the header) below ACK_MAX_BYTES: its high bits are 0
        [
            "filter",
            "add",
            *on_device,
            "parent",
            "2:",
            "protocol",
            "ip",
            "prio",
            "1",
            "u32",
            "match",
            "ip",
            "protocol",
            "6",
            "0xff",
            "match",
            "u16",
            "0x0000",
            f"0x{0x10000 - ACK_MAX_BYTES:04x}",
            "at",
            "2",
            "flowid",
            ACK_CLASS,
        ],
        *[to_peer(position, peer) for position, peer in enumerate(peers)],
    ]


def interface_counters(namespace: str, device: str) -> dict[str, int]:
    """The interface's own byte counters, as the kernel keeps them (link-layer bytes)."""
    [link] = json.loads(run(["ip", "-n", namespace, "-s", "-j", "link", "show", "dev", device]))
    stats = link["stats64"]
    return {"tx_bytes": stats["tx"]["bytes"], "rx_bytes": stats["rx"]["bytes"]}


def namespace_pids(namespace: str) -> list[int]:
    return [int(pid) for pid in run(["ip", "netns", "pids", namespace]).split()]


def end_processes(namespace: str) -> list[int]:
    """SIGTERM the processes left inside the namespace, SIGKILL those still there after a grace period.

    A process left inside would keep the namespace (and its veth) alive after ``ip netns delete``.
    """
    pids = namespace_pids(namespace)
    _signal_all(pids, signal.SIGTERM)
    deadline = time.monotonic() + PROCESS_EXIT_WAIT_S
    while namespace_pids(namespace) and time.monotonic() < deadline:
        time.sleep(0.05)
    _signal_all(namespace_pids(namespace), signal.SIGKILL)
    return pids


def _signal_all(pids: list[int], signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass


def delete_namespace(namespace: str) -> None:
    """End the processes inside, then delete the namespace and everything in it."""
    if namespace not in list_namespaces():
        return
    end_processes(namespace)
    run(["ip", "netns", "delete", namespace])
