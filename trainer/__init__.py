"""The real trainer: the scenario's schedule run with torch.distributed, measured in the trace schema.

Modules, one job each: ``model`` (small byte-level GPT), ``data`` (corpus, shards, batches),
``quantize`` (wire formats and the quantised average), ``comm`` (collective interface: torch or
threads), ``sync`` (averaging across islands on a background thread), ``outer`` (fragments,
pseudo-gradients, outer optimizers), ``config`` (the run plan), ``loop`` (one rank's training loop),
``tracing`` (trace, metrics, summary), ``checkpoint``, ``launch`` (local processes and torchrun),
``inprocess`` (ranks as threads) and ``results``.
"""
