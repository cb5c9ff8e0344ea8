"""What does DeMo's DCT add to a top-k exchange's work? The codec with and without it, per value.

One worker's side of a top-k exchange of N values (``trainer/exchange/sparse.py``): ``encode`` (the
forward DCT of every chunk, the top-k, the quantiser, the inverse DCT of what was sent, for error
feedback) and the receiver's ``restore`` of the gathered mean (one inverse DCT, whatever the number of
payloads: the transform is linear; reading each payload, ``coefficients``, is the same work with or
without it). The median of ``REPEATS`` runs of each is printed per value, and the DCT's share,
(encode + restore with the DCT) - (the same without), is what to add to
``network.exchange_cpu_s_per_value`` for a DCT scenario on this machine (docs/how-to/compression.md).

    python benchmarks/bench_dct.py [--values 4194304] [--chunk 4096] [--topk 64] [--bits 2] [--device cpu]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from islands.schedules.compression import DCT, NONE, TopK
from islands.trainer.exchange.sparse import TopKCodec

REPEATS = 5
NS_PER_S = 1e9


def median_s(work: Callable[[], object], device: torch.device) -> float:
    """Median seconds of ``REPEATS`` runs of ``work`` after one run to warm up."""
    seconds = []
    for _ in range(REPEATS + 1):
        start = time.perf_counter()
        work()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds[1:])


def codec_seconds(layout: TopK, x: torch.Tensor) -> tuple[float, float]:
    """(encode, restore) median seconds of the codec of ``layout`` on ``x``."""
    codec = TopKCodec(layout, x.numel())
    payload, _ = codec.encode(x)
    mean = codec.coefficients(payload)
    return median_s(lambda: codec.encode(x), x.device), median_s(
        lambda: codec.restore(mean), x.device
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--values", type=int, default=4 * 1024 * 1024)
    parser.add_argument("--chunk", type=int, default=4096)
    parser.add_argument("--topk", type=int, default=64)
    parser.add_argument("--bits", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(1)
    x = torch.randn(args.values, generator=torch.Generator().manual_seed(0)).to(device)
    print(
        f"{args.values:,} values, top-{args.topk} of {args.chunk} at {args.bits} bits, {device} "
        f"({torch.get_num_threads()} thread(s) on the CPU), median of {REPEATS}"
    )
    per_value = {}
    for transform in (NONE, DCT):
        encode_s, restore_s = codec_seconds(TopK(args.chunk, args.topk, args.bits, transform), x)
        per_value[transform] = (encode_s + restore_s) / args.values
        print(
            f"transform = {transform:4}: encode {encode_s * NS_PER_S / args.values:.2f} ns/value, "
            f"restore {restore_s * NS_PER_S / args.values:.2f} ns/value"
        )
    extra = per_value[DCT] - per_value[NONE]
    print(
        f"the DCT adds {extra * NS_PER_S:.2f} ns/value: network.exchange_cpu_s_per_value += {extra:.3g}"
    )


if __name__ == "__main__":
    main()
