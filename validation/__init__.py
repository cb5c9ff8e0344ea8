"""``islands validate``: a scaled real run over the emulated WAN beside the simulator's prediction of it.

    >>> from islands.validation.case import validate_case
    >>> from islands.validation.calibration import measure
    >>> from islands.validation.calibration_file import read_calibration

Modules, one job each: ``scaling`` (the scaled replica of a scenario), ``calibration`` (what the
emulated links and the trainer's exchange really achieve, as scenario keys) and ``probe`` (the timed
exchanges it runs in every island's namespace), ``calibration_file`` (a saved calibration read back,
checked), ``run`` and ``churn`` (the real run, fixed membership or elastic), ``run_folder`` (a run's
outputs read back, checked; also for ``islands compare``), ``compare`` (predicted beside measured),
``plot`` (the overlay), ``case`` (one case end to end), ``suite`` (the bundled matrix) and ``demo``
(the real run that ends ``islands demo``, with the smallest calibration it needs). ``cases/`` holds
scenario files that only validation uses. This package imports torch (the probe and the trainer);
``islands.analysis`` does not.
"""
