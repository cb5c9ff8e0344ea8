"""What is physical about the emulated WAN and the trainer, measured once per ``validate`` invocation.

Each quantity is probed at every rate of ``PROBE_RATES_BITS_PER_S`` (transfers of ``PROBE_SECONDS``):

* ``link_ratio``: the payload rate one TCP stream achieves over the configured rate
  (``measure_link``): tbf charges Ethernet frames, a frame carries 1448 payload bytes of 1514
  (about 95.8%). Reported; in-process shaping paces the payload itself: 1.
The probe (``probe``) times the trainer's whole exchange path, ``sync.Exchanger``, of a tiny and a
large tensor, split as the trainer's trace splits it: ``screen`` (before the average starts: the
finite check and fp64 norm of every value, and the all-gather of those two numbers) and ``average``
(``quantize.average``). From them, for M islands:

* ``exchange_cpu_s_per_value[M]``: the screening's seconds per value of the exchanged tensor,
  (screen(large) - screen(tiny)) / (large values - tiny values). Per value, not per byte: the
  screen reads the fp32 tensor whatever the wire format, so int8 and bf16 cost it the same. It grows
  with M here because M processes share the machine's cores.
* ``overhead_s[M]``: the trainer's fixed seconds per exchange: the whole tiny exchange (screen +
  average) at zero latency, less the per-value screening of its few values (priced by the key above).
* ``call_s[M]``: the seconds one more collective call adds to an exchange (``exchange.calls``): the
  medium tensor's average in ``probe.CALLS`` calls less its average in one, over ``CALLS`` - 1, at
  zero latency. Calls that carry data, as a split exchange's do: four islands' calls of a tiny
  tensor each took 5.7 ms more, where a 2.5M-value exchange in 80 calls took 1.8 ms per call more
  than in one; the whole exchange's fixed cost is 12-25 ms, its screening round and the hand-off to
  the exchange thread coming once per exchange, not per call.
* ``exchange_ratio_by_calls[C][M][rate]``: the rate of the large exchange (bf16) made in C calls,
  for each number of calls C of the cases ``islands validate`` is about to run (``measure``'s
  ``calls``): its ring volume, less the burst, over its average less the tiny one's, as
  ``exchange_ratio``; the calls' own costs are in it. An exchange in calls is not the one buffer's
  rate plus a cost per call: one buffer does its per-value work (encode, decode and sum, between the
  all-to-all and the all-gather) with the links idle, and each of its steps starts a connection that
  sat idle (BBR's window restarts short, and behind one FIFO its round trips wait behind the
  island's uploads), where back-to-back calls of a few 64 KiB pieces overlap that work with the
  bytes in flight and keep every connection busy. Two islands at 219 Mbit/s behind one FIFO:
  2.5M values in one call 0.21-0.25 s (srtt 4.4-4.7 ms, cwnd 190-226), in 40 calls 0.19-0.20 s
  (srtt 1.5-1.8 ms); four at 41 Mbit/s: one call 1.66-2.12 s (srtt 8 ms, cwnd 46), 80 calls
  1.62-1.68 s (srtt 2 ms, cwnd 160). So the medium exchange in 16 calls took no longer than in one
  and ``call_s`` read 0, while the flat rate priced the calls' syncs 8-16% long.
* ``burst_fraction[M][rate]``: kernel htb gives every link a token bucket (``emulation.burst_bytes``:
  4 ms of its rate; 64 KiB at least until issue 29, a tenth of a 0.15 s sync at 33 Mbit/s, which a
  rate alone priced 10-17% long), which an exchange starting on idle links sends at once. How much
  of it an exchange gains is measured: the medium and the large exchange's data times, (volume -
  burst) / rate each, give the rate (the slope) and the burst (the intercept), kept as a fraction of
  one bucket, within [0, 1]. A bucket of 4 ms is below what the probe resolves (about 10 ms), so the
  fraction is mostly noise and costs a link at most 4 ms. A prediction gives every link that
  fraction of its own bucket (``island.upload_burst_bytes``, ``download_burst_bytes``). In-process shaping has no
  bucket, nor has a calibration saved before buckets were measured: its rates are the large
  exchange's alone.
* ``exchange_ratio[M][rate]``: the rate the average really moves its bytes at, over the configured
  rate: ring volume 2(M-1)/M * S of the large exchange, less what the links send at once
  (``burst_fraction``), over (average(large) - average(tiny)). Encoding
  and decoding are per value too, but they run between the average's passes, inside the sync, so
  they stay in this ratio. About 0.88-0.94 for 2-4 islands at 10 and 100 Mbit/s, a little below
  ``link_ratio``: the exchange sends 64 KiB pieces posted together (``comm.PIECE_BYTES``), and pauses
  between its 2(M-1) steps. (Sent as one large message per peer, as gloo's own all-to-all does, it
  reached only 0.52-0.80.)
* ``exchange_ratio_by_bits[bits][M][rate]``: the same rate for an exchange in another wire format
  (int8, fp32, int4) than the probe's bf16, from a large exchange of about the same bytes (at most
  ``probe.MAX_PROBE_VALUES`` values, the replica's model), with the bf16 exchange's burst. The
  exchange's CPU work (copying, encoding, decoding, summing) goes by values, and int8 carries twice
  the values of bf16 per byte: at 49 Mbit/s, 0.44 s exchanges on two
  islands reached 0.89-0.90 of the rate in int8 against 0.92-0.93 in bf16 (three runs each), so a
  bf16 calibration predicted every int8 sync 3% short. Measured for the formats ``islands validate``
  is about to run (``measure``'s ``wire_bits``); a format not measured is priced at bf16's rate.
* ``end_spread_s[M][rate]``: how long after the first member the last one finishes the large
  exchange, median over its repeats: 1-7 ms at 10 Mbit/s and 5-13 ms at 100 for 2 to 4 islands
  (42-49 ms at 10 Mbit/s, about one 64 KiB piece, while gloo's notices waited behind data, and
  20-60 ms at 100 while the probe's tensor there was 2.5 times the replica's model: issue 29). A
  member that finishes first computes on first and then waits longer at the next collective:
  without it the simulator put half the ``idle`` of a three-island DDP run into ``stall``.
  The fixed cost and the rate above are the last member's (the sync's span); the others finish up to
  the spread before it.

A top-k case's exchange is not the dense one (``topk.costs``: each such case's exchange is probed on
its own, just before its run): where every case of an invocation is top-k, ``measure`` probes the
links alone (``exchange = False``), and the exchange's tables stay empty.

The simulator gets them through scenario keys, never fitted per case:
``network.exchange_cpu_s_per_value``, paid by every member before the bytes move (the ``idle`` it
predicts at every sync); ``network.exchange_end_spread_s`` at the ring's slowest configured rate;
every link's rate times ``exchange_ratio[M]`` (``exchange_ratio_by_bits`` in another wire format) at
that rate, and its bucket; and one latency per island that makes its ring's 2(M-1) hops of (sender
+ receiver) latency add up to what the trainer pays per exchange: ``overhead_s[M]`` plus its
emulated latency, three phases (the screening's all-gather, the average's
all-to-all and all-gather) of one path latency each (``trainer.paced``).
"""

from __future__ import annotations

import json
import statistics
import subprocess
from dataclasses import asdict, dataclass, field
from typing import NamedTuple

from islands.emulation import (
    EmulatedWAN,
    InProcessShaper,
    LinkSpec,
    Shaper,
    burst_bytes,
    measure_link,
    open_wan,
)
from islands.errors import UserError
from islands.interpolation import linear, log_linear
from islands.io import json_text
from islands.trainer.exchange.quantize import encoded_bytes, padded_length
from islands.units import BITS_PER_BYTE, BITS_PER_GBIT, MS_PER_S

from .exchange_probe import (
    BITS,
    CALLS,
    CALLS_VARIABLE,
    LARGE_VARIABLE,
    MIN_MEMBERS_VARIABLE,
    WIRE_BITS_VARIABLE,
    calls_size,
    large_probe_values,
    medium_values,
    tiny_values,
    wire_size,
    wire_values,
)
from .run import VALIDATE_STEM, run_all, start_ranks
from .scaling import ring_volume_bytes

PROBE_RATES_BITS_PER_S = (10e6, 100e6)
# Each probe transfer lasts about this long at the configured rate: long enough that the links'
# buckets (4 ms of their rate) are under 1% of it; the trainer's large exchange is also at most the
# replica's model (``probe.MAX_PROBE_VALUES``): 0.4-0.6 s of bytes at 100 Mbit/s.
PROBE_SECONDS = 1.0
PROBE_REPEATS = 2
EXCHANGE_PHASES = 3
CALL_PHASES = 2  # a call of the average: its all-to-all and its all-gather (the screening's is once per exchange)


@dataclass(frozen=True)
class Calibration:
    mode: str  # the kernel shaper's (Shaper.mode) or InProcessShaper.mode
    label: str  # how the WAN was emulated, in words
    link_ratio: float  # one TCP stream's payload rate over the configured rate (mean)
    link_ratios: tuple[float, ...]  # each probe transfer: achieved over configured rate
    overhead_s: dict[int, float]  # fixed seconds per exchange, by number of islands
    exchange_ratio: dict[int, dict[float, float]]  # by islands, then by configured bits/s
    exchange_cpu_s_per_value: dict[int, float]  # screening seconds per value, by number of islands
    # the first member's end before the last's, by islands, then by configured bits/s
    end_spread_s: dict[int, dict[float, float]] = field(default_factory=dict)
    # what an exchange sends at once, in buckets of each link's shaper, by islands, then configured bits/s
    burst_fraction: dict[int, dict[float, float]] = field(default_factory=dict)
    # exchange_ratio in other wire formats than bf16: by bits, then islands, then configured bits/s
    exchange_ratio_by_bits: dict[int, dict[int, dict[float, float]]] = field(default_factory=dict)
    call_s: dict[int, float] = field(
        default_factory=dict
    )  # one more call's seconds, by number of islands
    # exchange_ratio of the large exchange in C calls: by calls, then islands, then configured bits/s
    exchange_ratio_by_calls: dict[int, dict[int, dict[float, float]]] = field(default_factory=dict)

    def spread_at(self, islands: int, bits_per_s: float) -> float:
        """``end_spread_s`` at a configured rate, as ``ratio_at``; 0 from a calibration saved before it
        was measured."""
        return (
            at_rate(self.end_spread_s[islands], bits_per_s) if islands in self.end_spread_s else 0.0
        )

    def to_json(self) -> str:
        return json_text(asdict(self), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Calibration:
        values = json.loads(text)
        for key in ("overhead_s", "exchange_cpu_s_per_value", "call_s"):
            values[key] = {int(m): v for m, v in values.get(key, {}).items()}
        for key in ("exchange_ratio", "end_spread_s", "burst_fraction"):
            values[key] = {
                int(m): {float(r): v for r, v in by_rate.items()}
                for m, by_rate in values.get(key, {}).items()
            }
        for key in ("exchange_ratio_by_bits", "exchange_ratio_by_calls"):
            values[key] = {
                int(outer): {
                    int(m): {float(r): v for r, v in by_rate.items()}
                    for m, by_rate in by_islands.items()
                }
                for outer, by_islands in values.get(key, {}).items()
            }
        values["link_ratios"] = tuple(values["link_ratios"])
        return cls(**values)

    def check_covers(self, islands: int) -> None:
        """Refuse a number of islands that the fixed cost, the ratio or the screening was not measured at."""
        tables = (self.overhead_s, self.exchange_ratio, self.exchange_cpu_s_per_value)
        if any(islands not in table for table in tables):
            covered = (
                ", ".join(map(str, sorted(set.intersection(*(set(table) for table in tables)))))
                or "no"
            )
            raise UserError(
                f"the calibration covers {covered} islands, not {islands}: "
                f"calibrate again with --workers {islands}"
            )

    def ratio_at(
        self, islands: int, bits_per_s: float, wire_bits: int = BITS["large"], calls: int = 1
    ) -> float:
        """``exchange_ratio`` at a configured rate (``in_series``), in wire format ``wire_bits`` where that
        was measured, else bf16's; made in ``calls`` calls where those were measured
        (``measured_calls``): times the calls' ratio over the one call's, both bf16 (exactly the calls'
        ratio in bf16)."""
        by_rate = self.exchange_ratio_by_bits.get(wire_bits, {}).get(
            islands, self.exchange_ratio[islands]
        )
        ratio = in_series(by_rate, bits_per_s)
        if self.measured_calls(calls, islands):
            split = in_series(self.exchange_ratio_by_calls[calls][islands], bits_per_s)
            ratio *= split / in_series(self.exchange_ratio[islands], bits_per_s)
        return ratio

    def measured_calls(self, calls: int, islands: int) -> bool:
        """Whether the exchange's rate was measured in ``calls`` calls (more than one) among ``islands``."""
        return calls > 1 and islands in self.exchange_ratio_by_calls.get(calls, {})

    def measured_bits(self, wire_bits: int, islands: int) -> bool:
        """Whether the exchange's rate was measured in wire format ``wire_bits`` among ``islands``."""
        return wire_bits == BITS["large"] or islands in self.exchange_ratio_by_bits.get(
            wire_bits, {}
        )

    def burst_bytes(self, islands: int, ring_bits_per_s: float, link_bits_per_s: float) -> float:
        """What a link emulated at ``link_bits_per_s`` sends at once at the start of an exchange among
        ``islands`` islands whose slowest link is configured at ``ring_bits_per_s``: the burst fraction
        at the ring's rate (``at_rate``) of the link's own bucket; 0 where none was measured."""
        if islands not in self.burst_fraction:
            return 0.0
        return at_rate(self.burst_fraction[islands], ring_bits_per_s) * burst_bytes(link_bits_per_s)


def in_series(ratio_by_rate: dict[float, float], bits_per_s: float) -> float:
    """An exchange ratio probed at some rates, at a configured rate: 1 / ratio linear in the rate
    between the probed rates, the nearest probed rate's outside them. The exchange's time per byte is
    the link's, 1 / (rate x e), plus CPU work per byte c in series with it, so 1 / ratio = 1 / e +
    c x rate: the work costs more of the rate the faster the link (int8: 93% of 10 Mbit/s, 82% of
    100; at 49 Mbit/s the exchange measured 0.89-0.90, where linear in log rate gave 0.86 and this 0.88)."""
    known = sorted(ratio_by_rate)
    if not known[0] < bits_per_s < known[-1]:
        return ratio_by_rate[known[0] if bits_per_s <= known[0] else known[-1]]
    return 1 / linear({rate: 1 / ratio for rate, ratio in ratio_by_rate.items()}, bits_per_s)


def at_rate(by_rate: dict[float, float], bits_per_s: float) -> float:
    """A value probed at some rates, at a configured rate: linear in log(rate) between the probed
    rates, the nearest probed rate's outside them."""
    return log_linear(by_rate, bits_per_s)[0]


def probe_rate(
    rate_bits_per_s: float,
    max_islands: int,
    kernel: bool | None,
    min_islands: int = 2,
    stem: str = VALIDATE_STEM,
    wire_bits: tuple[int, ...] = (),
    shaper: Shaper = Shaper(),
    exchange: bool = True,
    calls: tuple[int, ...] = (),
) -> tuple[dict | None, list[float], str, str]:
    """The probe's timings at one configured rate, for ``min_islands`` to ``max_islands`` islands, and
    a large exchange in each format of ``wire_bits`` and in each number of ``calls`` too: (timings,
    link rates, mode, label); without ``exchange``, the links alone (timings None)."""
    links = [LinkSpec(i, rate_bits_per_s, rate_bits_per_s, 0.0) for i in range(max_islands)]
    probe_bytes = round(rate_bits_per_s / BITS_PER_BYTE * PROBE_SECONDS)
    large = large_probe_values(probe_bytes)
    with open_wan(links, prefix=f"{stem}calib", kernel=kernel, shaper=shaper) as wan:
        rates: list[float] = []
        if isinstance(
            wan, EmulatedWAN
        ):  # kernel shaping: a TCP transfer's achieved rate is measured too
            rates = [measure_link(wan, 0, 1, probe_bytes) for _ in range(PROBE_REPEATS)]
        if not exchange:
            return None, rates, wan.mode, wan.label
        children = start_ranks(
            wan,
            ["-m", "islands.validation.exchange_probe"],
            max_islands,
            stdout=subprocess.PIPE,
            extra_env={
                LARGE_VARIABLE: str(large),
                MIN_MEMBERS_VARIABLE: str(min_islands),
                WIRE_BITS_VARIABLE: ",".join(map(str, wire_bits)),
                CALLS_VARIABLE: ",".join(map(str, calls)),
            },
        )
        assert children[0].stdout is not None  # piped
        output = children[0].stdout.read()
        run_all(children, "the calibration probe")
        timings = json.loads(output.strip().splitlines()[-1])
        timings["large_values"] = large
        return timings, rates, wan.mode, wan.label


def measure(
    max_islands: int,
    kernel: bool | None,
    rates_bits_per_s: tuple[float, ...] = PROBE_RATES_BITS_PER_S,
    min_islands: int = 2,
    stem: str = VALIDATE_STEM,
    wire_bits: tuple[int, ...] = (),
    shaper: Shaper = Shaper(),
    exchange: bool = True,
    calls: tuple[int, ...] = (),
) -> Calibration:
    """Probe every rate of ``rates_bits_per_s`` with ``min_islands`` .. ``max_islands`` islands; the
    fixed cost and the per-value cost are medians over the rates, the achieved rate and the end spread
    are kept per rate; the rate in each other wire format of ``wire_bits`` and in each number of
    ``calls`` (more than one) too. Without ``exchange`` (top-k cases only), the links alone."""
    wire_bits = tuple(sorted(set(wire_bits) - {BITS["large"]}))
    calls = tuple(sorted({c for c in calls if c > 1}))
    overheads: dict[int, list[float]] = {}
    per_call: dict[int, list[float]] = {}
    per_value: dict[int, list[float]] = {}
    spreads: dict[int, dict[float, float]] = {}
    ratios: dict[int, dict[float, float]] = {}
    bursts: dict[int, dict[float, float]] = {}
    by_bits: dict[int, dict[int, dict[float, float]]] = {}
    by_calls: dict[int, dict[int, dict[float, float]]] = {}
    achieved: list[float] = []
    for rate in rates_bits_per_s:
        timings, link_rates, mode, label = probe_rate(
            rate, max_islands, kernel, min_islands, stem, wire_bits, shaper, exchange, calls
        )
        achieved += [r / rate for r in link_rates]
        if timings is None:
            continue
        bucket_bytes = burst_bytes(rate) if mode != InProcessShaper.mode else 0
        for m in map(int, timings["screen"]["tiny"]):
            costs = exchange_costs(m, timings, rate, bucket_bytes)
            per_value.setdefault(m, []).append(costs.cpu_s_per_value)
            spreads.setdefault(m, {})[rate] = costs.end_spread_s
            overheads.setdefault(m, []).append(costs.overhead_s)
            per_call.setdefault(m, []).append(costs.call_s)
            ratios.setdefault(m, {})[rate] = costs.ratio
            if bucket_bytes:
                bursts.setdefault(m, {})[rate] = costs.burst_fraction
            for bits in wire_bits:
                ratio = wire_ratio(m, timings, rate, bits, costs.burst_fraction * bucket_bytes)
                by_bits.setdefault(bits, {}).setdefault(m, {})[rate] = ratio
            for count in calls:
                ratio = calls_ratio(m, timings, rate, count, costs.burst_fraction * bucket_bytes)
                by_calls.setdefault(count, {}).setdefault(m, {})[rate] = ratio
    overhead = {m: statistics.median(values) for m, values in overheads.items()}
    cpu = {m: statistics.median(values) for m, values in per_value.items()}
    link_ratio = sum(achieved) / len(achieved) if achieved else 1.0
    call = {m: statistics.median(values) for m, values in per_call.items()}
    return Calibration(
        mode,
        label,
        link_ratio,
        tuple(achieved),
        overhead,
        ratios,
        cpu,
        spreads,
        bursts,
        by_bits,
        call,
        by_calls,
    )


class ExchangeCosts(NamedTuple):
    cpu_s_per_value: float  # screening
    overhead_s: float  # fixed, per exchange
    ratio: float  # achieved over configured rate
    end_spread_s: float  # the last member's end after the first's
    burst_fraction: float  # sent at once, in buckets
    call_s: float  # one more collective call


def exchange_costs(
    islands: int, timings: dict, rate_bits_per_s: float, bucket_bytes: float = 0.0
) -> ExchangeCosts:
    """The costs of an exchange among ``islands`` islands, from one probe's timings at one configured
    rate over links whose buckets hold ``bucket_bytes``. The fixed cost and the rate are the last
    member's: the others finish up to the spread before it."""
    key, large_values, small_values = str(islands), timings["large_values"], tiny_values(islands)
    screen, average = timings["screen"], timings["average"]
    cpu_s = screening_s_per_value(
        screen["tiny"][key], screen["large"][key], small_values, large_values
    )
    overhead_s = screen["tiny"][key] + average["tiny"][key] - cpu_s * small_values
    ratio, burst_fraction = rate_and_burst(islands, timings, rate_bits_per_s, bucket_bytes)
    call_s = max(0.0, (average["calls"][key] - average["medium"][key]) / (CALLS - 1))
    return ExchangeCosts(
        cpu_s, overhead_s, ratio, timings["spread"]["large"][key], burst_fraction, call_s
    )


def screening_s_per_value(
    tiny_s: float, large_s: float, tiny_values: int, large_values: int
) -> float:
    """The slope of the screening time in the values screened; 0 where the large tensor screened no
    slower than the tiny one (the cost is below what the probe resolves)."""
    return max(0.0, (large_s - tiny_s) / (large_values - tiny_values))


def probe_volume_bytes(islands: int, values: int, bits: int = BITS["large"]) -> float:
    """Bytes each member sends in a probe exchange of ``values`` values in wire format ``bits`` (bf16
    by default; the ring volume)."""
    return ring_volume_bytes(islands, encoded_bytes(padded_length(values, islands), bits))


def wire_ratio(
    islands: int, timings: dict, rate_bits_per_s: float, bits: int, burst_bytes: float
) -> float:
    """``exchange_ratio`` in wire format ``bits``: its large exchange's bytes, less what the links send
    at once (``burst_bytes``, as measured in bf16), over its data time (its average less the tiny one's)."""
    key, average = str(islands), timings["average"]
    volume_bytes = probe_volume_bytes(islands, wire_values(timings["large_values"], bits), bits)
    data_s = average[wire_size(bits)][key] - average["tiny"][key]
    return (volume_bytes - burst_bytes) * BITS_PER_BYTE / data_s / rate_bits_per_s


def calls_ratio(
    islands: int, timings: dict, rate_bits_per_s: float, calls: int, burst_bytes: float
) -> float:
    """``exchange_ratio`` of the large exchange made in ``calls`` calls (``calls_size``): its bytes,
    less what the links send at once (``burst_bytes``, as measured in one call), over its data time
    (its average less the tiny one's); the calls' own costs are in it."""
    key, average = str(islands), timings["average"]
    volume_bytes = probe_volume_bytes(islands, timings["large_values"])
    data_s = average[calls_size(calls)][key] - average["tiny"][key]
    return (volume_bytes - burst_bytes) * BITS_PER_BYTE / data_s / rate_bits_per_s


def rate_and_burst(
    islands: int, timings: dict, rate_bits_per_s: float, bucket_bytes: float
) -> tuple[float, float]:
    """(achieved over configured rate, bytes sent at once in buckets) of the probe's exchanges.

    Each exchange's data time (its average less the tiny one's) is (volume - burst) / rate: the
    medium and the large exchange give the rate (the slope) and the burst (the intercept), the burst
    kept within [0, 1 bucket]: what the bucket holds when the exchange starts; more is noise (at 100
    Mbit/s a bucket is 5 ms of data, below what the probe resolves). The rate is then the large
    exchange's with that burst. Without a bucket the burst is 0 and the rate is the large exchange's."""
    key, average = str(islands), timings["average"]
    large_bytes = probe_volume_bytes(islands, timings["large_values"])
    large_s = average["large"][key] - average["tiny"][key]
    burst_bytes = 0.0
    if bucket_bytes > 0:
        medium_bytes = probe_volume_bytes(islands, medium_values(timings["large_values"]))
        medium_s = average["medium"][key] - average["tiny"][key]
        if large_s > medium_s:
            slope_bytes_per_s = (large_bytes - medium_bytes) / (large_s - medium_s)
            burst_bytes = min(max(0.0, large_bytes - slope_bytes_per_s * large_s), bucket_bytes)
    ratio = (large_bytes - burst_bytes) * BITS_PER_BYTE / large_s / rate_bits_per_s
    return ratio, burst_bytes / bucket_bytes if bucket_bytes > 0 else 0.0


def trainer_latency_s(latencies_s: list[float], phases: int = EXCHANGE_PHASES) -> float:
    """Emulated latency one exchange (or call) pays: per phase, the slowest member's own + farthest peer's."""
    ordered = sorted(latencies_s, reverse=True)
    return phases * (ordered[0] + ordered[1])


def simulator_overrides(
    calibration: Calibration,
    islands: list[dict],
    wire_bits: int = BITS["large"],
    calls: int = 1,
) -> list[str]:
    """``--set`` overrides that give the scaled scenario the achieved rates (of its wire format
    ``wire_bits``, in its ``calls`` calls where those were measured), the links' buckets, the trainer's
    fixed cost per exchange, its screening cost per value and its members' end spread. An exchange of
    several ``calls`` pays the fixed cost apart: each call two phases of latency through the ring's
    hops, and its ``call_s`` where the rate in its calls was not measured (else that rate holds the
    calls' costs), the rest once (``exchange.sync_overhead_s``)."""
    m = len(islands)
    calibration.check_covers(m)
    latencies_s = [i["latency_ms"] / MS_PER_S for i in islands]
    per_exchange_s = calibration.overhead_s[m] + trainer_latency_s(latencies_s)
    extra = []
    if calls > 1:
        if m not in calibration.call_s:
            raise UserError(
                f"the calibration has no cost per collective call among {m} islands (saved before "
                "calls were measured): give --calibration a new file"
            )
        call_s = 0.0 if calibration.measured_calls(calls, m) else calibration.call_s[m]
        per_call_s = call_s + trainer_latency_s(latencies_s, CALL_PHASES)
        extra = [f"exchange.sync_overhead_s={max(0.0, per_exchange_s - per_call_s)!r}"]
        per_exchange_s = per_call_s
    slowest_bits_per_s = (
        min(min(i["upload_gbps"], i["download_gbps"]) for i in islands) * BITS_PER_GBIT
    )
    ratio = calibration.ratio_at(m, slowest_bits_per_s, wire_bits, calls)
    spread_s = calibration.spread_at(m, slowest_bits_per_s)
    hop_latency_ms = per_exchange_s / (2 * (m - 1)) / 2 * MS_PER_S  # 2(M-1) hops, sender + receiver
    overrides = [
        f"network.exchange_cpu_s_per_value={calibration.exchange_cpu_s_per_value[m]!r}",
        f"network.exchange_end_spread_s={spread_s!r}",
        *extra,
    ]
    for index, island in enumerate(islands):
        for direction in ("upload", "download"):
            link_bits_per_s = island[f"{direction}_gbps"] * BITS_PER_GBIT
            burst_bytes = calibration.burst_bytes(m, slowest_bits_per_s, link_bits_per_s)
            overrides += [
                f"island.{index}.{direction}_gbps={island[f'{direction}_gbps'] * ratio!r}",
                f"island.{index}.{direction}_burst_bytes={burst_bytes!r}",
            ]
        overrides.append(f"island.{index}.latency_ms={hop_latency_ms!r}")
    return overrides
