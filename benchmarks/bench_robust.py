"""What does robust aggregation cost? The mean against the coordinate-wise median and trimmed mean.

M islands run as threads of one process (``comm.ThreadGroup``: no sockets, so this times the
arithmetic and the copies, not a network) and exchange one pseudo-gradient of N values ``REPEATS``
times per aggregation; the median of the repeats is printed with the bytes each island puts on the
wire, which is what a WAN would charge: the ring mean sends 2(M-1)/M of the encoded payload, the
robust rules all-gather every whole payload, (M-1) of them.

    python benchmarks/bench_robust.py [--islands 4] [--values 120576 10000000] [--bits 16]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from islands.tables import size
from islands.trainer.core.inprocess import run_threads
from islands.trainer.core.tracing import Clock
from islands.trainer.exchange.comm import ThreadHub
from islands.trainer.exchange.robust import AggregationRule
from islands.trainer.exchange.sync import Exchanger

REPEATS = 5
RULES = {
    "mean": AggregationRule(),
    "median": AggregationRule(aggregation="median"),
    "trimmed_mean": AggregationRule(aggregation="trimmed_mean"),
}


def time_exchange(islands: int, values: int, bits: int, rule: AggregationRule) -> tuple[float, int]:
    """Median seconds of one exchange (slowest island) and the bytes one island sent."""
    members = ThreadHub(islands, timeout_s=600).members()
    deltas = [
        torch.randn(values, generator=torch.Generator().manual_seed(i)) for i in range(islands)
    ]
    exchangers = [Exchanger(member, None, bits, Clock(), rule) for member in members]
    seconds, sent = [], 0
    for _ in range(REPEATS):
        start = time.perf_counter()
        results = run_threads(islands, lambda i: exchangers[i].exchange(deltas[i]), timeout_s=600)
        seconds.append(time.perf_counter() - start)
        sent = results[0].sent_bytes
    for exchanger in exchangers:
        exchanger.close()
    return statistics.median(seconds), sent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--islands", type=int, default=4)
    parser.add_argument("--values", type=int, nargs="+", default=[120_576, 10_000_000])
    parser.add_argument("--bits", type=int, default=16)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"{args.islands} islands as threads, {args.bits}-bit wire, median of {REPEATS} exchanges")
    for values in args.values:
        timed = {
            name: time_exchange(args.islands, values, args.bits, rule)
            for name, rule in RULES.items()
        }
        base_s, base_bytes = timed["mean"]
        for name, (seconds, sent) in timed.items():
            print(
                f"{values:>11,} values  {name:<13} {1000 * seconds:9.2f} ms ({seconds / base_s:5.2f} x mean)  "
                f"sent/island {size(sent):>9} ({sent / base_bytes:4.2f} x mean)"
            )


if __name__ == "__main__":
    main()
