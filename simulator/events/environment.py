"""The SimPy environment of a run: it counts the events it processes and stops past ``--max-events``."""

from __future__ import annotations

import math

import simpy


class EventLimitReached(Exception):
    """The run processed more events than it may (``--max-events``)."""


class CountingEnvironment(simpy.Environment):
    """A SimPy environment that counts the events it processes and stops past ``max_events``."""

    def __init__(self, max_events: float = math.inf) -> None:
        super().__init__()
        self.events_processed = 0
        self.max_events = max_events

    def step(self) -> None:
        self.events_processed += 1
        if self.events_processed > self.max_events:
            raise EventLimitReached
        super().step()
