"""What every run kind trains with: one rank's loop and the schedule's syncs.

``loop`` (one rank's training loop), ``diloco`` (fragment syncs: launch, apply, merge), ``outer``
(fragments, pseudo-gradients, outer optimizers), ``sync`` (averaging on a background thread),
``quantize`` (wire formats), ``robust`` (screening and robust averages), ``comm`` and ``group`` (the
collective interface: torch, the store, or threads), ``model``, ``data``, ``checkpoint``, ``tracing``
(trace, metrics, summary), ``faults`` (kill points and poisoned deltas for the kill campaigns),
``world`` (what the loop asks of the processes it trains with) and ``inprocess`` (ranks as threads).
Nothing here imports ``elastic``, ``decoupled`` or ``runtime``.
"""
