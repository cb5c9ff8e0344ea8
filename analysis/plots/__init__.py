"""Plots, one module per figure: ``bandwidth`` (one access link's rate over time, a panel per schedule),
``breakdown`` (compute, stall and idle per schedule), ``heatmap`` (a summary figure over two swept
parameters), ``loss_time`` (predicted loss against wall-clock time), ``worker_timeline`` (a Gantt chart
of some outer intervals), and what they share (``style``: size, output format, colours, labels)."""
