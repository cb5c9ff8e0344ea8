"""What a schedule is: the protocol side of the simulator, apart from the physics.

A schedule says, for one worker's stream of inner steps, where each collective is launched and where
its result must be applied, as positions measured in inner steps since the start of the run. The
engine turns positions into time with each worker's step time and turns the collectives into
transfers with the network model. A new schedule is a new module with one ``sync_points`` function.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SyncPoint:
    """One collective in the schedule.

    ``launch_step``: the worker has computed this many inner steps when it starts the collective;
    ``apply_step``: it cannot compute past this many steps until the collective has finished
    (``apply_step == launch_step`` is a blocking sync). ``payload_bytes`` is the tensor size S being
    all-reduced, on the wire; ``values`` is how many values that tensor holds (its size before encoding:
    the work on the exchange path, ``network.exchange_cpu_s_per_value``, scales with it).
    """

    outer_step: int
    fragment: int
    launch_step: float
    apply_step: float
    payload_bytes: float
    values: float
