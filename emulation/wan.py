"""An emulated WAN: each island in its own network namespace, its access link shaped by the kernel.

    from islands.emulation import LinkSpec, open_wan

    links = [LinkSpec(0, 200e6, 200e6, 0.02), LinkSpec(1, 100e6, 100e6, 0.05)]
    with open_wan(links) as wan:         # EmulatedWAN as root, else InProcessShaper (see wan.label)
        for i in range(len(links)):      # island i's processes run inside its namespace
            env = {**os.environ, **wan.environment(i), "MASTER_ADDR": wan.address(0)}
            argv = [sys.executable, "train.py", "--pacer", wan.pacer_config()]
            subprocess.Popen(wan.command_prefix(i) + argv, env=env)
        ...
        wan.counters(i)                  # {"tx_bytes", "rx_bytes"} of island i's own interface

    # in train.py, island i:
    pacer = pacer_from_config(args.pacer)
    with pacer.transfer(i, sent_bytes, received_bytes, latency_s=alpha, paced_by=ring):
        dist.all_reduce(tensor)

How (see ``net``): a bridge in a dedicated core namespace, one namespace per island joined
to it by a veth pair, an htb shaper (ACKs served first) on the island end (upload) and on the bridge
end (download), netem delay in front of each shaper where the kernel has netem; otherwise
``latency_mode`` is "in-process" and ``transfer`` sleeps the collective's latency before it runs.
Everything is removed on exit, on an exception, on Ctrl+C, SIGTERM or SIGHUP; after a SIGKILL the
next start with the same prefix (or ``python -m islands.emulation cleanup``) removes what was left.
"""

from __future__ import annotations

import argparse
import atexit
import functools
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from types import FrameType
from typing import Any

from islands.errors import UserError
from islands.numbers import is_finite_number
from islands.units import MS_PER_S

from . import net, state
from .link_specs import (
    FAIR_MODE,
    FIFO,
    LinkSpec,
    Shaper,
    check_island,
    check_links,
    links_from_workers,
)
from .shaper import InProcessLatency, InProcessShaper, pacer_config, pacer_from_config

__all__ = [
    "EmulatedWAN",
    "InProcessLatency",
    "InProcessShaper",
    "LinkSpec",
    "Shaper",
    "available",
    "cleanup_leftovers",
    "links_from_workers",
    "netem_available",
    "open_wan",
    "pacer_from_config",
]

cleanup_leftovers = state.cleanup_leftovers
CLEANUP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# The probe runs in an unnamed namespace (unshare --net), which vanishes with its shell: no leftovers.
PROBE_SCRIPT = (
    "ip link add name probe0 type veth peer name probe1 && ip link set dev probe0 up && "
    "tc qdisc add dev probe0 root handle 2: htb default 20 && "
    "tc filter add dev probe0 parent 2: protocol ip prio 1 u32 match ip protocol 6 0xff flowid 2:10 || exit 1; "
    "tc qdisc add dev probe1 root netem delay 1ms 2>/dev/null && echo netem || echo no-netem"
)


@functools.cache
def _probe() -> tuple[bool, str, bool]:
    """(kernel shaping works, why not, netem works); probed once per process."""
    if sys.platform != "linux":
        return False, f"network namespaces need Linux, this is {sys.platform}", False
    if os.geteuid() != 0:
        return False, "not root (namespaces and qdiscs need root)", False
    missing = [tool for tool in ("ip", "tc", "unshare", "sysctl") if shutil.which(tool) is None]
    if missing:
        return False, f"missing {', '.join(missing)} (iproute2, util-linux, procps)", False
    done = subprocess.run(
        ["unshare", "--net", "sh", "-c", PROBE_SCRIPT], capture_output=True, text=True
    )
    if done.returncode != 0:
        detail = (done.stderr.strip().splitlines() or ["no detail"])[-1]
        return (
            False,
            f"veth pairs, htb or u32 filters do not work in a new namespace: {detail}",
            False,
        )
    return True, "", done.stdout.strip() == "netem"


def available() -> tuple[bool, str]:
    """Whether the kernel can emulate the WAN here, and the reason when it cannot."""
    ok, reason, _ = _probe()
    return ok, reason


def netem_available() -> bool:
    return _probe()[2]


def open_wan(
    links: Sequence[LinkSpec],
    prefix: str = "islands",
    kernel: bool | None = None,
    shaper: Shaper = Shaper(),
) -> EmulatedWAN | InProcessShaper:
    """The kernel emulation where available (``kernel=None``) or required (True), else in-process;
    ``shaper`` says how the kernel's links queue (the in-process shaper has no queue)."""
    ok, reason = available()
    if kernel is False:
        return InProcessShaper(links, reason="in-process shaping requested")
    if ok:
        return EmulatedWAN(links, prefix, shaper)
    if kernel:
        raise UserError(f"kernel WAN emulation is not available: {reason}")
    return InProcessShaper(links, reason=reason)


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


class EmulatedWAN:
    """Kernel-shaped links between per-island network namespaces; a context manager."""

    # The fair shaper's mode; an instance's is its shaper's (``Shaper.mode``). A calibration saved
    # under another mode is refused (validation/calibration_file.py, islands validate).
    mode = FAIR_MODE

    def __init__(
        self, links: Sequence[LinkSpec], prefix: str = "islands", shaper: Shaper = Shaper()
    ):
        state.check_prefix(prefix)
        self.links = check_links(links)
        self.prefix = prefix
        self.shaper = shaper
        self.mode = shaper.mode
        self.latency_mode = "netem" if netem_available() else "in-process"
        self._pacer = InProcessLatency(self.links, sleep_latency=self.latency_mode == "in-process")
        self.removed_leftovers: list[str] = []
        self._claimed = False
        self._replaced_handlers: dict[int, Callable[[int, FrameType | None], Any] | int | None] = {}

    # --- what the trainer and validator use -------------------------------------------------
    @property
    def label(self) -> str:
        latency = (
            "netem delay"
            if self.latency_mode == "netem"
            else "in-process sleeps (this kernel has no netem)"
        )
        if self.shaper.kind == FIFO:
            qdisc, queues = "tbf", f"one FIFO of {self.shaper.queue_ms:g} ms per egress"
        else:
            qdisc, queues = "htb", "a queue per peer"
        return (
            f"kernel {qdisc} shaping on veth pairs between network namespaces, {queues}, "
            f"TCP {self.shaper.tcp}, latency by {latency}"
        )

    def namespace(self, island: int) -> str:
        return state.island_namespace(self.prefix, self._index(island))

    def address(self, island: int) -> str:
        """The island's address on the shaped interface: bind and listen here (MASTER_ADDR)."""
        return net.address(self._index(island))

    def interface(self, island: int) -> str:
        """The shaped interface inside the island's namespace (GLOO_SOCKET_IFNAME)."""
        return net.wan_interface(self._index(island))

    def environment(self, island: int) -> dict[str, str]:
        """Variables that make gloo use the shaped interface."""
        return {"GLOO_SOCKET_IFNAME": self.interface(island)}

    def command_prefix(self, island: int) -> list[str]:
        """Prepend to a command to run it inside the island's namespace."""
        return ["ip", "netns", "exec", self.namespace(island)]

    def latency_s(self, island: int) -> float:
        return self.links[self._index(island)].latency_s

    def counters(self, island: int) -> dict[str, int]:
        """Link-layer bytes the island's shaped interface sent and received, from the kernel."""
        return net.interface_counters(self.namespace(island), self.interface(island))

    def loopback_counters(self, island: int) -> dict[str, int]:
        return net.interface_counters(self.namespace(island), "lo")

    def pacer_config(self) -> str:
        """Hand this to worker processes: ``pacer_from_config(text).transfer(...)`` wraps their collectives."""
        return pacer_config(self.links, self.mode, self.latency_mode)

    def transfer(
        self,
        island: int,
        sent_bytes: int,
        received_bytes: int,
        latency_s: float = 0.0,
        paced_by: Sequence[int] = (),
    ) -> AbstractContextManager[None]:
        """Wrap one collective. The kernel paces the bytes; the latency is slept here unless netem adds it."""
        return self._pacer.transfer(island, sent_bytes, received_bytes, latency_s, paced_by)

    # --- life cycle -------------------------------------------------------------------------
    def __enter__(self) -> EmulatedWAN:
        ok, reason = available()
        if not ok:
            raise UserError(f"kernel WAN emulation is not available: {reason}")
        net.check_tcp_available(self.shaper.tcp)
        with state.locked():
            self.removed_leftovers = state.clean_if_abandoned(self.prefix)
            state.claim(self.prefix, self._namespaces())
            self._claimed = True
        atexit.register(self.close)
        self._install_signal_handlers()
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Delete every namespace (with its interfaces and qdiscs); Ctrl+C waits until this is done."""
        if not self._claimed:
            return
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, CLEANUP_SIGNALS)
        try:
            with state.locked():
                state.remove_all(self.prefix)
            self._claimed = False
            atexit.unregister(self.close)
            self._restore_signal_handlers()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    def _build(self) -> None:
        core = state.core_namespace(self.prefix)
        net.add_namespace(core)
        net.add_bridge(core)
        for index in range(len(self.links)):
            island = self.namespace(index)
            net.add_namespace(island)
            net.attach_island(core, island, index)
            net.set_congestion_control(island, index, self.shaper.tcp)
            self._shape(index)

    def reshape(self, shaper: Shaper) -> None:
        """Replace every link's shaper, and the islands' TCP where it changes, while the namespaces and
        the processes inside stay (a benchmark compares shapers on the same connections:
        benchmarks/fifo_exchange.py); a connection open already keeps its congestion control."""
        if shaper.tcp != self.shaper.tcp:
            net.check_tcp_available(shaper.tcp)
            for index in range(len(self.links)):
                net.set_congestion_control(self.namespace(index), index, shaper.tcp)
        self.shaper, self.mode = shaper, shaper.mode
        for index in range(len(self.links)):
            net.unshape(self.namespace(index), net.wan_interface(index))
            net.unshape(state.core_namespace(self.prefix), net.bridge_port(index))
            self._shape(index)

    def _shape(self, index: int) -> None:
        link, core = self.links[index], state.core_namespace(self.prefix)
        peers = [net.address(other) for other in range(len(self.links)) if other != index]
        fifo_queue_s = self.shaper.queue_ms / MS_PER_S if self.shaper.kind == FIFO else None
        if is_finite_number(
            link.upload_bits_per_s
        ):  # an infinite rate: a non-blocking link, unshaped
            net.shape(
                self.namespace(index),
                net.wan_interface(index),
                link.upload_bits_per_s,
                self._netem_delay_s(link),
                peers,
                match="dst",
                fifo_queue_s=fifo_queue_s,
            )
        if self._shapes_download(index):
            net.shape(
                core,
                net.bridge_port(index),
                link.download_bits_per_s,
                self._netem_delay_s(link),
                peers,
                match="src",
                fifo_queue_s=fifo_queue_s,
            )

    def _shapes_download(self, index: int) -> bool:
        """The fair shaper shapes every finite download. The fifo stands for ``tc tbf`` on each
        node's egress: what enters an island is paced by its senders' egress, so its download gets a
        FIFO of its own only where a faster island could send more than it takes (an ISP's
        downstream shaper); on equal links only the egress queues, as in such runs."""
        download = self.links[index].download_bits_per_s
        if not is_finite_number(download):
            return False
        if self.shaper.kind != FIFO:
            return True
        return any(
            other.upload_bits_per_s > download for other in self.links if other.island != index
        )

    def _netem_delay_s(self, link: LinkSpec) -> float | None:
        """One-way latency on each direction of the link, so a hop pays sender's + receiver's latency."""
        return link.latency_s if self.latency_mode == "netem" and link.latency_s > 0 else None

    def _namespaces(self) -> list[str]:
        return [state.core_namespace(self.prefix)] + [
            self.namespace(i) for i in range(len(self.links))
        ]

    def _index(self, island: int) -> int:
        return check_island(self.links, island)

    def _install_signal_handlers(self) -> None:
        """Turn SIGTERM and SIGHUP into SystemExit, so that the with-block unwinds and cleans up."""
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(signum) == signal.SIG_DFL:
                self._replaced_handlers[signum] = signal.signal(signum, _exit_on_signal)

    def _restore_signal_handlers(self) -> None:
        for signum, handler in self._replaced_handlers.items():
            signal.signal(signum, handler)
        self._replaced_handlers.clear()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m islands.emulation", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "action",
        choices=["check", "cleanup"],
        help="check: can the kernel emulate here?  cleanup: remove what a crashed run left",
    )
    parser.add_argument(
        "--prefix", default="islands", help="name prefix of the emulated WAN (default: islands)"
    )
    args = parser.parse_args(argv)
    try:
        if args.action == "check":
            ok, reason = available()
            netem = "netem" if netem_available() else "no netem: latency in-process"
            print(
                f"kernel emulation available ({netem})"
                if ok
                else f"kernel emulation not available: {reason}"
            )
            return 0 if ok else 1
        removed = cleanup_leftovers(args.prefix)
        print(f"removed {', '.join(removed)}" if removed else "nothing to clean")
        return 0
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
