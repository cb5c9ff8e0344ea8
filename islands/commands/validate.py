"""``islands validate FILE``: check the simulator against a real run of the scenario, scaled down.

The scenario is scaled to a run of some seconds (same algorithm, M up to --workers, P, bits and the
same transfer / compute per interval), trained for real over an emulated WAN (kernel shaping between
network namespaces as root, fair queues or with --shaper fifo one FIFO per island's egress, else
in-process shaping, said in the output), and the simulator plays
exactly that scaled scenario, calibrated once per invocation from measurements of the emulated links
and the trainer's exchange. Prints predicted beside measured with relative errors; writes
validation.json, overlay.png, the scaled scenario and both traces to --out. ``--suite`` runs the
bundled matrix of cases and prints one table with the error per case and the medians.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from islands.io import check_out_folder
from islands.units import BITS_PER_MBIT, MS_PER_S, NS_PER_S

from .common import path_text, read_source

RUNS_FOLDER = "runs"
MAX_WORKERS = 8
NEAR_RATE = 0.1  # a case's rate this close (relative) to a probed one is read at it
MAX_TARGET_WALL_S = 86400.0
CASE_FILES = ("validation.json", "overlay.png", "scaled.toml", "predicted_trace.csv")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "validate", help="compare the simulator with a real, scaled-down run", description=__doc__
    )
    parser.add_argument(
        "scenario",
        metavar="FILE",
        nargs="?",
        help="scenario TOML file or bundled name (not with --suite)",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a scenario key before scaling; repeatable",
    )
    parser.add_argument(
        "--suite", action="store_true", help="run the bundled validation matrix instead"
    )
    parser.add_argument(
        "--quick", action="store_true", help="with --suite: only its two shortest cases"
    )
    parser.add_argument(
        "--case",
        dest="cases",
        action="append",
        default=[],
        metavar="NAME",
        help="with --suite: only this case (repeatable; docs/validation.md lists them)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=4,
        metavar="N",
        help="at most N workers (islands x replicas, the islands by name) in the real run (default 4)",
    )
    parser.add_argument(
        "--step-time",
        type=float,
        default=0.2,
        metavar="S",
        help="scaled step time of the fastest island, seconds (default 0.2)",
    )
    parser.add_argument(
        "--target-wall",
        type=float,
        default=10.0,
        metavar="S",
        help="about how long each real run should train, seconds (default 10)",
    )
    parser.add_argument(
        "--compute",
        choices=("paced", "measured"),
        default="paced",
        help="paced: pace steps to the scaled step times and predict with them (default); "
        "measured: run unpaced and calibrate the simulator from measured step times",
    )
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="shape in-process over loopback even where namespaces are available",
    )
    parser.add_argument(
        "--shaper",
        choices=("fair", "fifo"),
        help="how each emulated link queues: fair, ACKs first and a queue per peer (fq_codel, "
        "SQM routers); fifo, one tbf FIFO per island's egress (tc tbf on each host, a cloud "
        "shaper); default: the scenario's network.egress_queue (fair for the suite); see "
        "docs/emulation.md",
    )
    parser.add_argument(
        "--queue-ms",
        type=float,
        metavar="MS",
        help="with a fifo: the FIFO's depth in ms of the link's rate (default: the scenario's "
        "network.fifo_queue_ms, 200)",
    )
    parser.add_argument(
        "--tcp-congestion-control",
        choices=("cubic", "bbr"),
        help="the islands' TCP congestion control, whatever the host's default: cubic (Linux's "
        "default) or bbr; default: the scenario's network.tcp_congestion_control (cubic); see "
        "docs/emulation.md",
    )
    parser.add_argument(
        "--calibration",
        metavar="FILE",
        type=path_text,
        help="reuse this calibration if it exists, else measure and save it there",
    )
    parser.add_argument(
        "--out", metavar="DIR", type=path_text, help="output folder (default runs/<time>-validate)"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    check_flags(args)
    scenario = None if args.suite else read_source(args).scenario
    shaper = chosen_shaper(args, scenario)
    out_dir = Path(args.out or Path(RUNS_FOLDER) / f"{time.strftime('%Y%m%d-%H%M%S')}-validate")
    saved = saved_calibration(args, shaper)
    from islands.emulation.link_specs import FIFO
    from islands.validation.scaling import scale

    if scenario is None:
        from islands.validation import suite

        cases = suite.select(args.quick, tuple(args.cases))
        scenarios = [(suite.case_scenario(case), case.workers) for case in cases]
        folders = [out_dir / case.name for case in cases]
    else:
        scenarios, folders = [(scenario, args.workers)], [out_dir]
    # the dense exchange is calibrated for the dense cases; a top-k case probes its own (validation/topk/costs.py)
    dense = [(s, workers) for s, workers in scenarios if s.schedule.compression == "none"]
    wire_bits = {s.schedule.bits for s, _ in dense}
    dense_islands = max((min(workers, s.worker_count) for s, workers in dense), default=0)
    if saved is not None and dense:
        check_covers(args.calibration, saved, dense_islands)
    check_outputs(args, out_dir, folders)
    if (
        scenario is None
    ):  # under one FIFO the exchange's rate is not smooth in the link's rate: probe each case's own
        own_rates = (
            {
                scale(
                    suite.case_scenario(case), suite.case_options(options(args), case)
                ).slowest_bits_per_s
                for case in cases
            }
            if shaper.kind == FIFO
            else set()
        )
    else:
        own_rates = {scale(scenario, options(args)).slowest_bits_per_s}
    calibration, kernel = calibrate(
        args,
        out_dir,
        max(dense_islands, 2),
        saved,
        tuple(sorted(wire_bits)),
        shaper,
        probe_rates(own_rates),
        exchange=bool(dense),
        calls=split_calls(s for s, _ in dense),
    )
    return (
        run_suite(args, out_dir, cases, calibration, kernel, shaper)
        if args.suite
        else run_one(args, out_dir, scenario, calibration, kernel, shaper)
    )


def check_flags(args: argparse.Namespace) -> None:
    """Every flag, before any scenario is read or anything measured; NaN fails every comparison."""
    from islands.errors import UserError

    if args.suite == bool(args.scenario):
        raise UserError("give a scenario FILE or --suite (not both)")
    if args.quick and not args.suite:
        raise UserError("--quick goes with --suite")
    if args.cases and not args.suite:
        raise UserError("--case goes with --suite")
    if args.cases and args.quick:
        raise UserError("--case or --quick, not both")
    if args.suite and args.overrides:
        raise UserError("--set goes with a scenario FILE; the suite's cases set their own keys")
    if not 2 <= args.workers <= MAX_WORKERS:
        raise UserError(
            f"--workers {args.workers}: must be 2 to {MAX_WORKERS} (one process per island on this "
            "machine)"
        )
    if not 0.05 <= args.step_time <= 5:
        raise UserError(f"--step-time {args.step_time:g}: must be 0.05 to 5 seconds")
    if not 0 < args.target_wall <= MAX_TARGET_WALL_S:
        raise UserError(
            f"--target-wall {args.target_wall:g}: must be above 0 and at most {MAX_TARGET_WALL_S:g} "
            "seconds (a day)"
        )


def chosen_shaper(args: argparse.Namespace, scenario=None):
    """The kernel shaper: the links ``scenario`` declares (``network.egress_queue``,
    ``fifo_queue_ms``, ``tcp_congestion_control``; fair queues and CUBIC for the suite), each
    replaced by its flag where given (--shaper, --queue-ms, --tcp-congestion-control); refused in
    one line where they do not go together or the emulation cannot build them."""
    from islands.emulation import Shaper
    from islands.emulation.link_specs import CUBIC, DEFAULT_QUEUE_MS, FAIR, FIFO
    from islands.errors import UserError

    network = None if scenario is None else scenario.network
    kind = args.shaper or (FAIR if network is None else network.egress_queue)
    why = "--shaper fifo" if args.shaper else 'the scenario\'s network.egress_queue = "fifo"'
    if args.queue_ms is not None and kind != FIFO:
        raise UserError(
            "--queue-ms goes with --shaper fifo (the fair shaper's queues hold 200 ms each)"
        )
    if args.in_process and kind == FIFO:
        raise UserError(f"{why} needs the kernel's shaping, not --in-process (which has no queue)")
    tcp = args.tcp_congestion_control or (
        CUBIC if network is None else network.tcp_congestion_control
    )
    if args.in_process and tcp != CUBIC:
        named = (
            "--tcp-congestion-control"
            if args.tcp_congestion_control
            else f"the scenario's network.tcp_congestion_control = {tcp!r}"
        )
        raise UserError(f"{named} goes with the kernel's shaping, not --in-process (over loopback)")
    if (
        args.queue_ms is None
        and kind == FIFO
        and network is not None
        and network.egress_queue == FIFO
    ):
        queue_ms, source = network.fifo_queue_ms, "network.fifo_queue_ms"
        hint = " (what the emulation builds: give --queue-ms)"
    else:
        queue_ms = DEFAULT_QUEUE_MS if args.queue_ms is None else args.queue_ms
        source, hint = "--queue-ms", ""
    try:
        return Shaper(kind, queue_ms, tcp)
    except UserError as error:
        raise UserError(f"{source}: {error}{hint}") from None


def saved_calibration(args: argparse.Namespace, shaper):
    """The calibration --calibration names, checked now; None where it is to be measured (and then
    written there: a trial write now). One measured under another kernel shaper than ``shaper`` is
    refused: a FIFO's exchange is slower than fair queues' (docs/emulation.md)."""
    from islands.emulation import InProcessShaper
    from islands.errors import UserError
    from islands.io import check_not_folder, temporary_beside
    from islands.validation.calibration_file import read_calibration

    if not args.calibration:
        return None
    path = Path(args.calibration)
    if path.exists():
        calibration = read_calibration(path)
        if args.in_process and calibration.mode != InProcessShaper.mode:
            raise UserError(
                f"{path}: measured with {calibration.mode} shaping; --in-process runs need a "
                "calibration measured in-process: give --calibration a new file"
            )
        if calibration.mode not in (InProcessShaper.mode, shaper.mode):
            raise UserError(
                f"{path}: measured with {calibration.mode} shaping; this run shapes with {shaper.mode} "
                f"(--shaper {shaper.kind} --tcp-congestion-control {shaper.tcp}): give --calibration a new file"
            )
        return calibration
    check_not_folder(path)
    temporary_beside(path).unlink()
    return None


def check_covers(path: str, calibration, max_islands: int) -> None:
    """Refuse a saved calibration that lacks a number of islands the runs will have, before any run."""
    from islands.errors import UserError

    for islands in range(2, max_islands + 1):
        try:
            calibration.check_covers(islands)
        except UserError:
            raise UserError(
                f"{path}: measured for {', '.join(map(str, sorted(calibration.overhead_s)))} islands, "
                f"not {islands}: give --calibration a new file to measure 2 to {max_islands} islands "
                "into"
            ) from None


def check_outputs(args: argparse.Namespace, out_dir: Path, folders: list[Path]) -> None:
    """Refuse, before any work: an --out that cannot be written, holds an earlier validation's run,
    or whose files would overwrite an input (the scenario, --calibration) or one another."""
    from islands.errors import UserError
    from islands.io import refuse_shared_paths
    from islands.trainer.outputs import run_outputs

    check_out_folder("--out", out_dir)
    for folder in folders:
        if run_outputs(folder / "run"):
            raise UserError(
                f"--out {out_dir}: {folder / 'run'} holds an earlier run; give another --out"
            )
    calibration = Path(args.calibration) if args.calibration else None
    measured = calibration is None or not calibration.exists()
    files = [folder / name for folder in folders for name in CASE_FILES]
    files += [out_dir / "suite.json"] if args.suite else []
    outputs: dict[str, Path | None] = {
        f"--out's {path.relative_to(out_dir)}": path for path in files
    }
    outputs["--calibration"] = (calibration or out_dir / "calibration.json") if measured else None
    refuse_shared_paths(
        outputs, {"the scenario": args.scenario, "--calibration": None if measured else calibration}
    )


def options(args: argparse.Namespace):
    from islands.validation.scaling import ScaleOptions

    return ScaleOptions(
        step_time_s=args.step_time,
        max_workers=args.workers,
        target_wall_s=args.target_wall,
        pace=args.compute == "paced",
    )


def probe_rates(own_rates: set[float]) -> tuple[float, ...]:
    """The calibration's rates: 10 and 100 Mbit/s, between which the rate of an exchange is read, and
    the cases' own slowest rates, where it is read as measured (``calibration.in_series``); a case's
    rate within ``NEAR_RATE`` of one already probed is read there (each rate costs about a minute)."""
    from islands.validation.calibration import PROBE_RATES_BITS_PER_S

    kept = list(PROBE_RATES_BITS_PER_S)
    for rate in sorted(round(rate) for rate in own_rates):
        if all(abs(rate / other - 1) > NEAR_RATE for other in kept):
            kept.append(rate)
    return tuple(sorted(kept))


def split_calls(scenarios) -> tuple[int, ...]:
    """The collective calls per whole-model exchange of the scenarios not exchanged in one
    (``scaling.scaled_calls``), each once, in order."""
    from islands.simulator.network.collectives import calls_of

    return tuple(
        sorted(
            {calls_of(s, s.payload_bytes) for s in scenarios if s.exchange.calls != "flat"} - {1}
        )
    )


def calibrate(
    args: argparse.Namespace,
    out_dir: Path,
    max_islands: int,
    saved,
    wire_bits: tuple[int, ...],
    shaper,
    rates_bits_per_s: tuple[float, ...],
    exchange: bool = True,
    calls: tuple[int, ...] = (),
):
    """``saved`` (read and checked by ``saved_calibration``), or one measured now at ``rates_bits_per_s``,
    in the wire formats ``wire_bits`` and in each number of ``calls``, and written to --calibration
    (else into --out); without ``exchange`` (top-k cases only, each probing its own exchange) the
    links alone."""
    from islands.io import write_text
    from islands.validation.calibration import measure

    kernel = False if args.in_process else None
    calibration = saved
    if calibration is None:
        rates = ", ".join(f"{rate / BITS_PER_MBIT:.3g}" for rate in rates_bits_per_s)
        formats = ", ".join(f"{bits}-bit" for bits in wire_bits) + "".join(
            f", in {count} calls" for count in calls
        )
        what = (
            f"TCP transfers and the trainer's exchange ({formats}) among 2 to {max_islands} islands"
            if exchange
            else "TCP transfers"
        )
        print(f"calibrating: {what}, at {rates} Mbit/s ...", flush=True)
        calibration = measure(
            max_islands,
            kernel,
            rates_bits_per_s,
            wire_bits=wire_bits,
            shaper=shaper,
            exchange=exchange,
            calls=calls,
        )
        write_text(args.calibration or out_dir / "calibration.json", calibration.to_json())
    print(calibration_line(calibration), flush=True)
    return calibration, kernel


def per_rate(by_islands: dict[int, dict[float, float]], text) -> str:
    """``M=2: <text(value)> at 10, ... Mbit/s; M=3: ...``"""
    return "; ".join(
        f"M={m}: "
        + ", ".join(
            f"{text(value)} at {rate / BITS_PER_MBIT:.0f}"
            for rate, value in sorted(by_rate.items())
        )
        + " Mbit/s"
        for m, by_rate in sorted(by_islands.items())
    )


def calibration_line(calibration) -> str:
    ratios = per_rate(calibration.exchange_ratio, lambda ratio: f"{100 * ratio:.0f}%")
    for bits, by_islands in sorted(calibration.exchange_ratio_by_bits.items()):
        ratios += f"; {bits}-bit {per_rate(by_islands, lambda ratio: f'{100 * ratio:.0f}%')}"
    for calls, by_islands in sorted(calibration.exchange_ratio_by_calls.items()):
        ratios += f"; in {calls} calls {per_rate(by_islands, lambda ratio: f'{100 * ratio:.0f}%')}"
    bursts = per_rate(calibration.burst_fraction, lambda fraction: f"{fraction:.2f}")
    overheads = ", ".join(
        f"M={m}: {MS_PER_S * s:.1f} ms" for m, s in sorted(calibration.overhead_s.items())
    )
    screening = ", ".join(
        f"M={m}: {NS_PER_S * s:.1f} ns"
        for m, s in sorted(calibration.exchange_cpu_s_per_value.items())
    )
    spreads = per_rate(calibration.end_spread_s, lambda spread_s: f"{MS_PER_S * spread_s:.1f} ms")
    stream = (
        f"one TCP stream gets {100 * calibration.link_ratio:.1f}% of the configured rate"
        if calibration.link_ratios
        else "no TCP probe (the in-process shaper paces the payload itself)"
    )
    if not calibration.overhead_s:
        return f"calibration ({calibration.mode}): {stream}; the dense exchange not probed"
    return (
        f"calibration ({calibration.mode}): {stream}; the trainer's exchange {ratios}; "
        f"fixed cost per exchange {overheads}; screening per value {screening}"
        + (f"; sent at once, in the shapers' buckets, {bursts}" if bursts else "")
        + (f"; last member's end after the first's {spreads}" if spreads else "")
    )


def run_one(
    args: argparse.Namespace, out_dir: Path, scenario, calibration, kernel: bool | None, shaper
) -> int:
    from islands.validation.case import validate_case
    from islands.validation.compare import figures_table, syncs_table

    comparison = validate_case(
        scenario.name, scenario, options(args), calibration, out_dir, kernel, shaper
    )
    print()
    print(f"{scenario.name}: predicted (simulator, calibrated) vs measured (real run, scaled)")
    print(figures_table(comparison))
    print()
    print(syncs_table(comparison))
    print()
    print("\n".join(comparison.notes))
    print(f"wrote {out_dir / 'validation.json'}, {out_dir / 'overlay.png'}")
    return 0


def run_suite(
    args: argparse.Namespace, out_dir: Path, cases, calibration, kernel: bool | None, shaper
) -> int:
    from islands.validation import suite

    results = suite.run_suite(
        cases,
        options(args),
        calibration,
        out_dir,
        kernel,
        progress=lambda line: print(line, flush=True),
        shaper=shaper,
    )
    suite.write_suite_json(out_dir / "suite.json", results, calibration)
    print()
    print(suite.suite_table(results))
    print(suite.verdict(results))
    gathered = suite.gather_verdict(results)
    if gathered:
        print(gathered)
    print(f"wrote {out_dir / 'suite.json'} and one folder per case")
    return 0
