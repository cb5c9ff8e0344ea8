"""One FIFO per egress against fair queues: an exchange's achieved rate, with kernel counters.

    sudo .venv/bin/python benchmarks/fifo_exchange.py --out benchmarks/results/fifo-exchange-cubic.json
    sudo .venv/bin/python benchmarks/fifo_exchange.py --out benchmarks/results/fifo-streams-bbr.json \
        --exchange streams --islands 2 4 --flows 1 4 16 --repeats 2 --congestion-control bbr
    sudo .venv/bin/python benchmarks/fifo_exchange.py --out benchmarks/results/fifo-unequal.json \
        --exchange stepped --islands 2 3 4 --rates-mbit 10 40 --ratios 1 2 4 8 --queues-ms 50 200
    sudo .venv/bin/python benchmarks/fifo_exchange.py --out benchmarks/results/fifo-calls-cubic.json \
        --islands 4 --queues-ms 50 200 --repeats 6 --calls flat buckets tensors --idle-s 1
    python benchmarks/fifo_exchange.py table benchmarks/results/fifo-*.json   # one Markdown row per cell
    python benchmarks/fifo_exchange.py calls-table benchmarks/results/fifo-calls-*.json

For each number of islands M, one emulated WAN of M links (``EmulatedWAN``) and one process per
island's namespace, which stay up while the controller replaces the links' shapers
(``EmulatedWAN.reshape``): each shaper (fair, and a FIFO of each ``--queues-ms``) at each rate. The
exchange is gloo's ring all-reduce of a float32 tensor whose ring bytes (2(M-1)/M of it per rank)
take ``--seconds`` at the rate, after one TCP stream between two islands (``measure_link``, what
iperf3 would give; equal links only); or (``--exchange stepped``) the trainer's own exchange of it
(``SteppedCollectives``: an all-to-all in M-1 steps, then a ring all-gather, in 64 KiB pieces); or
(``--exchange streams``) a ring of bulk transfers, each island sending
``--seconds`` of bytes to the next over ``--flows`` connections while receiving from the previous
one. With ``--calls`` (all-reduce only), one payload cut into each layout's collective calls
(``run_calls_cell``: one buffer, PyTorch DDP's buckets, one call per tensor, of the trainer's GPT at
issue 44's model's width), the layouts' exchanges interleaved within each cell, each timed apart
with its own counters. With ``--ratios R``, unequal links: each island's rate R times the next
one's, the last at the cell's rate (the rate the achieved fraction is of). Every connection between islands uses
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
# --calls: the trainer's GPT at issue 44's model's width (its 77 MB fp32 token embedding: 50,257 x 384)
GPT_VOCAB, GPT_WIDTH, GPT_HEADS, GPT_BLOCK = 50257, 384, 6, 1024
CALL_LAYOUTS = ("flat", "buckets", "tensors")
PROBE = "probe"  # as many calls as the most of a cell's layouts, M values each: gloo's fixed cost
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
        if "calls" in cell:
            calls_cell(control, k, rank, cell)
            k += 1
            continue
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


def calls_cell(control: Path, k: int, rank: int, cell: dict) -> None:
    """A cell of ``--calls``: per layout a float32 buffer cut into its calls (``cell["calls"]``:
    values per call, in call order), all-reduced piece by piece back to back (``dist.all_reduce`` on
    each, a view of the buffer) when the controller says go (``go-<k>-<j>``), in the order
    ``cell["order"]`` gives; for each exchange, the seconds from the barrier to its last call's end,
    and (rank 0) each call's end."""
    import torch
    import torch.distributed as dist

    pieces = {
        name: torch.zeros(sum(sizes), dtype=torch.float32).split(sizes)
        for name, sizes in cell["calls"].items()
    }
    done = []
    for j, name in enumerate(cell["order"]):
        wait_for(control / f"go-{k}-{j}", STREAM_POLL_S)
        dist.barrier()
        ends = []
        start = time.perf_counter()
        for piece in pieces[name]:
            dist.all_reduce(piece)
            ends.append(time.perf_counter() - start)
        done.append(
            {"calls": name, "exchange_s": ends[-1], "call_end_s": ends if rank == 0 else []}
        )
        (control / f"did-{k}-{j}-{rank}").touch()
    publish(control / f"done-{k}-{rank}.json", json.dumps(done))


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


def ring_values(rate: float, seconds: float, m: int) -> int:
    """Values of a tensor whose all-reduce sends each rank ``seconds`` of ring bytes at ``rate``
    (2 (M-1)/M of its bytes), in M equal chunks."""
    return m * round(rate / 8 * seconds / (2 * (m - 1)) / FLOAT_BYTES)


def ring_bits(values: float, m: int) -> float:
    """Bits each rank sends in a ring all-reduce of ``values`` float32 values among ``m``."""
    return 2 * (m - 1) / m * values * FLOAT_BYTES * 8


def cell_fields(wan, m: int, rate: float, exchange: str) -> dict:
    """What names a cell in the results: its islands, rate, links, exchange and shaper."""
    return {
        "islands": m,
        "rate_bits_per_s": rate,
        "links_bits_per_s": [link.upload_bits_per_s for link in wan.links],
        "exchange": exchange,
        "shaper": wan.shaper.kind,
        "queue_ms": wan.shaper.queue_ms if wan.shaper.kind == "fifo" else None,
        "mode": wan.mode,
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
    values = ring_values(rate, seconds, m)
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
    sent_bits = ring_bits(values, m)
    return {
        **cell_fields(wan, m, rate, "stepped" if stepped else "allreduce"),
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
        **cell_fields(wan, m, rate, "streams"),
        "flows": flows,
        "bytes": payload,
        "exchange_s": slowest,
        "fraction_of_rate": [payload * 8 / rate / t for t in slowest],
        "samples": summarise_samples(sampler.samples, rate),
        "counters": difference(counters(wan), before),
    }


def gpt_tensor_values(n_layer: int) -> list[int]:
    """Each parameter tensor's values, in registration order, of the trainer's GPT of ``n_layer``
    blocks at issue 44's model's width: a 50,257 x 384 token embedding (77 MB in fp32, tied to the
    head) first; 6 blocks give 30.3M values in 76 tensors."""
    from islands.trainer.core.model import GPTConfig, build_model

    config = GPTConfig(
        block_size=GPT_BLOCK,
        n_layer=n_layer,
        n_head=GPT_HEADS,
        n_embd=GPT_WIDTH,
        vocab_size=GPT_VOCAB,
    )
    return [p.numel() for p in build_model(config, 0, "cpu").parameters()]


def model_calls(layout: str, tensors: list[int]) -> list[float]:
    """The model's values per collective call, in call order: one buffer (``flat``); DDP's buckets as
    PyTorch lays them at its default caps, 1 MiB first then 25 MiB of fp32 values
    (``schedules.buckets.layout_of``: the tensors in reverse, each whole, the embedding in the last);
    or one call per tensor in registration order (``tensors``: a loop over ``model.parameters()``,
    as the runs' DiLoCo)."""
    from islands.scenarios.model import ExchangeSpec
    from islands.schedules.buckets import layout_of

    if layout == "flat":
        return [float(sum(tensors))]
    if layout == "buckets":
        exchange = ExchangeSpec(calls="buckets", tensor_values=tuple(map(float, tensors)))
        return layout_of(exchange, float(sum(tensors)), FLOAT_BYTES).sizes()
    return [float(size) for size in tensors]


def scaled_calls(sizes: list[float], values: int) -> list[int]:
    """``sizes`` scaled to add up to ``values``: each call's edge at the whole value nearest its
    scaled place (the buffer cut as the model's would be, at the cell's bytes)."""
    total = sum(sizes)
    edges = [round(values * place / total) for place in itertools.accumulate(sizes)]
    cut = [end - start for start, end in zip([0, *edges], edges)]
    if min(cut) < 1:
        raise SystemExit(
            f"{values} values are too few to cut into {len(sizes)} calls: raise --seconds"
        )
    return cut


def exchange_order(layouts: list[str], repeats: int) -> list[str]:
    """Each repeat makes every layout's exchange once, rotated a place per repeat (so that each takes
    each place, after the same history, as often as ``repeats`` allows), then the probe."""
    n = len(layouts)
    return [
        name for r in range(repeats) for name in [layouts[(i + r) % n] for i in range(n)] + [PROBE]
    ]


def observe_exchange(wan, control: Path, k: int, j: int, m: int, go_at: float) -> dict:
    """Exchange ``j`` of cell ``k``, started at ``go_at`` (perf_counter seconds: the links idle until
    then): every island's connections and queues sampled while it runs, the counters around it."""
    before = counters(wan)
    sampler = Sampler(wan)
    time.sleep(max(0.0, go_at - time.perf_counter()))
    sampler.start()
    (control / f"go-{k}-{j}").touch()
    for rank in range(m):
        wait_for(control / f"did-{k}-{j}-{rank}")
    ended = time.perf_counter()
    sampler.halt.set()
    sampler.join()
    return {
        "samples": sampler.samples,
        "counters": difference(counters(wan), before),
        "ended": ended,
    }


def added(total: dict, more: dict) -> dict:
    """Counters of two exchanges together (a backlog: the larger)."""
    return {
        key: added(value, more[key])
        if isinstance(value, dict)
        else (
            max(value, more[key])
            if key == "backlog"
            else value + more[key]
            if isinstance(value, int)
            else value
        )
        for key, value in total.items()
    }


def run_calls_cell(wan, control: Path, k: int, m: int, rate: float, args) -> list[dict]:
    """gloo's ring all-reduce of one payload (ring bytes of ``--seconds`` at ``rate``) cut into each
    ``--calls`` layout's calls (the GPT's, ``model_calls``, scaled to the cell's values), the layouts
    interleaved (``exchange_order``), each exchange after ``--idle-s`` idle; and per repeat a probe of
    as many calls as the most, of M values each, whose seconds per call are gloo's fixed cost of a
    call here. A row per layout."""
    from islands.emulation import measure_link

    ring_bytes = rate / 8 * args.seconds
    values = ring_values(rate, args.seconds, m)
    tensors = gpt_tensor_values(args.gpt_layers)
    calls = {name: scaled_calls(model_calls(name, tensors), values) for name in args.calls}
    calls[PROBE] = [m] * max(len(sizes) for sizes in calls.values())
    order = exchange_order(args.calls, args.repeats)
    stream_bits_per_s = measure_link(wan, 0, 1, round(ring_bytes))
    publish(control / f"cell-{k}.json", json.dumps({"calls": calls, "order": order}))
    seen, ended = [], time.perf_counter()
    for j, name in enumerate(order):
        idle_s = 0.0 if name == PROBE else args.idle_s
        seen.append(observe_exchange(wan, control, k, j, m, ended + idle_s))
        ended = seen[-1]["ended"]
    done = [
        json.loads(wait_for(control / f"done-{k}-{rank}.json").read_text()) for rank in range(m)
    ]
    measured = {
        "order": order,
        "slowest": [max(per_rank[j]["exchange_s"] for per_rank in done) for j in range(len(order))],
        "rank0": done[0],
        "seen": seen,
    }
    return [
        layout_row(name, calls, measured, wan, rate, args)
        | {"stream_fraction_of_rate": stream_bits_per_s / rate}
        for name in args.calls
    ]


def layout_row(name: str, calls: dict, measured: dict, wan, rate: float, args) -> dict:
    """One layout's row of a ``--calls`` cell: its exchanges' times (the slowest rank's) and
    fractions of the rate, also net of its calls' fixed cost (its calls x the probe's median seconds
    per call), rank 0's call ends, and its exchanges' samples and counters together."""
    order, slowest, seen = measured["order"], measured["slowest"], measured["seen"]
    m, values = len(wan.links), sum(calls[name])
    sent_bits = ring_bits(values, m)
    call_s = [slowest[j] / len(calls[PROBE]) for j, other in enumerate(order) if other == PROBE]
    mine = [j for j, other in enumerate(order) if other == name]
    times = [slowest[j] for j in mine]
    bytes_s = [t - len(calls[name]) * statistics.median(call_s) for t in times]
    samples = [sample for j in mine for sample in seen[j]["samples"]]
    total = seen[mine[0]]["counters"]
    for j in mine[1:]:
        total = added(total, seen[j]["counters"])
    return {
        **cell_fields(wan, m, rate, "allreduce"),
        "calls": name,
        "call_values": calls[name],
        "gpt_layers": args.gpt_layers,
        "places": [j % (len(args.calls) + 1) for j in mine],  # in its repeat, from 0
        "values": values,
        "exchange_s": times,
        "fraction_of_rate": [sent_bits / rate / t for t in times],
        "probe_call_s": call_s,
        "fraction_of_rate_net_of_calls": [sent_bits / rate / t for t in bytes_s],
        "call_end_s": [measured["rank0"][j]["call_end_s"] for j in mine],
        "samples": summarise_samples(samples, rate),
        "islands_samples": per_island(samples, wan),
        "counters": total,
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
                    if args.calls:
                        cell_rows = run_calls_cell(wan, control, k, m, rate, args)
                    elif flows is None:
                        cell_rows = [
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
                        ]
                    else:
                        cell_rows = [
                            run_stream_cell(
                                wan, control, k, m, rate, flows, args.repeats, args.seconds
                            )
                        ]
                    for row in cell_rows:
                        row["congestion_control"] = args.congestion_control
                        row["fifo_at"] = args.fifo_at
                        row["slow_start_after_idle"] = args.slow_start_after_idle
                        row["seconds"] = args.seconds
                        row["idle_s"] = args.idle_s
                        rows.append(row)
                        write()
                        print(
                            f"M={m} {rate_mbit:g} Mbit/s x{ratio:g} {shaper.mode} flows {flows}"
                            f"{' calls ' + row['calls'] if 'calls' in row else ''}: "
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


def spread(values: list[float]) -> str:
    """A median and its range, to three places."""
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def calls_table(paths: list[str]) -> str:
    """``--calls`` results as one Markdown table: a row per cell (rate, shaper), each layout's achieved
    fraction (median and range over its exchanges), the per-tensor one net of its calls' fixed cost
    (C x the probe's seconds per call), the probe, and each layout's srtt and retransmitted segments."""
    lines = [
        "| GPT blocks | Mbit/s | shaper | flat | buckets (calls) | tensors (calls) | tensors net of "
        "C x probe | probe ms / call | srtt ms: flat / buckets / tensors | egress queue ms | "
        "retrans segs: flat / buckets / tensors |",
        "|" + " --- |" * 11,
    ]
    for path in paths:
        cells: dict[tuple, dict[str, dict]] = {}
        for row in json.loads(Path(path).read_text())["cells"]:
            key = (row["gpt_layers"], row["rate_bits_per_s"], row["shaper"], row["queue_ms"])
            cells.setdefault(key, {})[row["calls"]] = row
        for (layers, rate, shaper, queue_ms), rows in cells.items():
            flat, buckets, tensors = (rows[name] for name in CALL_LAYOUTS)
            srtt = " / ".join(
                f"{rows[name]['samples']['srtt_ms_median']:.1f}" for name in CALL_LAYOUTS
            )
            queue = " / ".join(
                f"{rows[name]['samples']['egress_queue_ms_median']:.1f}" for name in CALL_LAYOUTS
            )
            retrans = " / ".join(
                str(sum(n["nstat"]["TcpRetransSegs"] for n in rows[name]["counters"].values()))
                for name in CALL_LAYOUTS
            )
            lines.append(
                f"| {layers} | {rate / 1e6:g} | "
                f"{'fifo ' + format(queue_ms, 'g') + ' ms' if shaper == 'fifo' else 'fair'} | "
                f"{spread(flat['fraction_of_rate'])} | {spread(buckets['fraction_of_rate'])} "
                f"({len(buckets['call_values'])}) | {spread(tensors['fraction_of_rate'])} "
                f"({len(tensors['call_values'])}) | "
                f"{spread(tensors['fraction_of_rate_net_of_calls'])} | "
                f"{statistics.median(flat['probe_call_s']) * 1e3:.2f} | {srtt} | {queue} | {retrans} |"
            )
    return "\n".join(lines)


# the tops of the classes of calls by their ring bytes in seconds at the flat exchange's rate
CALL_CLASSES_S = (0.001, 0.01, 0.1)


def call_excess_table(paths: list[str]) -> str:
    """Where the per-tensor exchange's extra time goes: each call's seconds less its ring bytes at
    the flat exchange's achieved rate in the same cell (median over every repeat's calls of a size
    class, in ms), by the calls' bytes in seconds of that rate; beside it, the probe's tiny calls."""
    names = ["under 1 ms", "1-10 ms", "10-100 ms", "over 100 ms"]
    lines = [
        "| GPT blocks | Mbit/s | shaper | probe ms / call | "
        + " | ".join(f"calls of {name}: count, excess ms" for name in names)
        + " |",
        "|" + " --- |" * (4 + len(names)),
    ]
    for path in paths:
        rows = json.loads(Path(path).read_text())["cells"]
        flats = {
            (r["gpt_layers"], r["rate_bits_per_s"], r["queue_ms"]): r
            for r in rows
            if r["calls"] == "flat"
        }
        for row in rows:
            if row["calls"] != "tensors":
                continue
            flat = flats[(row["gpt_layers"], row["rate_bits_per_s"], row["queue_ms"])]
            bits_per_s = statistics.median(flat["fraction_of_rate"]) * row["rate_bits_per_s"]
            m = row["islands"]
            ideal = [ring_bits(v, m) / bits_per_s for v in row["call_values"]]
            excess: list[list[float]] = [[] for _ in names]
            for ends in row["call_end_s"]:
                for ideal_s, start, end in zip(ideal, [0.0, *ends[:-1]], ends):
                    place = sum(ideal_s >= top for top in CALL_CLASSES_S)
                    excess[place].append((end - start - ideal_s) * 1e3)
            shaper = f"fifo {row['queue_ms']:g} ms" if row["shaper"] == "fifo" else "fair"
            cells = " | ".join(
                f"{len(e) // len(row['call_end_s'])}, {statistics.median(e):.2f}" if e else "-"
                for e in excess
            )
            lines.append(
                f"| {row['gpt_layers']} | {row['rate_bits_per_s'] / 1e6:g} | {shaper} | "
                f"{statistics.median(row['probe_call_s']) * 1e3:.2f} | {cells} |"
            )
    return "\n".join(lines)


def largest_call_table(paths: list[str]) -> str:
    """The rate of each layout's largest call alone (the embedding's: its ring bytes over its own
    seconds, from rank 0's call ends), beside the whole exchange's, median and range per cell."""
    lines = [
        "| TCP | GPT blocks | Mbit/s | shaper | layout | largest call: share of the bytes | "
        "its own rate / link | the exchange's / link |",
        "|" + " --- |" * 8,
    ]
    for path in paths:
        for row in json.loads(Path(path).read_text())["cells"]:
            sizes, m = row["call_values"], row["islands"]
            big = max(range(len(sizes)), key=sizes.__getitem__)
            big_bits = ring_bits(sizes[big], m)
            own = [
                big_bits / row["rate_bits_per_s"] / (ends[big] - (ends[big - 1] if big else 0.0))
                for ends in row["call_end_s"]
            ]
            shaper = f"fifo {row['queue_ms']:g} ms" if row["shaper"] == "fifo" else "fair"
            lines.append(
                f"| {row['congestion_control']} | {row['gpt_layers']} | "
                f"{row['rate_bits_per_s'] / 1e6:g} | {shaper} | {row['calls']} | "
                f"{sizes[big] / sum(sizes):.2f} | {spread(own)} | {spread(row['fraction_of_rate'])} |"
            )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if argv[:1] == ["table"]:
        print(table(argv[1:]))
        return 0
    if argv[:1] == ["calls-table"]:
        tables = (calls_table, call_excess_table, largest_call_table)
        print("\n\n".join(table_of(argv[1:]) for table_of in tables))
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
        "--calls",
        choices=CALL_LAYOUTS,
        nargs="+",
        help="with --exchange allreduce: cut the payload into the collective calls of each layout, "
        "the trainer's GPT at issue 44's width (--gpt-layers) scaled to the cell's bytes: flat (one "
        "call), buckets (PyTorch DDP's, 1 MiB then 25 MiB, schedules/buckets.py) or tensors (one "
        "call per parameter tensor); the layouts' exchanges interleaved, a row per layout",
    )
    parser.add_argument(
        "--gpt-layers", type=int, default=6, help="--calls: the GPT's blocks (6: 30.3M values)"
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
    if args.calls and args.exchange != "allreduce":
        parser.error("--calls cuts gloo's all-reduce: use it with --exchange allreduce")
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
