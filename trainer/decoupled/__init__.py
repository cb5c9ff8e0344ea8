"""Decoupled DiLoCo: learners on their own clocks, and a syncer that merges what they report.

``learner`` (a learner's world and its transport to the syncer), ``syncer`` (the syncer's process),
``merge`` (merge weights and the merge rules), ``wire`` (the store keys and message format between
them), ``outputs`` (the run's outputs, written by the syncer) and ``launch`` (the syncer's process,
then one per learner). It does not import ``elastic``: what both need lives in ``runtime``.
"""
