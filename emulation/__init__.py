"""The emulated WAN: every island's access link shaped as the simulator models it (no torch here).

    >>> from islands.emulation import LinkSpec, open_wan
    >>> with open_wan([LinkSpec(0, 100e6, 100e6), LinkSpec(1, 10e6, 10e6)]) as wan:
    ...     wan.command_prefix(1)   # run a process inside island 1's namespace

Modules, one job each: ``links`` (what is asked for: one ``LinkSpec`` per island), ``net`` (the ``ip``
and ``tc`` commands: namespaces, veth pairs, tbf), ``state`` (who owns which namespaces; cleaning up
after a dead owner), ``probe`` (one TCP transfer's achieved rate), ``shaper`` (in-process pacing,
where the kernel cannot shape, and the pacer handed to worker processes) and ``wan`` (``open_wan``,
``EmulatedWAN`` and ``python -m islands.emulation check|cleanup``). The trainer's side is
``islands.trainer.runtime.paced``, which wraps the cross-island collectives in a pacer.
"""

from __future__ import annotations

from .link_probe import measure_link
from .link_specs import Shaper
from .net import burst_bytes
from .wan import (
    EmulatedWAN,
    InProcessLatency,
    InProcessShaper,
    LinkSpec,
    available,
    cleanup_leftovers,
    links_from_workers,
    netem_available,
    open_wan,
    pacer_from_config,
)

__all__ = [
    "EmulatedWAN",
    "InProcessLatency",
    "InProcessShaper",
    "LinkSpec",
    "available",
    "cleanup_leftovers",
    "links_from_workers",
    "measure_link",
    "netem_available",
    "open_wan",
    "pacer_from_config",
    "burst_bytes",
    "Shaper",
]
