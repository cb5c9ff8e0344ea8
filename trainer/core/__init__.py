"""What every run kind trains with: one rank's loop and the schedule's syncs.

``loop`` (one rank's training loop), ``diloco`` (fragment syncs: launch, apply, merge), ``outer``
(fragments, pseudo-gradients, outer optimizers), ``model``, ``data``, ``checkpoint``, ``tracing``
(trace, metrics, summary), ``faults`` (kill points and poisoned deltas for the kill campaigns),
``memory``, ``world`` (what the loop asks of the processes it trains with) and ``inprocess`` (ranks
as threads). How a rank exchanges with the others is ``exchange``. Nothing here imports ``elastic``,
``decoupled`` or ``runtime``.
"""
