"""Sweeps: ``runner`` (a scenario played over every combination of a grid and seeds), ``grid`` (the
``--grid`` axes, checked key by key), ``sweep_table`` (sweep tables on disk and the questions asked
of them) and ``goodput`` (the goodput grid under chip failures, at fleet scale)."""
