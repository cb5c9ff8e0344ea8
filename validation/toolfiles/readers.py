"""Readers of what users measure their own hosts with: ``iperf3 -J`` (a client's JSON), nccl-tests'
``all_reduce_perf`` / ``all_gather_perf`` stdout, and ``ping`` output (``hosts_profile.py`` makes a network
profile of them). Each file is checked whole and refused in one line naming it, the key or line, and
the rule (``UserError``); nothing here needs torch.

* **iperf3**: the client's JSON (``iperf3 -c HOST -J``). ``start.connected[]`` names the two ends
  (every stream's the same pair), ``start.test_start`` the protocol (TCP), ``reverse`` (-R: the
  server sent) and ``bidir`` (--bidir: both at once). Each direction's rate is what its receiver got,
  summed over the parallel streams (-P): ``end.sum_received`` (and ``end.sum_received_bidir_reverse``,
  server to client, under --bidir). The smallest round trip the sending side's TCP saw,
  ``end.streams[].sender.min_rtt`` (microseconds; only a sending client's file has it), is kept as
  a fallback round trip: it was taken under load, so it includes queueing.
* **nccl-tests**: the table after the ``# size count type ...`` header; each row's time is the mean
  of its out-of-place and in-place times (microseconds). The bandwidth columns are not read: at WAN
  rates their two decimals of GB/s are mostly 0.00; the rates are the size over the time. The ranks
  are the ``#  Rank N ... on HOST device`` lines (their hosts are the members), else NCCL's
  ``nranks N`` lines (one host per rank); the test is the ``# Collective test starting:`` line, else
  the rows' reduction op (``none``, or no such column, is all_gather).
* **ping**: the round trip is the median of the per-packet ``time=`` values (as the trainer's own
  calibration takes the median of its pings), else (``ping -q``) the average of the ``rtt
  min/avg/max`` line (``round-trip`` on BSD, macOS and busybox).

A text file must end with a line end: one that does not was cut short. A text file cut at a line end
reads as the shorter run it then is (the summary names how many replies and sizes it used).
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from islands.errors import UserError
from islands.io import parse_json, read_bounded_text
from islands.numbers import is_number, is_number_between, is_positive_number
from islands.scenarios.spec import MAX_LATENCY_MS, shown_value

MICROSECONDS_PER_S = 1e6
MAX_TOOL_FILE_BYTES = 16 * 2**20  # an iperf3 -J run of a day at 1 s intervals is a few MB
REDUCTIONS = ("sum", "prod", "min", "max", "avg", "premulsum")
TESTS = {"all_reduce_perf": "all_reduce", "all_gather_perf": "all_gather"}


def refuse(path: str | Path, key: str, rule: str) -> UserError:
    return UserError(f"{path}: {key}: {rule}" if key else f"{path}: {rule}")


# iperf3 -J


@dataclass(frozen=True)
class Iperf3Run:
    path: str
    local_host: str  # the client, as it saw itself
    remote_host: str  # the server, as the client reached it
    target: str  # the server as the client was given it (iperf3 -c TARGET)
    sent_bits_per_s: float | None  # client to server, as the server received it
    received_bits_per_s: float | None  # server to client, as the client received it
    min_rtt_s: float | None  # the smallest TCP round trip the client saw sending, if it sent


def read_iperf3(path: str | Path) -> Iperf3Run:
    """The rates and round trip of one client's ``iperf3 -J`` file."""
    document = parse_json(
        read_bounded_text(path, "iperf3 -J file", MAX_TOOL_FILE_BYTES), path, "iperf3 -J file"
    )
    if not isinstance(document, dict):
        raise refuse(path, "", "not iperf3 -J output (a JSON object with start, intervals and end)")
    if "error" in document:
        raise refuse(
            path,
            "error",
            f"iperf3 reported {shown_value(document['error'])}: the test did not finish",
        )
    start = field(document, "start", dict, path)
    if "connecting_to" not in start:
        hint = (
            " (it is the server's: give the client's, iperf3 -c ... -J)"
            if "accepted_connection" in start
            else ""
        )
        raise refuse(path, "start.connecting_to", f"missing{hint}")
    target = field(
        field(start, "connecting_to", dict, path, "start."),
        "host",
        str,
        path,
        "start.connecting_to.",
    )
    test = field(start, "test_start", dict, path, "start.")
    protocol = field(test, "protocol", str, path, "start.test_start.")
    if protocol != "TCP":
        raise refuse(
            path,
            "start.test_start.protocol",
            f"{shown_value(protocol)}: calibrate reads TCP tests (iperf3 without -u)",
        )
    reverse, bidir = flag(test, "reverse", path), flag(test, "bidir", path)
    if reverse and bidir:
        raise refuse(
            path, "start.test_start", "reverse and bidir both set: iperf3 runs one or the other"
        )
    local_host, remote_host = connected_pair(start, path)
    field(document, "intervals", list, path)
    end = field(document, "end", dict, path)
    forward = received_rate(end, "sum_received", path)
    back = received_rate(end, "sum_received_bidir_reverse", path) if bidir else None
    return Iperf3Run(
        str(path),
        local_host,
        remote_host,
        target,
        sent_bits_per_s=None if reverse else forward,
        received_bits_per_s=forward if reverse else back,
        min_rtt_s=sending_min_rtt_s(end, reverse, path),
    )


def field(values: dict, key: str, kind: type, path: str | Path, prefix: str = "") -> Any:
    """``values[key]``, refused unless it is there and of ``kind`` (``prefix`` locates ``values``)."""
    if key not in values:
        raise refuse(path, prefix + key, "missing")
    if not isinstance(values[key], kind) or isinstance(values[key], bool) != (kind is bool):
        raise refuse(path, prefix + key, f"{shown_value(values[key])} is not {KIND_NAMES[kind]}")
    return values[key]


KIND_NAMES = {dict: "an object", list: "a list", str: "text", bool: "true or false"}


def flag(test: dict, key: str, path: str | Path) -> bool:
    """iperf3's 0/1 flags in ``start.test_start`` (``bidir`` is absent before iperf 3.7: 0)."""
    value = test.get(key, 0)
    if not (is_number(value) and value in (0, 1)):
        raise refuse(path, f"start.test_start.{key}", f"{shown_value(value)} is not 0 or 1")
    return value == 1


def connected_pair(start: dict, path: str | Path) -> tuple[str, str]:
    """(local_host, remote_host) of ``start.connected[]``: one pair for every stream."""
    streams = field(start, "connected", list, path, "start.")
    pairs = set()
    for index, stream in enumerate(streams):
        where = f"start.connected.{index}."
        if not isinstance(stream, dict):
            raise refuse(path, where.rstrip("."), f"{shown_value(stream)} is not an object")
        pairs.add(
            (
                field(stream, "local_host", str, path, where),
                field(stream, "remote_host", str, path, where),
            )
        )
    if len(pairs) != 1:
        raise refuse(
            path,
            "start.connected",
            "no stream"
            if not pairs
            else "its streams join different hosts: one pair of hosts per file",
        )
    return pairs.pop()


def received_rate(end: dict, key: str, path: str | Path) -> float:
    """``end[key].bits_per_second``: what the receiver got, over all parallel streams."""
    block = field(end, key, dict, path, "end.")
    if "bits_per_second" not in block:
        raise refuse(path, f"end.{key}.bits_per_second", "missing")
    rate = block["bits_per_second"]
    if not is_positive_number(rate):
        raise refuse(path, f"end.{key}.bits_per_second", f"{shown_value(rate)} is not a rate > 0")
    return float(rate)


def sending_min_rtt_s(end: dict, reverse: bool, path: str | Path) -> float | None:
    """The smallest ``min_rtt`` (microseconds) of the streams the client sent, or None (a client
    that only received, or a system whose iperf3 reports none: 0). A stream's ``sender.sender`` says
    whether the client sent it; before iperf 3.7 there is none, and the client sent unless -R."""
    streams = end.get("streams", [])
    if not isinstance(streams, list):
        raise refuse(path, "end.streams", f"{shown_value(streams)} is not a list")
    seen = []
    for index, stream in enumerate(streams):
        sender = stream.get("sender") if isinstance(stream, dict) else None
        if (
            not isinstance(sender, dict)
            or sender.get("sender", not reverse) is not True
            or "min_rtt" not in sender
        ):
            continue
        rtt = sender["min_rtt"]
        if not is_number_between(rtt, 0, MAX_LATENCY_MS * 1e3):
            raise refuse(
                path,
                f"end.streams.{index}.sender.min_rtt",
                f"{shown_value(rtt)} is not a round trip of "
                f"0 to {MAX_LATENCY_MS * 1e3:.0f} microseconds",
            )
        if rtt > 0:
            seen.append(rtt / MICROSECONDS_PER_S)
    return min(seen) if seen else None


# nccl-tests


@dataclass(frozen=True)
class NcclRow:
    size_bytes: int
    time_s: float  # the mean of the out-of-place and in-place times


@dataclass(frozen=True)
class NcclTable:
    path: str
    test: str  # all_reduce or all_gather
    test_from: str  # how the test was told (its start line, or its reduction op)
    ranks: int | None  # None: neither Rank lines nor NCCL's nranks
    members: int | None  # the hosts of the Rank lines; None without them
    rows: tuple[NcclRow, ...]  # by size, smallest first


def read_nccl_tests(path: str | Path) -> NcclTable:
    """The table of one nccl-tests run (its stdout, as ``all_reduce_perf ... > FILE`` saves it)."""
    lines = text_lines(path, "nccl-tests output")
    header = table_header(lines, path)
    times = [index for index, name in enumerate(header) if name == "time"]
    rows, reductions = [], set()
    failed = next(
        (line for line in lines if re.match(r"#\s*Out of bounds values\s*:.*FAILED", line)), None
    )
    if failed:
        raise refuse(
            path, "", f"'{failed.lstrip('# ').strip()}': the collective gave wrong results"
        )
    for number, line in enumerate(lines, 1):
        tokens = line.split()
        if not tokens or line.lstrip().startswith("#") or not re.fullmatch("[0-9]+", tokens[0]):
            continue  # header lines, and what NCCL or MPI print between the rows
        if len(tokens) != len(header):
            raise refuse(
                path, f"line {number}", f"{len(tokens)} columns where the header has {len(header)}"
            )
        if "redop" in header:
            reductions.add(tokens[header.index("redop")])
        rows.append(nccl_row(tokens, times, path, number))
    if not rows:
        raise refuse(
            path, "", "no row under the '# size count type ...' header: the run printed no sizes"
        )
    if any(later.size_bytes <= earlier.size_bytes for earlier, later in zip(rows, rows[1:])):
        raise refuse(path, "size", "the sizes do not rise row by row: one run per file")
    test, test_from = which_test(lines, reductions, path)
    ranks, members = rank_count(lines, path)
    return NcclTable(str(path), test, test_from, ranks, members, tuple(rows))


def text_lines(path: str | Path, what: str) -> list[str]:
    """The lines of a text file that must end with a line end (one that does not was cut short)."""
    text = read_bounded_text(path, what, MAX_TOOL_FILE_BYTES)
    if not text.strip():
        raise refuse(path, "", f"is empty: not {what}")
    if not text.endswith("\n"):
        raise refuse(path, "", "its last line has no line end: the file is cut short")
    return text.splitlines()


def table_header(lines: list[str], path: str | Path) -> list[str]:
    """The column names of the ``#  size  count  type ...`` line: two groups (out-of-place, then
    in-place) of time, algbw, busbw and #wrong (or error)."""
    for line in lines:
        names = line.lstrip("#").split()
        if line.startswith("#") and names[:2] == ["size", "count"]:
            times = [index for index, name in enumerate(names) if name == "time"]
            if (
                len(times) != 2
                or times[1] + 4 != len(names)
                or names[times[0] : times[1]] != names[times[1] :]
            ):
                raise refuse(
                    path,
                    "header",
                    f"'{' '.join(names)}' is not nccl-tests' two groups of time, "
                    "algbw, busbw and #wrong",
                )
            return names
    raise refuse(path, "header", "no '# size count type ...' line: not nccl-tests output")


def nccl_row(tokens: list[str], times: list[int], path: str | Path, number: int) -> NcclRow:
    """One size's row: its bytes and the mean of its two times, each > 0 microseconds; a row whose
    results were wrong is refused (its #wrong column: N/A where the run did not check; before
    nccl-tests 2.10 an ``error`` column held the largest deviation, which rounding makes non-zero:
    those runs say FAILED on their ``Out of bounds values`` line instead)."""
    seconds = []
    for index in times:
        wrong = tokens[index + 3]
        if wrong not in ("0", "N/A") and not re.fullmatch(r"[0-9.]+e[+-][0-9]+", wrong):
            raise refuse(
                path, f"line {number}", f"#wrong is {wrong}: the collective gave wrong results"
            )
        seconds.append(
            positive_number(tokens[index], path, f"line {number}: time") / MICROSECONDS_PER_S
        )
    size = int(tokens[0]) if len(tokens[0]) <= 16 else 0  # 2^53 has 16 digits
    if not 0 < size <= 2**53:
        raise refuse(path, f"line {number}: size", f"{tokens[0]} is not a size of 1 to 2^53 bytes")
    return NcclRow(size, statistics.fmean(seconds))


def positive_number(token: str, path: str | Path, key: str) -> float:
    try:
        value = float(token)
    except ValueError:
        raise refuse(path, key, f"{token!r} is not a number") from None
    if not is_positive_number(value):
        raise refuse(path, key, f"{token} is not a number > 0")
    return value


def which_test(lines: list[str], reductions: set[str], path: str | Path) -> tuple[str, str]:
    """all_reduce or all_gather, and how it was told."""
    for line in lines:
        started = re.match(r"#\s*Collective test starting:\s*(\S+)", line)
        if started:
            if started.group(1) not in TESTS:
                raise refuse(
                    path, "", f"a {started.group(1)} run: calibrate reads {' and '.join(TESTS)}"
                )
            return TESTS[started.group(1)], f"its start line names {started.group(1)}"
    if reductions <= {"none"}:
        return "all_gather", "its rows reduce nothing"
    if len(reductions) == 1 and reductions <= set(REDUCTIONS):
        return "all_reduce", f"its rows reduce by {reductions.pop()}"
    raise refuse(
        path, "redop", f"{', '.join(sorted(reductions))}: not one all_reduce or all_gather run"
    )


def rank_count(lines: list[str], path: str | Path) -> tuple[int | None, int | None]:
    """(ranks, hosts) from the ``#  Rank N ... on HOST device`` lines, else (NCCL's ``nranks N``,
    None), else (None, None)."""
    hosts: dict[int, str] = {}
    for line in lines:
        listed = re.match(r"#\s*Rank\s+(\d+)\s.*?\bon\s+(\S+)\s+device\b", line)
        if listed:
            rank = int(listed.group(1))
            if rank in hosts:
                raise refuse(path, "Rank lines", f"rank {rank} is listed twice: one run per file")
            hosts[rank] = listed.group(2)
    if hosts:
        if sorted(hosts) != list(range(len(hosts))):
            raise refuse(
                path,
                "Rank lines",
                f"ranks {', '.join(map(str, sorted(hosts)))} are not 0 to "
                f"{len(hosts) - 1}: a line is missing",
            )
        return len(hosts), len(set(hosts.values()))
    counts = {int(found) for line in lines for found in re.findall(r"\bnranks (\d+)\b", line)}
    if len(counts) > 1:
        raise refuse(
            path,
            "nranks",
            f"NCCL's lines say {', '.join(map(str, sorted(counts)))}: one run per file",
        )
    return (counts.pop(), None) if counts else (None, None)


# ping


@dataclass(frozen=True)
class PingRun:
    path: str
    target: str | None  # what was pinged: the name, then the address in brackets
    address: str | None
    rtt_s: float
    replies: int  # how many per-packet times the median is of (0: the rtt line)


NUMBER = r"[0-9]+(?:\.[0-9]+)?"
PER_PACKET = re.compile(rf"\btime[=<]({NUMBER}) ?ms\b")
SUMMARY = re.compile(
    rf"^(?:rtt|round-trip) min/avg/max(?:/(?:mdev|stddev))? = ({NUMBER})/({NUMBER})/({NUMBER})"
    rf"(?:/{NUMBER})? ms$"
)


def read_ping(path: str | Path) -> PingRun:
    """The round trip of one ``ping`` output: the median of its replies, else its rtt line's average."""
    lines = text_lines(path, "ping output")
    times = [float(found) for line in lines for found in PER_PACKET.findall(line)]
    if times:
        rtt_ms, replies = statistics.median(times), len(times)
    else:
        summaries = [SUMMARY.match(line.strip()) for line in lines]
        found = [summary for summary in summaries if summary]
        if not found:
            raise refuse(
                path,
                "",
                "no reply in it: neither 'time=' lines nor an 'rtt min/avg/max' line (all packets "
                "lost, or not ping's output)",
            )
        rtt_ms, replies = float(found[-1].group(2)), 0
    if not 0 <= rtt_ms <= MAX_LATENCY_MS:
        raise refuse(path, "time", f"a round trip of {rtt_ms:g} ms is past {MAX_LATENCY_MS:g} ms")
    pinged = next(
        (match for match in map(re.compile(r"^PING (\S+) \(([^)\s]+)\)").match, lines) if match),
        None,
    )
    return PingRun(
        str(path),
        pinged.group(1) if pinged else None,
        pinged.group(2) if pinged else None,
        rtt_ms / 1e3,
        replies,
    )
