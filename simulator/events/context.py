"""What the parts of one event run share (``engine.Simulation`` builds it once): the clock, the
scenario and its schedule, the network, the topology, who is in the run, the completed outer steps,
the rows, and how a worker's process is started. Each part takes this one context and the other parts
it calls, not ten arguments."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import simpy

from islands.scenarios import Scenario
from islands.schedules import Schedule

from ..fleet import Fleet
from ..network.topology import Topology
from ..workers import Start
from .progress import Progress
from .tracelog import TraceLog

if TYPE_CHECKING:
    from ..network.flows import AlphaBetaNetwork, FlowNetwork


@dataclass(frozen=True)
class RunContext:
    env: simpy.Environment
    scenario: Scenario
    schedule: Schedule
    network: AlphaBetaNetwork | FlowNetwork
    topology: Topology
    fleet: Fleet
    progress: Progress
    trace: TraceLog
    start: Start  # starts a worker's process from an outer step (``Simulation.start_worker``)
    last_fragment: int  # the schedule's last fragment: its sync completes an outer step
