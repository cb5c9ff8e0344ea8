"""One access link's rate over time, from the simulator's links table (``simulator.result.LINK_COLUMNS``)."""

from __future__ import annotations

import numpy as np
import pandas as pd


def rate_steps(links: pd.DataFrame, worker: int, direction: str) -> tuple[np.ndarray, np.ndarray]:
    """One link's total rate as a step function: (times, Gbit/s from each time on), starting at 0.

    Segments that overlap (fragments sharing a link) add up: each segment is +rate at its start and
    -rate at its end, and the running sum is the link's rate.
    """
    rows = links[(links["worker"] == worker) & (links["direction"] == direction)]
    if rows.empty:
        return np.zeros(1), np.zeros(1)
    times = np.concatenate([rows["time_start_s"].to_numpy(), rows["time_end_s"].to_numpy()])
    deltas = np.concatenate([rows["rate_gbps"].to_numpy(), -rows["rate_gbps"].to_numpy()])
    order = np.argsort(times, kind="stable")
    times, levels = times[order], np.cumsum(deltas[order])
    last_at_each_time = np.append(times[1:] != times[:-1], True)
    times, levels = times[last_at_each_time], np.clip(levels[last_at_each_time], 0.0, None)
    return np.concatenate([[0.0], times]), np.concatenate([[0.0], levels])
