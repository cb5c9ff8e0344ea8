"""Validation of top-k exchanges: the scaled replica of a compressed case (``replica``), and its own
exchange probed alone before its run (``probe``, started by ``costs``), which prices it."""
