"""What ``islands train`` prints at the end: the measured summary as the simulator's tables."""

from __future__ import annotations

from typing import Any

from islands.tables import comparison, islands_table


def print_summary(summary: dict[str, Any]) -> None:
    print()
    print(comparison({f"{summary['algorithm']} (measured)": summary}))
    print()
    print(islands_table(summary), flush=True)
