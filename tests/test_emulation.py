"""The emulated WAN: in-process shaper arithmetic everywhere; namespaces, htb and cleanup as root.

The kernel tests build real namespaces with prefixes unique to this test process, keep rates at
100-200 Mbit/s and transfers at a few MB (the machine is shared), and check after every test that
nothing they created is left.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from islands.errors import UserError
from islands.scenarios import load
from islands.emulation import net
from islands.emulation import state
from islands.emulation import (EmulatedWAN, InProcessLatency, InProcessShaper, LinkSpec, available,
                                       links_from_workers, measure_link, open_wan)
from islands.emulation.links import check_links
from islands.emulation.shaper import pacer_config, pacer_from_config

MBIT = 1e6
KERNEL_OK, KERNEL_REASON = available()
needs_kernel = pytest.mark.skipif(not KERNEL_OK, reason=f"kernel WAN emulation unavailable: {KERNEL_REASON}")


class FakeClock:
    """A clock that moves only when the code under test sleeps or the test advances it."""

    def __init__(self) -> None:
        self.now_s = 0.0
        self.slept_s: list[float] = []

    def __call__(self) -> float:
        return self.now_s

    def sleep(self, seconds: float) -> None:
        self.slept_s.append(seconds)
        self.now_s += seconds


def shaper(*links: LinkSpec) -> tuple[InProcessShaper, FakeClock]:
    clock = FakeClock()
    return InProcessShaper(links, clock=clock, sleep=clock.sleep), clock


# --- in-process shaper and link specs (no root needed) ---------------------------------------

def test_upload_and_download_are_paced_separately_and_the_slower_decides():
    wan, _ = shaper(LinkSpec(0, upload_bits_per_s=8e6, download_bits_per_s=16e6))
    assert wan.book(0, sent_bytes=1_000_000, received_bytes=0) == pytest.approx(1.0)
    wan2, _ = shaper(LinkSpec(0, upload_bits_per_s=8e6, download_bits_per_s=16e6))
    assert wan2.book(0, sent_bytes=1_000_000, received_bytes=4_000_000) == pytest.approx(2.0)


def test_a_busy_link_queues_and_an_idle_link_earns_no_credit():
    wan, clock = shaper(LinkSpec(0, 8e6, 8e6))
    assert wan.book(0, 1_000_000, 0) == pytest.approx(1.0)
    clock.now_s = 0.5
    assert wan.book(0, 1_000_000, 0) == pytest.approx(2.0)  # waits for the first until t=1
    clock.now_s = 5.0
    assert wan.book(0, 1_000_000, 0) == pytest.approx(6.0)  # idle 3 s, still 1 s for 1 MB


def test_latency_comes_before_the_bytes():
    wan, _ = shaper(LinkSpec(0, 8e6, 8e6, latency_s=0.05))
    assert wan.book(0, 1_000_000, 1_000_000, latency_s=0.1) == pytest.approx(1.1)


def test_paced_by_slows_the_transfer_to_the_slowest_peer_link():
    wan, _ = shaper(LinkSpec(0, 8e6, 8e6), LinkSpec(1, 16e6, 4e6))
    assert wan.book(0, 1_000_000, 1_000_000, paced_by=[0, 1]) == pytest.approx(2.0)


def test_transfer_sleeps_only_what_the_collective_did_not_already_take():
    wan, clock = shaper(LinkSpec(0, 8e6, 8e6))
    with wan.transfer(0, sent_bytes=1_000_000, received_bytes=500_000):
        clock.now_s += 0.3  # the real collective over loopback
    assert clock.slept_s == [pytest.approx(0.7)]
    assert wan.counters(0) == {"tx_bytes": 1_000_000, "rx_bytes": 500_000}


@pytest.mark.parametrize(("latency_mode", "expected"),
                         [("in-process", ["sleep 0.2", "collective"]), ("netem", ["collective"])])
def test_kernel_pacer_sleeps_the_latency_before_the_collective_only_without_netem(latency_mode, expected):
    links = [LinkSpec(0, 1e8, 1e8, latency_s=0.03), LinkSpec(1, 1e8, 1e8, latency_s=0.07)]
    received = pacer_from_config(pacer_config(links, "kernel-htb", latency_mode))
    assert isinstance(received, InProcessLatency)
    events: list[str] = []
    pacer = InProcessLatency(links, sleep_latency=received.sleep_latency,
                             sleep=lambda seconds: events.append(f"sleep {seconds}"))
    with pacer.transfer(1, sent_bytes=10**9, received_bytes=10**9, latency_s=0.2):
        events.append("collective")
    assert events == expected  # the kernel paces the bytes: no sleep for them


def test_in_process_pacer_travels_as_config():
    links = [LinkSpec(0, 8e6, 16e6, latency_s=0.03)]
    pacer = pacer_from_config(InProcessShaper(links).pacer_config())
    assert isinstance(pacer, InProcessShaper) and pacer.links == tuple(links)


def test_in_process_fallback_is_labelled_and_uses_loopback():
    wan = open_wan([LinkSpec(0, 1e8, 1e8)], kernel=False)
    assert (wan.mode, wan.latency_mode) == ("in-process", "in-process")
    assert wan.address(0) == "127.0.0.1" and wan.environment(0) == {"GLOO_SOCKET_IFNAME": "lo"}
    assert "in-process" in wan.label


def test_link_specs_are_checked():
    with pytest.raises(UserError, match="positive"):
        LinkSpec(0, 0.0, 1e8)
    with pytest.raises(UserError, match="latency_s"):
        LinkSpec(0, 1e8, 1e8, latency_s=-0.1)
    with pytest.raises(UserError, match="position 1 has island 2"):
        check_links([LinkSpec(0, 1e8, 1e8), LinkSpec(2, 1e8, 1e8)])


def test_links_from_workers_match_the_simulated_workers():
    workers = load("worked-example").workers()
    links = links_from_workers(workers)
    assert [link.island for link in links] == [w.rank for w in workers]
    assert links[0].upload_bits_per_s == workers[0].upload_bytes_per_s * 8 == 1e9


def test_the_shaper_serves_short_packets_first_and_lets_either_class_use_the_whole_rate():
    commands = net.shaper_commands("wan0", 10 * MBIT, ["root"])
    assert commands[0] == ["qdisc", "add", "dev", "wan0", "root", "handle", "2:", "htb", "default", "20"]
    rates = {c[c.index("classid") + 1]: (c[c.index("rate") + 1], c[c.index("ceil") + 1], c[-1])
             for c in commands if c[0] == "class"}
    bursts = {c[c.index("burst") + 1] for c in commands if c[0] == "class"}
    assert bursts == {"1514"}  # the 64 KiB bucket less the GSO super-packet htb lets through, at least a frame
    assert {c[c.index("burst") + 1] for c in net.shaper_commands("wan0", 1000 * MBIT, ["root"])
            if c[0] == "class"} == {str(500_000 - 65536)}
    assert rates == {"2:1": ("10000000bit", "10000000bit", "1514"),
                     "2:10": ("1000000bit", "10000000bit", "0"),  # ACKs: 10% guaranteed, prio 0
                     "2:20": ("9000000bit", "10000000bit", "1")}
    assert commands[5][-1] == str(65536 + 4 * 65536)  # the bulk queue as before: burst + 4 flows' TSQ
    flt = commands[-1]
    assert flt[flt.index("u16") + 1:flt.index("u16") + 4] == ["0x0000", "0xff00", "at"]  # total length < 256
    assert flt[-1] == "2:10"
    behind_netem = net.shaper_commands("port0", 10 * MBIT, ["parent", "1:"])
    assert behind_netem[0][4:8] == ["parent", "1:", "handle", "2:"]


def test_the_burst_covers_four_ms_and_at_least_one_gso_packet():
    assert net.burst_bytes(100 * MBIT) == 65536  # 4 ms would be 50 000 B
    assert net.burst_bytes(1000 * MBIT) == 500_000
    assert net.netem_limit_packets(1000 * MBIT, 0.05) == 8257  # 2 x 125 MB/s x 50 ms / 1514 B


def test_the_bulk_queue_holds_the_burst_and_a_round_trip_of_200_ms_or_four_flows_small_queues():
    assert net.queue_limit_bytes(10 * MBIT) == 65536 + 4 * 65536  # 200 ms would be 250 000 B
    assert net.queue_limit_bytes(100 * MBIT) == 65536 + 2_500_000  # 200 ms of 12.5 MB/s
    assert net.queue_limit_bytes(1000 * MBIT) == 500_000 + 25_000_000  # 200 ms of 125 MB/s


def test_owner_liveness_uses_pid_and_start_time():
    me = {"pid": os.getpid(), "start_ticks": state.process_start_ticks(os.getpid())}
    assert state.owner_alive(me)
    assert not state.owner_alive({**me, "start_ticks": me["start_ticks"] + 1})  # a recycled pid


def test_bad_prefix_is_a_user_error():
    with pytest.raises(UserError, match="prefix"):
        EmulatedWAN([LinkSpec(0, 1e8, 1e8)], prefix="has-dash")


# --- kernel emulation (root, iproute2) -------------------------------------------------------

def unique_prefix(tag: str) -> str:
    return f"t{os.getpid()}{tag}"


def namespaces_of(prefix: str) -> list[str]:
    return sorted(ns for ns in net.list_namespaces() if state.is_own_namespace(prefix, ns))


@pytest.fixture
def no_leftovers():
    """Fail if a test leaves namespaces or state files behind, or puts an interface in the host's namespace."""
    made: list[str] = []
    yield made.append
    for prefix in made:
        assert namespaces_of(prefix) == []
        assert not state.state_path(prefix).exists()
    host_interfaces = re.findall(r"^\d+: ([^:@]+)", net.run(["ip", "-o", "link", "show"]), re.MULTILINE)
    assert not [name for name in host_interfaces if re.fullmatch(rf"{net.BRIDGE}|port\d+|wan\d+", name)]


@needs_kernel
def test_tcp_transfer_achieves_the_shaped_rate(no_leftovers):
    links = [LinkSpec(0, 200 * MBIT, 200 * MBIT), LinkSpec(1, 200 * MBIT, 150 * MBIT),
             LinkSpec(2, 200 * MBIT, 100 * MBIT)]
    no_leftovers(prefix := unique_prefix("rate"))
    with EmulatedWAN(links, prefix) as wan:
        sent_before = wan.counters(0)["tx_bytes"]
        to_150 = measure_link(wan, 0, 1, 4_000_000)  # island 1's download is the bottleneck
        to_100 = measure_link(wan, 0, 2, 3_000_000)
        sent_bytes = wan.counters(0)["tx_bytes"] - sent_before
    assert 0.90 <= to_150 / (150 * MBIT) <= 1.02
    assert 0.90 <= to_100 / (100 * MBIT) <= 1.02
    assert sent_bytes >= 7_000_000


@needs_kernel
def test_an_upload_keeps_its_rate_while_faster_islands_fill_its_downlink(no_leftovers):
    """Issue 29: with one FIFO per direction the upload's ACKs queued behind the download (a 320 KB
    queue is 260 ms at 10 Mbit/s) and the upload went window-limited; ACKs first, it keeps its rate."""
    links = [LinkSpec(0, 10 * MBIT, 10 * MBIT), LinkSpec(1, 100 * MBIT, 100 * MBIT),
             LinkSpec(2, 100 * MBIT, 100 * MBIT)]
    no_leftovers(prefix := unique_prefix("acks"))
    with EmulatedWAN(links, prefix) as wan:
        with ThreadPoolExecutor(1) as pool:
            downlink_filled = pool.submit(measure_link, wan, 2, 0, 6_000_000)  # 4.8 s at 10 Mbit/s
            time.sleep(1.0)  # the download's queue is full
            upload_bits_per_s = measure_link(wan, 0, 1, 2_500_000)  # 2 s at 10 Mbit/s
            download_bits_per_s = downlink_filled.result()
    assert 0.90 <= upload_bits_per_s / (10 * MBIT) <= 1.02
    assert 0.90 <= download_bits_per_s / (10 * MBIT) <= 1.02


def downlink_drops(wan: EmulatedWAN, island: int) -> int:
    """Packets dropped by the qdiscs of ``island``'s downlink (its bridge port in the core)."""
    shown = subprocess.run(["tc", "-n", state.core_namespace(wan.prefix), "-s", "-j", "qdisc", "show", "dev",
                            net.bridge_port(island)], capture_output=True, text=True, check=True).stdout
    return sum(qdisc.get("drops", 0) for qdisc in json.loads(shown))


@needs_kernel
def test_two_faster_islands_filling_a_slower_downlink_lose_nothing(no_leftovers):
    """Issue 29: a downlink queue of 20 ms (52 ms with its floor at 50 Mbit/s) overflowed when two
    200 Mbit/s islands sent 3 MB each into a 50 Mbit/s one (172 packets dropped in one try); a round
    trip's worth (200 ms) holds what their windows put in it."""
    links = [LinkSpec(0, 200 * MBIT, 200 * MBIT), LinkSpec(1, 50 * MBIT, 50 * MBIT),
             LinkSpec(2, 200 * MBIT, 200 * MBIT)]
    no_leftovers(prefix := unique_prefix("deep"))
    with EmulatedWAN(links, prefix) as wan:
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda sender: measure_link(wan, sender, 1, 3_000_000), (0, 2)))
        assert downlink_drops(wan, 1) == 0


GLOO_WORKER = textwrap.dedent("""
    import sys, time, torch, torch.distributed as dist
    rank, world, payload_bytes = map(int, sys.argv[1:])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    tensor = torch.full((payload_bytes // 4,), float(rank + 1))
    dist.barrier()
    start = time.perf_counter()
    dist.all_reduce(tensor)
    print(time.perf_counter() - start, tensor[0].item(), flush=True)
    dist.destroy_process_group()
""")


@needs_kernel
def test_gloo_all_reduce_crosses_the_shaped_interfaces_not_loopback(no_leftovers):
    pytest.importorskip("torch.distributed")
    world, payload_bytes, rate_bits_per_s = 2, 4_000_000, 200 * MBIT
    no_leftovers(prefix := unique_prefix("gloo"))
    with EmulatedWAN([LinkSpec(i, rate_bits_per_s, rate_bits_per_s) for i in range(world)], prefix) as wan:
        before = [(wan.counters(i), wan.loopback_counters(i)) for i in range(world)]
        workers = [subprocess.Popen(
            wan.command_prefix(i) + [sys.executable, "-c", GLOO_WORKER, str(i), str(world), str(payload_bytes)],
            env={**os.environ, **wan.environment(i), "MASTER_ADDR": wan.address(0), "MASTER_PORT": "29500"},
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) for i in range(world)]
        outputs = [worker.communicate(timeout=30)[0].split() for worker in workers]
        after = [(wan.counters(i), wan.loopback_counters(i)) for i in range(world)]
    ring_bytes = 2 * (world - 1) / world * payload_bytes
    for (wan_before, lo_before), (wan_after, lo_after), (elapsed_s, value) in zip(before, after, outputs):
        assert float(value) == 3.0  # 1 + 2: the all-reduce really ran
        assert wan_after["tx_bytes"] - wan_before["tx_bytes"] >= ring_bytes
        assert wan_after["rx_bytes"] - wan_before["rx_bytes"] >= ring_bytes
        assert lo_after["tx_bytes"] - lo_before["tx_bytes"] < 0.01 * payload_bytes  # only rank 0's own store
        assert float(elapsed_s) >= 0.95 * ring_bytes * 8 / rate_bits_per_s  # shaped: loopback would be ~10x faster


@needs_kernel
def test_exception_removes_everything_and_ends_stray_workers(no_leftovers):
    no_leftovers(prefix := unique_prefix("exc"))
    with pytest.raises(RuntimeError, match="worker 0 crashed"):
        with EmulatedWAN([LinkSpec(0, 1e8, 1e8), LinkSpec(1, 1e8, 1e8)], prefix) as wan:
            survivor = subprocess.Popen(wan.command_prefix(1) + ["sleep", "60"])
            crash = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
            crashed = subprocess.run(wan.command_prefix(0) + [sys.executable, "-c", crash])
            assert len(namespaces_of(prefix)) == 3
            raise RuntimeError(f"worker 0 crashed with {crashed.returncode}")
    assert survivor.wait(timeout=5) == -signal.SIGTERM


@needs_kernel
def test_links_are_built_as_specified_and_removed_on_normal_exit(no_leftovers):
    no_leftovers(prefix := unique_prefix("ok"))
    with EmulatedWAN([LinkSpec(0, upload_bits_per_s=120 * MBIT, download_bits_per_s=80 * MBIT)], prefix) as wan:
        assert namespaces_of(prefix) == [f"{prefix}-core", f"{prefix}-island0"]
        upload = net.run(["tc", "-n", wan.namespace(0), "qdisc", "show", "dev", wan.interface(0)])
        download = net.run(["tc", "-n", f"{prefix}-core", "qdisc", "show", "dev", "port0"])
        for namespace, device, rate in ((wan.namespace(0), wan.interface(0), "120Mbit"),
                                        (f"{prefix}-core", "port0", "80Mbit")):
            classes = net.run(["tc", "-n", namespace, "class", "show", "dev", device])
            assert f"class htb 2:1 root rate {rate} ceil {rate}" in classes
            assert "class htb 2:10 parent 2:1 leaf 10: prio 0" in classes  # ACKs first
            assert "class htb 2:20 parent 2:1 leaf 20: prio 1" in classes
            filters = net.run(["tc", "-n", namespace, "filter", "show", "dev", device])
            assert "flowid 2:10" in filters and "match 00000000/ff000000 at 0" not in filters
        limit = net.run(["ip", "netns", "exec", wan.namespace(0), "sysctl", "-n", "net.ipv4.tcp_limit_output_bytes"])
        assert int(limit) == net.TSQ_LIMIT_BYTES == 65536
        assert f"inet {wan.address(0)}/24" in net.run(["ip", "-n", wan.namespace(0), "addr", "show", "dev", "wan0"])
        assert "default" not in net.run(["ip", "-n", wan.namespace(0), "route", "show"])


# Ctrl+C as at a terminal: a suite started in the background (no job control) starts its children
# with SIGINT ignored, and Python then raises no KeyboardInterrupt
OWNER = textwrap.dedent("""
    import signal, subprocess, sys, time
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from islands.emulation import EmulatedWAN, LinkSpec
    with EmulatedWAN([LinkSpec(0, 1e8, 1e8), LinkSpec(1, 1e8, 1e8)], sys.argv[1]) as wan:
        worker = subprocess.Popen(wan.command_prefix(1) + ["sleep", "60"])
        print(worker.pid, flush=True)
        time.sleep(60)
""")


def start_owner(prefix: str) -> tuple[subprocess.Popen, int]:
    """A process that holds an emulated WAN with one worker sleeping in island 1; and that worker's pid."""
    owner = subprocess.Popen([sys.executable, "-c", OWNER, prefix], stdout=subprocess.PIPE, text=True)
    worker_pid = int(owner.stdout.readline())
    assert len(namespaces_of(prefix)) == 3
    return owner, worker_pid


def ended(pid: int) -> bool:
    """Gone, or a zombie waiting to be reaped."""
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@needs_kernel
def test_a_live_owner_keeps_its_prefix(no_leftovers):
    no_leftovers(prefix := unique_prefix("dup"))
    owner, _ = start_owner(prefix)
    with pytest.raises(UserError, match=f"in use by pid {owner.pid}"):
        EmulatedWAN([LinkSpec(0, 1e8, 1e8)], prefix).__enter__()
    assert len(namespaces_of(prefix)) == 3
    owner.send_signal(signal.SIGINT)
    owner.wait(timeout=10)


@needs_kernel
@pytest.mark.parametrize(("signum", "exit_code"),
                         [(signal.SIGINT, -signal.SIGINT), (signal.SIGTERM, 128 + signal.SIGTERM)])
def test_interrupted_owner_cleans_up(no_leftovers, signum, exit_code):
    no_leftovers(prefix := unique_prefix(f"s{int(signum)}"))
    owner, worker_pid = start_owner(prefix)
    owner.send_signal(signum)
    assert owner.wait(timeout=10) == exit_code  # SIGTERM: our handler's SystemExit, not death by signal
    assert namespaces_of(prefix) == []
    assert ended(worker_pid)


@needs_kernel
def test_leftovers_of_a_killed_owner_are_removed_by_the_next_start(no_leftovers):
    no_leftovers(prefix := unique_prefix("kill"))
    owner, worker_pid = start_owner(prefix)
    owner.kill()
    owner.wait(timeout=10)
    assert len(namespaces_of(prefix)) == 3  # SIGKILL: nothing could clean up
    assert not ended(worker_pid)
    with EmulatedWAN([LinkSpec(0, 1e8, 1e8)], prefix) as wan:
        assert wan.removed_leftovers == [f"{prefix}-core", f"{prefix}-island0", f"{prefix}-island1"]
        assert namespaces_of(prefix) == [f"{prefix}-core", f"{prefix}-island0"]
    assert ended(worker_pid)
