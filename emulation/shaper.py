"""In-process shaping: the fallback where the kernel cannot shape (no root, no iproute2).

Each trainer process paces its own collectives: before a collective it books the bytes it will send
on its island's uplink and the bytes it will receive on its downlink, then lets the collective run
(over loopback, at full speed) and sleeps out whatever the booked links still need. A link is a
virtual clock, ``free_at_s``: a transfer's bytes start when both its latency has passed and the link
is free, and occupy it for ``bits / rate`` seconds. That is a token bucket without burst: an idle
link earns no credit, as a real link cannot send faster after a pause.

Limits, reported with every result labelled "in-process": a process only knows its own bookings, so
two processes on one island each get the island's full rate, and only the bytes the trainer declares
are counted. A ring is paced by its slowest link: pass the ring's members as ``paced_by`` so that
every member books at that rate and all finish together, as in the simulator.

Worker processes get their pacer from the process that owns the WAN as a string
(``wan.pacer_config()`` -> ``pacer_from_config``): an ``InProcessShaper`` in in-process mode, an
``InProcessLatency`` under kernel shaping (which sleeps the latency only when netem cannot add it).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from islands.units import BITS_PER_BYTE

from .link_specs import LinkSpec, check_island, check_links

LOOPBACK_ADDRESS = "127.0.0.1"


class InProcessShaper:
    """Paces declared transfers per island; the same interface as ``EmulatedWAN``."""

    mode = "in-process"
    latency_mode = "in-process"

    def __init__(
        self,
        links: Sequence[LinkSpec],
        *,
        reason: str = "",
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.links = check_links(links)
        self.reason = reason
        self._clock = clock
        self._sleep = sleep
        self._upload_free_at_s = [0.0] * len(self.links)
        self._download_free_at_s = [0.0] * len(self.links)
        self._sent_bytes = [0] * len(self.links)
        self._received_bytes = [0] * len(self.links)

    def __enter__(self) -> InProcessShaper:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None

    @property
    def label(self) -> str:
        why = f" ({self.reason})" if self.reason else ""
        return f"in-process shaping and latency{why}"

    def address(self, island: int) -> str:
        return LOOPBACK_ADDRESS

    def interface(self, island: int) -> str:
        return "lo"

    def environment(self, island: int) -> dict[str, str]:
        return {"GLOO_SOCKET_IFNAME": "lo"}

    def command_prefix(self, island: int) -> list[str]:
        return []

    def latency_s(self, island: int) -> float:
        return self.links[check_island(self.links, island)].latency_s

    def pacer_config(self) -> str:
        return pacer_config(self.links, self.mode, self.latency_mode)

    def counters(self, island: int) -> dict[str, int]:
        """Bytes booked for the island so far (what the trainer declared, not measured)."""
        island = check_island(self.links, island)
        return {"tx_bytes": self._sent_bytes[island], "rx_bytes": self._received_bytes[island]}

    def book(
        self,
        island: int,
        sent_bytes: int,
        received_bytes: int,
        latency_s: float = 0.0,
        paced_by: Sequence[int] = (),
        ceiling_bits_per_s: float = math.inf,
    ) -> float:
        """Book a transfer on the island's links; return the clock time at which it completes.

        ``paced_by``: other islands whose links the same bytes cross; the transfer then moves no
        faster than the slowest of their links in either direction (a ring is paced by its slowest link).
        ``ceiling_bits_per_s``: a rate it moves no faster than besides (its share of a link that no
        island owns: an object store's).
        """
        link = self.links[check_island(self.links, island)]
        ceiling_bits_per_s = min(
            [ceiling_bits_per_s, *(self._slower_direction_bits_per_s(peer) for peer in paced_by)]
        )
        data_start_s = self._clock() + latency_s
        upload_done_s = _occupy(
            self._upload_free_at_s,
            island,
            data_start_s,
            sent_bytes,
            min(link.upload_bits_per_s, ceiling_bits_per_s),
        )
        download_done_s = _occupy(
            self._download_free_at_s,
            island,
            data_start_s,
            received_bytes,
            min(link.download_bits_per_s, ceiling_bits_per_s),
        )
        self._sent_bytes[island] += sent_bytes
        self._received_bytes[island] += received_bytes
        return max(upload_done_s, download_done_s)

    def _slower_direction_bits_per_s(self, island: int) -> float:
        link = self.links[check_island(self.links, island)]
        return min(link.upload_bits_per_s, link.download_bits_per_s)

    @contextmanager
    def transfer(
        self,
        island: int,
        sent_bytes: int,
        received_bytes: int,
        latency_s: float = 0.0,
        paced_by: Sequence[int] = (),
        ceiling_bits_per_s: float = math.inf,
    ) -> Iterator[None]:
        """Wrap one collective: book it, run it, then sleep until the booked links are done."""
        done_at_s = self.book(
            island, sent_bytes, received_bytes, latency_s, paced_by, ceiling_bits_per_s
        )
        yield
        remaining_s = done_at_s - self._clock()
        if remaining_s > 0:
            self._sleep(remaining_s)


def _occupy(
    free_at_s: list[float], island: int, start_s: float, payload_bytes: int, rate_bits_per_s: float
) -> float:
    """Occupy one direction of a link from when both it and the data are ready; return when it is done."""
    free_at_s[island] = (
        max(start_s, free_at_s[island]) + payload_bytes * BITS_PER_BYTE / rate_bits_per_s
    )
    return free_at_s[island]


class InProcessLatency:
    """Under kernel shaping: the kernel paces the bytes; without netem the latency is slept here."""

    def __init__(
        self,
        links: Sequence[LinkSpec],
        *,
        sleep_latency: bool,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.links = check_links(links)
        self.sleep_latency = sleep_latency
        self._sleep = sleep

    def latency_s(self, island: int) -> float:
        return self.links[check_island(self.links, island)].latency_s

    @contextmanager
    def transfer(
        self,
        island: int,
        sent_bytes: int,
        received_bytes: int,
        latency_s: float = 0.0,
        paced_by: Sequence[int] = (),
        ceiling_bits_per_s: float = math.inf,
    ) -> Iterator[None]:
        """Wrap one collective: its latency first (on top of the real, kernel-paced transfer), then it.

        The byte counts, ``paced_by`` and the ceiling are not needed here (the kernel paces the
        bytes); they are accepted so that callers need not know which pacer they hold.
        """
        check_island(self.links, island)
        if self.sleep_latency and latency_s > 0:
            self._sleep(latency_s)
        yield


def pacer_config(links: Sequence[LinkSpec], mode: str, latency_mode: str) -> str:
    """What a worker process needs to pace its own collectives, as one JSON string."""
    links_as_dicts = [dataclasses.asdict(link) for link in links]
    return json.dumps({"mode": mode, "latency_mode": latency_mode, "links": links_as_dicts})


def shaper_from_config(config: str) -> InProcessShaper:
    """An in-process shaper of ``pacer_config``'s links, whatever its mode: what paces bytes that no
    emulated link carries (an object store in a local directory, ``trainer/runtime/paced.py``)."""
    return InProcessShaper([LinkSpec(**link) for link in json.loads(config)["links"]])


def pacer_from_config(config: str) -> InProcessShaper | InProcessLatency:
    """The pacer a worker wraps its collectives in (``with pacer.transfer(...)``), from ``pacer_config``."""
    settings = json.loads(config)
    links = [LinkSpec(**link) for link in settings["links"]]
    if settings["mode"] == "in-process":
        return InProcessShaper(links)
    return InProcessLatency(links, sleep_latency=settings["latency_mode"] == "in-process")
