"""The live planning page behind ``islands serve``: the scenario's keys as controls, every change
re-simulated by the simulator itself (``controls``: the controls; ``figures``: what one change
computes; ``jobs``: the processes that compute it, cancelled or superseded; ``app``: the local web
server; ``page``: the page, inline and offline). See docs/how-to/serve.md."""
