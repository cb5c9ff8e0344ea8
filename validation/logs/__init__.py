"""Per-step logs of runs made by any training stack, for ``islands compare``: the documented per-step
format (``steps``), a PyTorch profiler's Chrome trace (``profiler``) and a torchtitan console log
(``torchtitan``) read into one ``StepLog``, and the prediction compared with it over the log's window
(``compare_log``)."""
