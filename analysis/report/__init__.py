"""What a scenario's run is shared as: ``html_report`` (one self-contained HTML page) with its what-if
panel (``whatif``: the grid simulated; ``whatif_page``: the sliders), ``chrome_trace`` (a run for
Perfetto) and ``demo_outputs`` (what ``make demo`` writes besides its table)."""
