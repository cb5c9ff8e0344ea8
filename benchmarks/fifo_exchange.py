"""One FIFO per egress against fair queues: an exchange's achieved rate, with kernel counters.

    sudo .venv/bin/python benchmarks/fifo_exchange.py --out benchmarks/results/fifo-exchange-cubic.json
    sudo .venv/bin/python benchmarks/fifo_exchange.py --out benchmarks/results/fifo-streams-bbr.json \
        --exchange streams --islands 2 4 --flows 1 4 16 --repeats 2 --congestion-control bbr
    sudo .venv/bin/python benchmarks/fifo_exchange.py --out benchmarks/results/fifo-unequal.json \
        --exchange stepped --islands 2 3 4 --rates-mbit 10 40 --ratios 1 2 4 8 --queues-ms 50 200
    python benchmarks/fifo_exchange.py table benchmarks/results/fifo-*.json   # one Markdown row per cell

For each number of islands M, one emulated WAN of M links (``EmulatedWAN``) and one process per
island's namespace, which stay up while the controller replaces the links' shapers
(``EmulatedWAN.reshape``): each shaper (fair, and a FIFO of each ``--queues-ms``) at each rate. The
exchange is gloo's ring all-reduce of a float32 tensor whose ring bytes (2(M-1)/M of it per rank)
take ``--seconds`` at the rate, after one TCP stream between two islands (``measure_link``, what
iperf3 would give; equal links only); or (``--exchange stepped``) the trainer's own exchange of it
(``SteppedCollectives``: an all-to-all in M-1 steps, then a ring all-gather, in 64 KiB pieces); or
(``--exchange streams``) a ring of bulk transfers, each island sending
``--seconds`` of bytes to the next over ``--flows`` connections while receiving from the previous
one. With ``--ratios R``, unequal links: each island's rate R times the next one's, the last at
the cell's rate (the rate the achieved fraction is of). Every connection between islands uses
``--congestion-control`` (``Shaper.tcp``: the emulation
sets it on the islands' routes). While an exchange runs, the controller samples every island's
connections (``ss -tin``: peer, srtt, cwnd, delivery rate), its egress queue and its download's
(``tc -s qdisc``: backlog) every SAMPLE_EVERY_S; around it, ``nstat`` (retransmitted segments) and
the qdiscs' drops. The achieved fraction is the bytes each island sent, at the link-layer rate, over the
slowest island's time; the payload's TCP/IP and Ethernet headers (4.4%) are part of what is lost.
Latency: this kernel has neither netem nor fq (EDT), so no round trip can be added in the kernel;
every cell's base round trip is the veth's (under 0.1 ms). Results: one JSON document, a row per cell
(docs/emulation.md, "One FIFO per egress"; benchmarks/fifo_model.py fits the model to them).

Run as ``worker`` (gloo) or ``streams`` inside a namespace it is one island's process: for each
control file the controller writes (``cell-<k>.json``), it runs the cell's exchanges and writes its
times.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

CONTROL_POLL_S = 0.02
STREAM_POLL_S = 0.001  # the ring of streams starts on a file: its members start within about this
STREAM_PORT = 29600
STREAM_CHUNK_BYTES = 1 << 20
SAMPLE_EVERY_S = 0.25
PORT = 29533
FLOAT_BYTES = 4
RTT_PATTERN = re.compile(r"\brtt:([\d.]+)/")
CWND_PATTERN = re.compile(r"\bcwnd:(\d+)")
SSTHRESH_PATTERN = re.compile(r"\bssthresh:(\d+)")
RETRANS_PATTERN = re.compile(r"\bretrans:\d+/(\d+)")
ADDRESS_PATTERN = re.compile(r"10\.213\.0\.\d+:(\d+)\s+10\.213\.0\.(\d+):(\d+)")
DELIVERY_PATTERN = re.compile(r"\bdelivery_rate ([\d.]+)([KMG]?)bps")
UNIT = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9}
NSTAT_KEYS = ("TcpRetransSegs", "TcpOutSegs", "TcpExtTCPLossProbes", "TcpExtTCPTimeouts")


# --- the rank --------------------------------------------------------------------------------------
def worker(control: Path) -> None:
    import torch
    import torch.distributed as dist

    from islands.trainer.exchange.comm import TorchGroup

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    k = 0
    while True:
        cell_path = control / f"cell-{k}.json"
        while not cell_path.exists():
            time.sleep(CONTROL_POLL_S)
        cell = json.loads(cell_path.read_text())
        if cell.get("stop"):
            break
        tensor = torch.ones(cell["values"], dtype=torch.float32)
        stepped = TorchGroup(list(range(dist.get_world_size())), None)
        times = []
        for _ in range(cell["repeats"]):
            time.sleep(cell.get("idle_s", 0.0))  # as a DiLoCo sync after its inner steps' compute
            dist.barrier()
            start = time.perf_counter()
            if cell.get("stepped"):
                stepped.all_gather(stepped.all_to_all(list(tensor.chunk(stepped.size)))[0])
            else:
                dist.all_reduce(tensor)
            times.append(time.perf_counter() - start)
        publish(control / f"done-{k}-{rank}.json", json.dumps(times))
        k += 1
    dist.destroy_process_group()


def stream_worker(control: Path, rank: int, m: int) -> None:
    """Per cell: ``flows`` TCP connections to the next island and as many from the previous one; on each
    "go", every island sends ``bytes`` over its connections and receives as many, all at once (a ring
    of bulk transfers, every island sending and receiving through its egress at once)."""
    import socket

    from islands.emulation import net

    k = 0
    while True:
        cell = json.loads(wait_for(control / f"cell-{k}.json").read_text())
        if cell.get("stop"):
            break
        flows, port = cell["flows"], STREAM_PORT + k
        server = socket.create_server((net.address(rank), port), backlog=flows)
        (control / f"listening-{k}-{rank}").touch()
        for other in range(m):
            wait_for(control / f"listening-{k}-{other}")
        outgoing = [
            socket.create_connection((net.address((rank + 1) % m), port)) for _ in range(flows)
        ]
        incoming = [server.accept()[0] for _ in range(flows)]
        (control / f"ready-{k}-{rank}").touch()
        times = []
        for repeat in range(cell["repeats"]):
            wait_for(control / f"go-{k}-{repeat}", STREAM_POLL_S)
            start = time.perf_counter()
            share = cell["bytes"] // flows
            threads = [
                threading.Thread(target=connection.sendall, args=(bytes(share),))
                for connection in outgoing
            ]
            threads += [
                threading.Thread(target=receive_exactly, args=(connection, share))
                for connection in incoming
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            times.append(time.perf_counter() - start)
            (control / f"did-{k}-{repeat}-{rank}").touch()
        for connection in outgoing + incoming:
            connection.close()
        server.close()
        publish(control / f"done-{k}-{rank}.json", json.dumps(times))
        k += 1


def receive_exactly(connection, size: int) -> None:
    view = memoryview(bytearray(STREAM_CHUNK_BYTES))
    while size > 0:
        got = connection.recv_into(view, min(size, STREAM_CHUNK_BYTES))
        if not got:
            raise SystemExit("a stream closed early")
        size -= got


def publish(path: Path, text: str) -> None:
    """Write a control or result file whole: its reader may look for it at any moment."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    os.replace(partial, path)


def wait_for(path: Path, poll_s: float = CONTROL_POLL_S) -> Path:
    while not path.exists():
        time.sleep(poll_s)
    return path


# --- the controller --------------------------------------------------------------------------------
def ns_run(namespace: str, *args: str) -> str:
    return subprocess.run(
        ["ip", "netns", "exec", namespace, *args], capture_output=True, text=True, check=True
    ).stdout


def connections(namespace: str) -> list[dict]:
    """Every data connection of the namespace (gloo's, not the store's): its peer island, srtt ms,
    cwnd, delivery rate, retransmits."""
    lines = ns_run(namespace, "ss", "-tin", "state", "established").splitlines()
    found = []
    for first, second in zip(lines, lines[1:]):
        ports = ADDRESS_PATTERN.search(first)
        rtt, cwnd = RTT_PATTERN.search(second), CWND_PATTERN.search(second)
        if ports and rtt and cwnd and PORT not in (int(ports.group(1)), int(ports.group(3))):
            retrans = RETRANS_PATTERN.search(second)
            delivery = DELIVERY_PATTERN.search(second)
            ssthresh = SSTHRESH_PATTERN.search(second)
            found.append(
                {
                    "algorithm": second.split()[0],
                    "local_port": int(ports.group(1)),
                    "peer": int(ports.group(2)) - 1,  # net.address(i) is 10.213.0.<i+1>
                    "delivery_bits_per_s": float(delivery.group(1)) * UNIT[delivery.group(2)]
                    if delivery
                    else 0.0,
                    "rtt_ms": float(rtt.group(1)),
                    "cwnd": int(cwnd.group(1)),
                    "ssthresh": int(ssthresh.group(1)) if ssthresh else None,
                    "retrans": int(retrans.group(1)) if retrans else 0,
                    "sending": "bytes_sent" in second,
                }
            )
    return found


def qdisc_stats(namespace: str, device: str) -> dict:
    """The root qdisc's sent bytes, drops and backlog (bytes) now."""
    [root] = [
        q
        for q in json.loads(ns_run(namespace, "tc", "-s", "-j", "qdisc", "show", "dev", device))
        if q.get("root")
    ]
    return {
        "kind": root["kind"],
        "bytes": root.get("bytes", 0),
        "drops": root.get("drops", 0),
        "backlog": root.get("backlog", 0),
    }


def nstat(namespace: str) -> dict[str, int]:
    values = json.loads(ns_run(namespace, "nstat", "-asz", "--json"))["kernel"]
    return {key: values.get(key, 0) for key in NSTAT_KEYS}


class Sampler(threading.Thread):
    """Samples every island's connections and egress backlog until stopped."""

    def __init__(self, wan):
        super().__init__(daemon=True)
        self.wan, self.samples, self.halt = wan, [], threading.Event()

    def run(self) -> None:

        while not self.halt.wait(SAMPLE_EVERY_S):
            for i in range(len(self.wan.links)):
                self.samples.append(
                    {
                        "island": i,
                        "connections": connections(self.wan.namespace(i)),
                        "backlog": qdisc_stats(*upload_queue(self.wan, i))["backlog"],
                        "download_backlog": download_backlog(self.wan, i),
                    }
                )


def download_backlog(wan, island: int) -> int:
    """Bytes queued in the island's download shaper (its bridge port in the core), 0 where unshaped."""
    from islands.emulation import net

    port = qdisc_stats(f"{wan.prefix}-core", net.bridge_port(island))
    return port["backlog"] if port["kind"] in ("tbf", "htb") else 0


def per_island(samples: list[dict], wan) -> list[dict]:
    """Each island's medians: its egress and download queues (ms of their own rates), and of its
    sending connections, by peer, srtt, cwnd and delivery rate over its upload rate."""
    found = []
    for i, link in enumerate(wan.links):
        mine = [s for s in samples if s["island"] == i]
        sending = [c for s in mine for c in s["connections"] if c["sending"]]
        peers = {}
        for peer in sorted({c["peer"] for c in sending}):
            theirs = [c for c in sending if c["peer"] == peer]
            peers[str(peer)] = {
                "srtt_ms": statistics.median(c["rtt_ms"] for c in theirs),
                "srtt_ms_max": max(c["rtt_ms"] for c in theirs),
                "cwnd": statistics.median(c["cwnd"] for c in theirs),
                "ssthresh": min((c["ssthresh"] for c in theirs if c["ssthresh"]), default=None),
                "delivery_over_upload": statistics.median(c["delivery_bits_per_s"] for c in theirs)
                / link.upload_bits_per_s,
            }
        egress = [s["backlog"] * 8 / link.upload_bits_per_s * 1e3 for s in mine]
        download = [s["download_backlog"] * 8 / link.download_bits_per_s * 1e3 for s in mine]
        found.append(
            {
                "rate_bits_per_s": link.upload_bits_per_s,
                "egress_queue_ms_median": statistics.median(egress) if egress else None,
                "download_queue_ms_median": statistics.median(download) if download else None,
                "download_queue_ms_max": max(download, default=None),
                "sending_to": peers,
            }
        )
    return found


def summarise_samples(samples: list[dict], rate_bits_per_s: float) -> dict:
    """Median srtt and cwnd of the connections that have sent data (a receiver's srtt is no round trip
    of its peer's data), and the egress queue's median delay."""
    busy = [c for s in samples for c in s["connections"] if c["sending"]]
    backlog_ms = [s["backlog"] * 8 / rate_bits_per_s * 1e3 for s in samples]
    return {
        "algorithms": sorted({c["algorithm"] for c in busy}),
        "srtt_ms_median": statistics.median(c["rtt_ms"] for c in busy) if busy else None,
        "srtt_ms_max": max((c["rtt_ms"] for c in busy), default=None),
        "cwnd_median": statistics.median(c["cwnd"] for c in busy) if busy else None,
        "egress_queue_ms_median": statistics.median(backlog_ms) if backlog_ms else None,
        "egress_queue_ms_max": max(backlog_ms, default=None),
        "samples": len(samples),
    }


def upload_queue(wan, island: int) -> tuple[str, str]:
    """Where the island's upload queues: its own interface, or (a router's FIFO) its ifb in the core."""
    from islands.emulation import net

    if getattr(wan, "router_fifo", False):
        return f"{wan.prefix}-core", f"ifb{island}"
    return wan.namespace(island), net.wan_interface(island)


def place_fifo_in_router(wan, rate: float, on: bool) -> None:
    """Move each island's upload FIFO off its own interface into the core (``on``), meant as a home
    router's uplink queue: port<i>'s ingress is redirected through ifb<i>, whose egress is the tbf.
    Measured: the queue held what it held on the island's interface, since a socket keeps owning its
    packets across veth and ifb and TCP small queues still bound them. ``on=False`` removes it."""
    from islands.emulation import net

    core = f"{wan.prefix}-core"
    for i in range(len(wan.links)):
        port, ifb = net.bridge_port(i), f"ifb{i}"
        if not any(
            link["ifname"] == ifb
            for link in json.loads(net.run(["ip", "-n", core, "-j", "link", "show"]))
        ):
            net.run(["ip", "-n", core, "link", "add", "name", ifb, "type", "ifb"])
            net.run(["ip", "-n", core, "link", "set", "dev", ifb, "up"])
        if any(
            q["kind"] == "ingress"
            for q in json.loads(net.run(["tc", "-n", core, "-j", "qdisc", "show", "dev", port]))
        ):
            net.run(["tc", "-n", core, "qdisc", "del", "dev", port, "ingress"])
        net.unshape(core, ifb)
        if on:
            net.unshape(wan.namespace(i), net.wan_interface(i))
            net.run(["tc", "-n", core, "qdisc", "add", "dev", port, "handle", "ffff:", "ingress"])
            net.run(
                [
                    "tc",
                    "-n",
                    core,
                    "filter",
                    "add",
                    "dev",
                    port,
                    "parent",
                    "ffff:",
                    "protocol",
                    "all",
                    "u32",
                    "match",
                    "u32",
                    "0",
                    "0",
                    "action",
                    "mirred",
                    "egress",
                    "redirect",
                    "dev",
                    ifb,
                ]
            )
            commands = net.fifo_commands(ifb, rate, ["root"], wan.shaper.queue_ms / 1e3)
            net.run(
                ["tc", "-n", core, "-batch", "-"],
                stdin="".join(" ".join(c) + "\n" for c in commands),
            )
    wan.router_fifo = on


def counters(wan) -> dict:
    from islands.emulation import net

    core = f"{wan.prefix}-core"
    out = {}
    for i in range(len(wan.links)):
        out[f"island{i}"] = {
            "nstat": nstat(wan.namespace(i)),
            "egress": qdisc_stats(*upload_queue(wan, i)),
            "ingress_shaper": qdisc_stats(core, net.bridge_port(i)),
        }
    return out


def difference(after: dict, before: dict) -> dict:
    return {
        key: difference(value, before[key])
        if isinstance(value, dict)
        else (value - before[key] if key != "backlog" and isinstance(value, int) else value)
        for key, value in after.items()
    }


def run_cell(
    wan,
    control: Path,
    k: int,
    m: int,
    rate: float,
    repeats: int,
    seconds: float,
    stepped: bool,
    idle_s: float = 0.0,
) -> dict:
    """gloo's ring all-reduce, or (``stepped``) the trainer's all-to-all and all-gather, of a tensor
    whose ring bytes take ``seconds`` at ``rate``, the slowest link's; each after ``idle_s`` idle."""
    from islands.emulation import measure_link

    ring_bytes = rate / 8 * seconds  # what each rank sends
    values = m * round(ring_bytes / (2 * (m - 1)) / FLOAT_BYTES)  # M equal chunks
    equal = len({link.upload_bits_per_s for link in wan.links}) == 1
    stream_bits_per_s = measure_link(wan, 0, 1, round(ring_bytes)) if equal else None
    before = counters(wan)
    sampler = Sampler(wan)
    sampler.start()
    publish(
        control / f"cell-{k}.json",
        json.dumps({"values": values, "repeats": repeats, "stepped": stepped, "idle_s": idle_s}),
    )
    done = [control / f"done-{k}-{rank}.json" for rank in range(m)]
    while not all(path.exists() for path in done):
        time.sleep(CONTROL_POLL_S)
    sampler.halt.set()
    sampler.join()
    times = [json.loads(path.read_text()) for path in done]
    slowest = [max(per_rank[r] for per_rank in times) for r in range(repeats)]
    sent_bits = 2 * (m - 1) / m * values * FLOAT_BYTES * 8
    return {
        "islands": m,
        "rate_bits_per_s": rate,
        "links_bits_per_s": [link.upload_bits_per_s for link in wan.links],
        "exchange": "stepped" if stepped else "allreduce",
        "shaper": wan.shaper.kind,
        "queue_ms": wan.shaper.queue_ms if wan.shaper.kind == "fifo" else None,
        "mode": wan.mode,
        "values": values,
        "exchange_s": slowest,
        "fraction_of_rate": [sent_bits / rate / t for t in slowest],
        **(
            {}
            if stream_bits_per_s is None
            else {"stream_fraction_of_rate": stream_bits_per_s / rate}
        ),
        "samples": summarise_samples(sampler.samples, rate),
        "islands_samples": per_island(sampler.samples, wan),
        "counters": difference(counters(wan), before),
    }


def run_stream_cell(
    wan, control: Path, k: int, m: int, rate: float, flows: int, repeats: int, seconds: float
) -> dict:
    """A ring of bulk transfers, ``flows`` connections from each island to the next (``stream_worker``)."""
    payload = round(rate / 8 * seconds) // flows * flows
    publish(
        control / f"cell-{k}.json",
        json.dumps({"bytes": payload, "repeats": repeats, "flows": flows}),
    )
    for rank in range(m):
        wait_for(control / f"ready-{k}-{rank}")
    before = counters(wan)
    sampler = Sampler(wan)
    sampler.start()
    for repeat in range(repeats):
        (control / f"go-{k}-{repeat}").touch()
        for rank in range(m):
            wait_for(control / f"did-{k}-{repeat}-{rank}")
    sampler.halt.set()
    sampler.join()
    times = [
        json.loads(wait_for(control / f"done-{k}-{rank}.json").read_text()) for rank in range(m)
    ]
    slowest = [max(per_rank[r] for per_rank in times) for r in range(repeats)]
    return {
        "islands": m,
        "rate_bits_per_s": rate,
        "exchange": "streams",
        "flows": flows,
        "shaper": wan.shaper.kind,
        "queue_ms": wan.shaper.queue_ms if wan.shaper.kind == "fifo" else None,
        "mode": wan.mode,
        "bytes": payload,
        "exchange_s": slowest,
        "fraction_of_rate": [payload * 8 / rate / t for t in slowest],
        "samples": summarise_samples(sampler.samples, rate),
        "counters": difference(counters(wan), before),
    }


def start_ranks(wan, control: Path, m: int, exchange: str) -> list[subprocess.Popen]:
    children = []
    for rank in range(m):
        env = {
            **os.environ,
            **wan.environment(rank),
            "MASTER_ADDR": wan.address(0),
            "MASTER_PORT": str(PORT),
            "RANK": str(rank),
            "WORLD_SIZE": str(m),
            "OMP_NUM_THREADS": "1",
            "TORCH_CPP_LOG_LEVEL": "ERROR",
        }
        role = (
            ["streams", str(control), str(rank), str(m)]
            if exchange == "streams"
            else ["worker", str(control)]
        )
        children.append(
            subprocess.Popen(wan.command_prefix(rank) + [sys.executable, __file__, *role], env=env)
        )
    return children


def link_rates(slowest_bits_per_s: float, m: int, ratio: float) -> list[float]:
    """M links, each ``ratio`` times the next, the last the slowest (8:4:2:1 is M = 4, ratio 2)."""
    return [slowest_bits_per_s * ratio ** (m - 1 - i) for i in range(m)]


def measure_islands(m: int, args: argparse.Namespace, rows: list, write) -> None:
    from islands.emulation import EmulatedWAN, LinkSpec, Shaper

    ratios = [r for r in args.ratios if r ** (m - 1) <= args.max_spread]

    tcp = args.congestion_control  # set on the islands' routes by the emulation (Shaper.tcp)
    shapers = [Shaper("fair", tcp=tcp)] + [Shaper("fifo", q, tcp) for q in args.queues_ms]
    first = args.rates_mbit[0] * 1e6
    with (
        tempfile.TemporaryDirectory() as folder,
        EmulatedWAN(
            [LinkSpec(i, first, first) for i in range(m)],
            f"fifo{args.exchange[:3]}{m}",
            shapers[0],
        ) as wan,
    ):
        control = Path(folder)
        for island in range(m):
            ns_run(
                wan.namespace(island),
                "sysctl",
                "-qw",
                f"net.ipv4.tcp_slow_start_after_idle={args.slow_start_after_idle}",
            )
        children = start_ranks(wan, control, m, args.exchange)
        try:
            k = 0
            for rate_mbit, ratio, shaper in itertools.product(args.rates_mbit, ratios, shapers):
                rate = rate_mbit * 1e6
                wan.links = tuple(
                    LinkSpec(i, r, r) for i, r in enumerate(link_rates(rate, m, ratio))
                )
                wan.reshape(shaper)
                if args.fifo_at == "router":
                    place_fifo_in_router(wan, rate, shaper.kind == "fifo")
                for flows in args.flows if args.exchange == "streams" else [None]:
                    row = (
                        run_cell(
                            wan,
                            control,
                            k,
                            m,
                            rate,
                            args.repeats,
                            args.seconds,
                            args.exchange == "stepped",
                            args.idle_s,
                        )
                        if flows is None
                        else run_stream_cell(
                            wan, control, k, m, rate, flows, args.repeats, args.seconds
                        )
                    )
                    row["congestion_control"] = args.congestion_control
                    row["fifo_at"] = args.fifo_at
                    row["slow_start_after_idle"] = args.slow_start_after_idle
                    row["seconds"] = args.seconds
                    row["idle_s"] = args.idle_s
                    rows.append(row)
                    write()
                    print(
                        f"M={m} {rate_mbit:g} Mbit/s x{ratio:g} {shaper.mode} flows {flows}: "
                        f"{', '.join(f'{f:.3f}' for f in row['fraction_of_rate'])} of the rate; "
                        f"srtt {row['samples']['srtt_ms_median']} ms, egress queue "
                        f"{row['samples']['egress_queue_ms_median']} ms; {slowest_text(row)}",
                        flush=True,
                    )
                    k += 1
            publish(control / f"cell-{k}.json", json.dumps({"stop": True}))
            for child in children:
                child.wait(timeout=60)
        finally:
            for child in children:
                if child.poll() is None:
                    child.kill()


def slowest_text(row: dict) -> str:
    """The slowest island's queues and its sending connections, as one line."""
    if "islands_samples" not in row:
        return ""
    slow = row["islands_samples"][-1]
    peers = ", ".join(
        f"to {peer}: srtt {c['srtt_ms']:.0f} (max {c['srtt_ms_max']:.0f}) ms, cwnd {c['cwnd']:g} "
        f"(ssthresh {c.get('ssthresh')}), "
        f"delivery {c['delivery_over_upload']:.2f}"
        for peer, c in slow["sending_to"].items()
    )
    return (
        f"slowest island: egress {slow['egress_queue_ms_median'] or 0:.0f} ms, download "
        f"{slow['download_queue_ms_median'] or 0:.0f} ms (max {slow['download_queue_ms_max'] or 0:.0f}); {peers}"
    )


def table(paths: list[str]) -> str:
    """The results as one Markdown table: a row per cell, the achieved fraction's median and spread."""
    lines = [
        "| exchange | TCP | M | Mbit/s | shaper | achieved / rate: median (min-max) | one stream | "
        "srtt ms | egress queue ms | drops | retrans segs |",
        "|" + " --- |" * 11,
    ]
    for path in paths:
        document = json.loads(Path(path).read_text())
        for row in document["cells"]:
            fractions = row["fraction_of_rate"]
            nodes = row["counters"].values()
            drops = sum(n["egress"]["drops"] + n["ingress_shaper"]["drops"] for n in nodes)
            retrans = sum(n["nstat"]["TcpRetransSegs"] for n in nodes)
            exchange = (
                "all-reduce"
                if row.get("exchange", "allreduce") == "allreduce"
                else f"{row['flows']} flow{'s' * (row['flows'] > 1)}"
            )
            shaper = (
                f"fifo {row['queue_ms']:g} ms"
                + (" in a router" if row.get("fifo_at") == "router" else "")
                if row["shaper"] == "fifo"
                else "fair"
            )
            stream = (
                f"{row['stream_fraction_of_rate']:.3f}" if "stream_fraction_of_rate" in row else "-"
            )
            samples = row["samples"]
            queue = samples["egress_queue_ms_median"]
            lines.append(
                f"| {exchange} | {row['congestion_control']} | {row['islands']} | {row['rate_bits_per_s'] / 1e6:g} | "
                f"{shaper} | {statistics.median(fractions):.3f} ({min(fractions):.3f}-{max(fractions):.3f}) | "
                f"{stream} | {samples['srtt_ms_median'] or 0:.1f} | {queue or 0:.1f} | {drops} | {retrans} |"
            )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if argv[:1] == ["table"]:
        print(table(argv[1:]))
        return 0
    if argv[:1] == ["worker"]:
        worker(Path(argv[1]))
        return 0
    if argv[:1] == ["streams"]:
        stream_worker(Path(argv[1]), int(argv[2]), int(argv[3]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--islands", type=int, nargs="+", default=[2, 3, 4])
    parser.add_argument("--rates-mbit", type=float, nargs="+", default=[10, 50, 200])
    parser.add_argument("--queues-ms", type=float, nargs="+", default=[20, 100, 200])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--exchange",
        choices=("allreduce", "stepped", "streams"),
        default="allreduce",
        help="allreduce: gloo's ring all-reduce; stepped: the trainer's exchange (its all-to-all "
        "and all-gather in M-1 steps, 64 KiB pieces); streams: every island sends to the next over "
        "--flows connections while receiving from the previous one",
    )
    parser.add_argument(
        "--ratios",
        type=float,
        nargs="+",
        default=[1.0],
        help="unequal links: each island's rate this many times the next one's, the last island "
        "at --rates-mbit (2 with 4 islands: 8:4:2:1)",
    )
    parser.add_argument(
        "--idle-s",
        type=float,
        default=0.0,
        help="the links idle this long before each exchange, as a DiLoCo sync after its inner "
        "steps (default 0: back to back)",
    )
    parser.add_argument(
        "--slow-start-after-idle",
        type=int,
        choices=(0, 1),
        default=1,
        help="the islands' net.ipv4.tcp_slow_start_after_idle (Linux's default 1: a connection idle "
        "for a retransmission timeout starts again from its initial window)",
    )
    parser.add_argument(
        "--max-spread",
        type=float,
        default=8.0,
        help="skip a ratio whose fastest link would be more than this many times the slowest",
    )
    parser.add_argument(
        "--flows", type=int, nargs="+", default=[1, 4, 16], help="with --exchange streams"
    )
    parser.add_argument(
        "--seconds", type=float, default=1.5, help="each all-reduce's ring bytes at the rate"
    )
    parser.add_argument(
        "--congestion-control",
        choices=("cubic", "bbr"),
        default="cubic",
        help="the islands' TCP algorithm (the emulation's Shaper.tcp)",
    )
    parser.add_argument(
        "--fifo-at",
        choices=("host", "router"),
        default="host",
        help="host: the FIFO on the island's own interface, as tc tbf on a node (TCP small queues "
        "bound each socket's share); router: in the core namespace through an ifb, meant as "
        "a home router's uplink, but the socket keeps owning its packets across veth and ifb, "
        "so TCP small queues bound it all the same (docs/emulation.md)",
    )
    args = parser.parse_args(argv)
    from islands.io import write_text

    rows: list[dict] = []
    settings = {
        key: (str(value) if isinstance(value, Path) else value) for key, value in vars(args).items()
    }

    def write() -> None:
        write_text(args.out, json.dumps({"settings": settings, "cells": rows}, indent=1) + "\n")

    for m in args.islands:
        measure_islands(m, args, rows, write)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
