"""The live planning page behind ``islands serve``: the scenario's keys as controls, every change
re-simulated by the simulator itself. ``session``: the scenarios and each request checked;
``controls``: the controls; ``figures``: what one change computes; ``jobs``: the worker processes
that compute it, superseded or cancelled; ``app`` and ``server``: the local web server; ``page``: the
page, inline and offline; ``driver``: the page driven in Chromium (tests, bench, the docs'
screenshots). See docs/how-to/serve.md."""
