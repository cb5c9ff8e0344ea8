"""The planner: the questions users bring, each answered by searches over the simulator.

``plan`` (the utilisation plan) and ``plan_tables`` (it as text cells), ``search`` (the least
bandwidth or the smallest H that reaches a utilisation), ``objective`` and ``objective_tables`` (the
plan that counts loss, priced by ``analysis.quality``), ``bandwidth_table`` (Streaming DiLoCo's
published table, reproduced by ``search``)."""
