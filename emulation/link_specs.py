"""What an emulated WAN is asked to build: one access link per island, as the simulator sees it."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from islands.errors import UserError
from islands.numbers import is_number_between
from islands.units import BITS_PER_BYTE

from .net import MAX_LINKS

if TYPE_CHECKING:
    from islands.scenarios import Worker


@dataclass(frozen=True)
class LinkSpec:
    """One island's full-duplex access link to the WAN core; ``latency_s`` is one-way."""

    island: int
    upload_bits_per_s: float
    download_bits_per_s: float
    latency_s: float = 0.0

    def __post_init__(self) -> None:
        if self.upload_bits_per_s <= 0 or self.download_bits_per_s <= 0:
            raise UserError(f"link of island {self.island}: rates must be positive bits/s")
        if self.latency_s < 0:
            raise UserError(
                f"link of island {self.island}: latency_s must be >= 0, got {self.latency_s}"
            )


FAIR, FIFO = "fair", "fifo"
SHAPERS = (FAIR, FIFO)
# The islands' TCP congestion control, set on every island's route whatever the host's default
# (docs/emulation.md "The hosts' TCP"): CUBIC is Linux's default, so what hosts running NCCL or gloo
# over TCP use unless someone changed it; BBR is the other one users choose.
CUBIC, BBR = "cubic", "bbr"
TCP_ALGORITHMS = (CUBIC, BBR)
# "kernel-htb" until issue 29's third round (one bulk FIFO per direction); the TCP named since issue 44
FAIR_MODE = f"kernel-htb-fq-{CUBIC}"
KERNEL_MODE = re.compile(r"kernel-(?:htb-fq|tbf-fifo-(\d+(?:\.\d+)?)ms)-(cubic|bbr)")
DEFAULT_QUEUE_MS = 200.0  # the fair shaper's depth too (net.QUEUE_LATENCY_S)
QUEUE_MS_RANGE = (1.0, 2000.0)


@dataclass(frozen=True)
class Shaper:
    """How every access link's bottleneck queues, as a real router does (docs/emulation.md).

    ``fair``: ACKs first and a queue per peer island served in turn (fq_codel, cake, SQM home
    routers); ``fifo``: one tbf FIFO per island's egress holding ``queue_ms`` of the link's rate
    (``tc tbf`` on a host's egress, a cloud shaper), so an island's ACKs and short messages wait
    behind its own uploads. ``queue_ms`` is the fifo's depth only; the fair queues hold
    ``net.QUEUE_LATENCY_S`` each."""

    kind: str = FAIR
    queue_ms: float = DEFAULT_QUEUE_MS
    tcp: str = CUBIC

    def __post_init__(self) -> None:
        if self.kind not in SHAPERS:
            raise UserError(f"shaper {self.kind!r}: must be one of {', '.join(SHAPERS)}")
        low, high = QUEUE_MS_RANGE
        if not is_number_between(self.queue_ms, low, high):
            raise UserError(f"queue depth {self.queue_ms!r} ms: must be {low:g} to {high:g} ms")
        if self.tcp not in TCP_ALGORITHMS:
            raise UserError(f"TCP {self.tcp!r}: must be one of {', '.join(TCP_ALGORITHMS)}")

    @property
    def mode(self) -> str:
        """What a calibration records: one made under one shaper or TCP is refused under another."""
        queue = "htb-fq" if self.kind == FAIR else f"tbf-fifo-{self.queue_ms:g}ms"
        return f"kernel-{queue}-{self.tcp}"


def is_kernel_mode(mode: str) -> bool:
    """Whether ``mode`` is one this version builds: the fair shaper or a fifo of any depth, under
    either TCP."""
    return KERNEL_MODE.fullmatch(mode) is not None


def check_links(links: Sequence[LinkSpec]) -> tuple[LinkSpec, ...]:
    """Links must be numbered 0..n-1 in order, so that an island's index is its position."""
    links = tuple(links)
    if not 1 <= len(links) <= MAX_LINKS:
        raise UserError(f"an emulated WAN needs 1 to {MAX_LINKS} links, got {len(links)}")
    for position, link in enumerate(links):
        if link.island != position:
            raise UserError(
                f"links must be numbered 0..{len(links) - 1} in order; "
                f"position {position} has island {link.island}"
            )
    return links


def check_island(links: Sequence[LinkSpec], island: int) -> int:
    if not 0 <= island < len(links):
        raise UserError(f"island {island} is not in this emulated WAN (0..{len(links) - 1})")
    return island


def links_from_workers(workers: Sequence[Worker]) -> list[LinkSpec]:
    """One link per simulated worker (its rank is the island index), as the simulator models them."""
    return [
        LinkSpec(
            island=w.rank,
            upload_bits_per_s=w.upload_bytes_per_s * BITS_PER_BYTE,
            download_bits_per_s=w.download_bytes_per_s * BITS_PER_BYTE,
            latency_s=w.latency_s,
        )
        for w in workers
    ]
