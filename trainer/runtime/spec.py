"""What a launcher tells each process it starts: one typed ``LaunchSpec``, in one variable.

The local launchers (``launch.train`` for every run kind, the elastic and decoupled fleets, validate's
emulated WAN) start each process with ``ISLANDS_LAUNCH`` holding the spec as JSON: the run (the plan's
file, the output and resume folders, when to stop) and the process's own part (its island's
incarnation, its join time, the WAN's pacer...). Such a process runs ``python -m islands.trainer``,
which reads it once (``launch_spec``) and hands each field to what needs it.

Under torchrun, which starts the processes itself, there is no spec; the two fields a person may have
to set come from their own variables: ``ISLANDS_SYNCER=1`` (the Decoupled DiLoCo syncer's process)
and ``ISLANDS_JOIN_AT_S`` (a machine that joins a run under way), and torchrun's agent says whether
it hosts the store (``TORCHELASTIC_USE_AGENT_STORE``).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields

from islands.errors import UserError
from islands.numbers import is_non_negative_number, is_whole_number

SPEC_VARIABLE = "ISLANDS_LAUNCH"
SYNCER_VARIABLE = "ISLANDS_SYNCER"  # torchrun: set (to 1) in the process that runs the syncer
JOIN_VARIABLE = (
    "ISLANDS_JOIN_AT_S"  # torchrun: a machine that joins once the run's clock reads this
)
AGENT_STORE_VARIABLE = "TORCHELASTIC_USE_AGENT_STORE"


@dataclass(frozen=True)
class LaunchSpec:
    """One process's launch. The run: ``plan_file`` (the pickled ``RunPlan``, written by the launcher),
    ``out_dir``, ``resume_dir`` and ``stop_after`` (periods). The process: ``launched`` by a local
    launcher (the whole world on this host);
    ``join_at_s``: it joins a run under way once the run's clock reads this (None: it starts with the
    run); ``incarnation``: this start of its island (each start its own; None: the node's name and
    its agent's process id); ``store_hosted``: the run's store is hosted outside the ranks (by the
    launcher or torchrun's agent); ``syncer``: the Decoupled DiLoCo syncer's process; ``wan_pacer``:
    the emulated WAN's pacer (``paced.py``; None: no pacing); ``object_store``: the address
    (``http://host:port``) of the object store that ``network.gather = "store"`` exchanges through,
    served by ``object_store_host.py`` (None: a directory under the run's output folder)."""

    launched: bool = False
    join_at_s: float | None = None
    incarnation: str | None = None
    store_hosted: bool = False
    syncer: bool = False
    wan_pacer: str | None = None
    object_store: str | None = None
    plan_file: str | None = None
    out_dir: str | None = None
    resume_dir: str | None = None
    stop_after: int | None = None

    def environment(self) -> dict[str, str]:
        """The variable that carries this spec to the process."""
        return {SPEC_VARIABLE: json.dumps(asdict(self), sort_keys=True)}


TYPES = {
    "launched": (bool,),
    "join_at_s": (int, float, type(None)),
    "incarnation": (str, type(None)),
    "store_hosted": (bool,),
    "syncer": (bool,),
    "wan_pacer": (str, type(None)),
    "object_store": (str, type(None)),
    "plan_file": (str, type(None)),
    "out_dir": (str, type(None)),
    "resume_dir": (str, type(None)),
    "stop_after": (int, type(None)),
}


def launch_spec(environ: Mapping[str, str] = os.environ) -> LaunchSpec:
    """This process's spec: the launcher's, or (under torchrun, or by hand) the one the user's
    variables give. A malformed one is one line."""
    text = environ.get(SPEC_VARIABLE)
    if text is None:
        return user_spec(environ)
    try:
        document = json.loads(text)
    except json.JSONDecodeError:
        raise UserError(f"{SPEC_VARIABLE}: not JSON") from None
    names = {field.name for field in fields(LaunchSpec)}
    if not isinstance(document, dict) or set(document) - names:
        raise UserError(
            f"{SPEC_VARIABLE}: must be an object with keys among {', '.join(sorted(names))}"
        )
    for name, value in document.items():
        if not valid(name, value):
            raise UserError(f"{SPEC_VARIABLE}: {name} = {value!r} is not valid")
    return LaunchSpec(**document)


def valid(name: str, value: object) -> bool:
    """Of the field's type; a number (not a boolean) that is finite and >= 0 (``stop_after`` >= 1)."""
    if not isinstance(value, TYPES[name]):
        return False
    if name == "join_at_s":
        return valid_join(value)
    return name != "stop_after" or value is None or (is_whole_number(value) and value >= 1)


def valid_join(value: object) -> bool:
    return value is None or is_non_negative_number(value)


def user_spec(environ: Mapping[str, str]) -> LaunchSpec:
    """The spec of a process torchrun (or a person) started: ``ISLANDS_SYNCER``, ``ISLANDS_JOIN_AT_S``."""
    join_at = environ.get(JOIN_VARIABLE)
    join_at_s = None
    if join_at is not None:
        try:
            join_at_s = float(join_at)
        except ValueError:
            join_at_s = math.nan
        if not valid_join(join_at_s):
            raise UserError(f"{JOIN_VARIABLE}={join_at!r}: must be a number of seconds >= 0")
    return LaunchSpec(
        join_at_s=join_at_s,
        syncer=environ.get(SYNCER_VARIABLE) == "1",
        store_hosted=environ.get(AGENT_STORE_VARIABLE) == "True",
    )
