"""What the run kinds with processes share: the run's store and clock, the fleet of island processes.

``store`` (the store client, the run's clock, the heartbeat period), ``fleet`` (starting and killing
island processes as the scenario's events say), ``island`` (an island of several ranks led by its local
rank 0), ``paced`` (groups paced as an emulated WAN) and ``store_host`` (a store on a machine that does
not train). Nothing here imports ``elastic`` or ``decoupled``.
"""
