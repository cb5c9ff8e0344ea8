"""What a schedule is: the one declaration that the simulator and the trainer both execute.

A schedule is the protocol of one worker's stream of inner steps, apart from the physics. It declares

* ``sync_steps``: every exchange, in order, as the outer step and fragment it carries, where it is
  launched and where its result must be applied (positions in inner steps since the start of the
  run; ``apply_step == launch_step`` is a blocking sync);
* the fragments: how many (``fragments``) and which layer of the model goes in which
  (``fragment_of_layer``; ``layout.py`` maps parameters to layers on both sides);
* what is exchanged (``exchanged``): the gradient, inside the step that computed it and before the
  inner optimizer steps (DDP), or a fragment's pseudo-gradient after the step (the DiLoCo family),
  which the outer optimizer applies and the worker merges with ``merge_alpha``;
* the barriers it runs under and the ``schedule.*`` keys it reads (for sweeps and plans).

``sync_points`` prices each exchange the same way for both executors: its values from the real
fragment split, its bytes on the wire at ``schedule.bits`` (``compression.payload_bytes``: dense, or
top-k), the collective that carries it (a ring all-reduce of the mean, or the all-gather of every
payload that robust aggregation and top-k payloads need, ``collective_of``) and, through those
values, the work on the exchange path (``network.exchange_cpu_s_per_value``: screen, encode,
decode). A new schedule is one new module with one ``Schedule`` subclass, registered in
``schedules/__init__.py``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .compression import NONE, payload_bytes
from .layout import fragment_values

if TYPE_CHECKING:
    from islands.scenarios.model import Scenario, ScheduleSpec

GRADIENT = "gradient"
PSEUDO_GRADIENT = "pseudo-gradient"
ALL_REDUCE = "all-reduce"
ALL_GATHER = "all-gather"
SYNCER = "syncer"  # a round trip to Decoupled DiLoCo's syncer: upload the fragment, download the global one
MEAN = "mean"
AVERAGE = "average"  # the outer step takes the round's average once it has arrived
EAGER = "eager"  # the outer step at the launch, with the eager proxy (``eager.py``)
ADOPT = "adopt"  # the syncer takes the outer step; the learner adopts the global fragment (``decoupled.py``)
MERGE_RULES = ("mean", "median", "trimmed_mean")  # trainer.aggregation of the collective schedules


def fragments_fit_period(schedule: ScheduleSpec) -> tuple[str, str] | None:
    """The rule every fragmented schedule keeps: P fragments share an H-step period, fragment p due
    at step floor((p + 1) * H / P) of it (evenly spread when P divides H, else as evenly as whole
    steps allow: H = 100, P = 16 gives 6 or 7 steps apart), so each needs a step of its own."""
    h, p = schedule.inner_steps, schedule.fragments
    if p > h:
        return (
            "schedule.fragments",
            f"must be at most inner_steps (H={h}): each fragment is due at a step of its own (got P={p})",
        )
    return None


def collective_of(aggregation: str, compression: str = NONE) -> str:
    """The collective that carries an exchange under ``trainer.aggregation`` and
    ``schedule.compression``: the mean of dense payloads is a ring all-reduce; a robust aggregation
    (median, trimmed mean) needs every member's payload whole, and top-k payloads cannot be summed on
    the wire (their kept places differ): both are all-gathered."""
    return ALL_REDUCE if aggregation == MEAN and compression == NONE else ALL_GATHER


@dataclass(frozen=True)
class SyncStep:
    """One exchange of the protocol: the worker has computed ``launch_step`` inner steps when it
    starts it and cannot compute past ``apply_step`` steps until it has finished."""

    outer_step: int
    fragment: int
    launch_step: float
    apply_step: float


@dataclass(frozen=True)
class SyncPoint(SyncStep):
    """A ``SyncStep`` priced: ``values`` in the exchanged tensor (its size before encoding: the
    exchange work scales with it), ``payload_bytes`` of it on the wire, and the ``collective``."""

    payload_bytes: float
    values: float
    collective: str = ALL_REDUCE


class Schedule(ABC):
    """One algorithm, declared once. Subclasses set the class attributes and the two abstract methods."""

    name: str = ""  # the registry key: the value of schedule.algorithm
    label: str = ""  # how tables and plots name it
    exchanged: str = PSEUDO_GRADIENT  # GRADIENT or PSEUDO_GRADIENT
    barriers: tuple[str, ...] = ("wait",)
    reads: tuple[str, ...] = ()  # schedule.* keys it reads besides outer_steps and bits
    update: str = AVERAGE  # AVERAGE, EAGER or ADOPT: which outer step, and where
    aggregations: tuple[str, ...] = MERGE_RULES  # the trainer.aggregation values it runs
    compressions: tuple[str, ...] = (NONE,)  # the schedule.compression values it runs
    coupled: bool = True  # workers wait for each other at syncs (False: learners on own clocks)

    @abstractmethod
    def sync_steps(self, schedule: ScheduleSpec, first_outer: int = 0) -> Iterator[SyncStep]:
        """Every exchange of the run from outer step ``first_outer`` on, in launch order. It places the
        exchanges from the schedule's keys other than ``bits`` (which price them: ``sync_points``), so a
        run's timeline serves every wire precision (``simulator/fast/timeline.py``)."""

    @abstractmethod
    def period_steps(self, schedule: ScheduleSpec) -> int:
        """Inner steps per outer step."""

    def fragments(self, schedule: ScheduleSpec) -> int:
        """How many fragments the model is split into (each exchanged on its own)."""
        return 1

    def fragment_of_layer(self, layer: int, fragments: int) -> int:
        """The fragment of layer ``layer``: strided layer groups (Streaming DiLoCo, Douillard et al.
        2025, section 2.2), so every fragment spans the depth of the model."""
        return layer % fragments

    def collective(self, scenario: Scenario) -> str:
        """What carries the scenario's exchanges (``collective_of``)."""
        return collective_of(scenario.trainer.aggregation, scenario.schedule.compression)

    def merge_alpha(self, scenario: Scenario) -> float:
        """theta_local <- alpha * theta_local + (1 - alpha) * theta_global after an outer step."""
        return 0.0

    def transfers_may_overlap(self, schedule: ScheduleSpec) -> bool:
        """Whether two of a worker's exchanges may be on the wire at once (then the flow model is needed)."""
        return False

    def check(self, schedule: ScheduleSpec) -> tuple[str, str] | None:
        """A rule the schedule's keys break together, as (key, rule); None when they are fine."""
        return None

    def synced_outer_steps(self, schedule: ScheduleSpec) -> int:
        """Outer steps whose exchanges the run completes (the run is done when the last of them is)."""
        return schedule.outer_steps

    def total_steps(self, schedule: ScheduleSpec) -> int:
        return schedule.outer_steps * self.period_steps(schedule)

    def outer_step_of(self, step: int, schedule: ScheduleSpec) -> int:
        """The outer step that 0-based inner step ``step`` belongs to."""
        return step // self.period_steps(schedule)

    def sync_points(self, scenario: Scenario, first_outer: int = 0) -> Iterator[SyncPoint]:
        """Every exchange from outer step ``first_outer`` on, priced: values from the real split, bytes
        on the wire (``compression.payload_bytes``), the collective."""
        values, payloads, collective = self.priced_fragments(scenario)
        for step in self.sync_steps(scenario.schedule, first_outer):
            if step.outer_step < first_outer:
                continue
            yield SyncPoint(
                step.outer_step,
                step.fragment,
                step.launch_step,
                step.apply_step,
                payload_bytes=payloads[step.fragment],
                values=values[step.fragment],
                collective=collective,
            )

    def priced_fragments(self, scenario: Scenario) -> tuple[list[float], list[float], str]:
        """Each fragment's values (from the real split), its bytes on the wire
        (``compression.payload_bytes``), and the collective that carries every exchange: what
        ``sync_points`` prices each exchange with."""
        schedule = scenario.schedule
        values = fragment_values(scenario.model, self.fragments(schedule), self.fragment_of_layer)
        payloads = [payload_bytes(size, schedule) for size in values]
        return values, payloads, self.collective(scenario)
