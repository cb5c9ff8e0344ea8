"""Islands that die and join mid-run (``trainer.elastic``, or a scenario with churn).

``world`` (one rank's elastic world), ``membership`` (who trains now: epochs, votes, re-forming),
``joining`` (a joiner's state download), ``transport`` (exchanges through the membership), ``rows``
(each island's trace rows as they happen, lost compute) and ``launch`` (the store, the islands, the
events played).
"""
