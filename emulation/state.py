"""Who owns which emulated WAN, and cleaning up after owners that died without doing it themselves.

Every namespace an emulated WAN creates is named ``<prefix>-core`` or ``<prefix>-island<i>``, and
before creating any of them the owner writes ``/run/islands-emulation/<prefix>.json`` with its pid
and that process's start time (so that a recycled pid is not mistaken for the owner). A later start
with the same prefix finds the file; if the owner is gone (SIGKILL, power loss) it deletes every
namespace of that prefix. Namespaces of the prefix without a state file are leftovers too: the file
is written before the first namespace and removed after the last one. An flock on one lock file
makes check-and-claim atomic between two starts (it is held for milliseconds, not for a whole run).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from islands.errors import UserError

from . import net

STATE_DIR = Path("/run/islands-emulation")
PREFIX_PATTERN = re.compile(r"[a-z][a-z0-9]{0,15}")

log = logging.getLogger(__name__)


def check_prefix(prefix: str) -> None:
    if not PREFIX_PATTERN.fullmatch(prefix):
        raise UserError(
            f"emulation prefix {prefix!r} must be 1-16 lowercase letters or digits, starting with a letter"
        )


def core_namespace(prefix: str) -> str:
    return f"{prefix}-core"


def island_namespace(prefix: str, index: int) -> str:
    return f"{prefix}-island{index}"


def is_own_namespace(prefix: str, namespace: str) -> bool:
    return re.fullmatch(rf"{re.escape(prefix)}-(core|island\d+)", namespace) is not None


@contextmanager
def locked() -> Iterator[None]:
    """Hold the lock file: only one process checks, claims or cleans at a time."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with open(STATE_DIR / "lock", "w") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        yield


def state_path(prefix: str) -> Path:
    return STATE_DIR / f"{prefix}.json"


def process_start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/<pid>/stat); None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields_after_name = stat.rsplit(")", 1)[1].split()
    return int(fields_after_name[19])


def read_owner(prefix: str) -> dict | None:
    try:
        return json.loads(state_path(prefix).read_text())
    except FileNotFoundError:
        return None
    except json.JSONDecodeError:
        return {}


def owner_alive(owner: dict) -> bool:
    pid = owner.get("pid")
    return pid is not None and process_start_ticks(pid) == owner.get("start_ticks")


def claim(prefix: str, namespaces: list[str]) -> None:
    """Record this process as the owner of the prefix's namespaces (call while holding ``locked``)."""
    owner = {
        "pid": os.getpid(),
        "start_ticks": process_start_ticks(os.getpid()),
        "namespaces": namespaces,
    }
    state_path(prefix).write_text(json.dumps(owner))


def release(prefix: str) -> None:
    state_path(prefix).unlink(missing_ok=True)


def remove_all(prefix: str) -> list[str]:
    """Delete every namespace of the prefix and the state file; return the namespaces deleted."""
    recorded = set((read_owner(prefix) or {}).get("namespaces", []))
    doomed = sorted(
        ns for ns in net.list_namespaces() if ns in recorded or is_own_namespace(prefix, ns)
    )
    for namespace in doomed:
        net.delete_namespace(namespace)
    release(prefix)
    return doomed


def clean_if_abandoned(prefix: str) -> list[str]:
    """Remove the prefix's namespaces unless a live process owns them (call while holding ``locked``)."""
    owner = read_owner(prefix)
    if owner is not None and owner_alive(owner):
        if owner["pid"] == os.getpid():
            raise UserError(f"this process already holds an emulated WAN with prefix {prefix!r}")
        raise UserError(
            f"an emulated WAN with prefix {prefix!r} is in use by pid {owner['pid']}; "
            "choose another prefix"
        )
    removed = remove_all(prefix)
    if removed:
        dead = f"pid {owner['pid']}" if owner and "pid" in owner else "an unknown process"
        log.warning(
            "removed %d namespace(s) left by %s, which exited without cleaning up: %s",
            len(removed),
            dead,
            ", ".join(removed),
        )
    return removed


def cleanup_leftovers(prefix: str = "islands") -> list[str]:
    """Delete the namespaces of an emulated WAN whose owner died; return their names.

    Raises UserError if a live process still owns the prefix (it cleans up itself on exit).
    """
    check_prefix(prefix)
    with locked():
        return clean_if_abandoned(prefix)
