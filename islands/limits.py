"""The default resource guard of a simulated run, shared by the simulator and the scenario sources
that carry it to every run an analysis makes."""

DEFAULT_MAX_EVENTS = 2_000_000  # memory grows about 1 kB per event (docs/limits.md)
