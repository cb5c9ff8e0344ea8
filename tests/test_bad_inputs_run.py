"""Every bad input to the run-side commands (train, validate, calibrate, compare, trace, quality) is
answered in one line with exit code 2, before any training, calibrating or measuring: a test of
each case, with a copy of a small workspace (a scenario, a finished run folder, a calibration)
damaged as the case says, each command run from inside it.

The same cases are docs/bad-inputs-run.md, each with the line it is answered with:
``python tests/test_bad_inputs_run.py > docs/bad-inputs-run.md`` writes it, and
``test_the_document_shows_every_case_and_its_answer`` fails when it is out of date.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from islands.cli import main
from islands.io import json_text, write_table
from islands.simulator import simulate
from islands.validation.calibration import Calibration

sys.path.insert(0, str(Path(__file__).parent))
from helpers.scenarios import SCENARIO, make_scenario  # noqa: E402  (run as a script too: it writes the docs)

DOCUMENT = Path(__file__).resolve().parents[1] / "docs" / "bad-inputs-run.md"
UNWRITABLE = "/proc/islands-bad-input"  # no one, root included, can create a file there
LONG_WORK = (
    "islands.trainer.launch.launch_local",
    "islands.validation.calibration.measure",
    "islands.validation.case.train_scaled",
    "islands.validation.case.train_elastic",
    "islands.commands.calibrate.emulate",
    "islands.validation.hostprobe.main",
    "islands.analysis.quality.quality_runs.measure_profile",
)


def make_workspace(folder: Path) -> None:
    """scenario.toml (4 workers), run/ (what `islands train` writes for a run that went exactly as
    predicted), calibration.json (for 2 to 4 islands) and profile.json (a network profile)."""
    (folder / "scenario.toml").write_text(SCENARIO)
    result = simulate(make_scenario())
    (folder / "run").mkdir()
    (folder / "run" / "summary.json").write_text(json_text(result.summary))
    (folder / "run" / "run.json").write_text(
        json.dumps({"scenario": "test", "algorithm": "diloco", "bits": 16})
    )
    write_table(result.trace, folder / "run" / "trace.csv")
    by_islands = range(2, 5)
    calibration = Calibration(
        "in-process",
        "test",
        1.0,
        (),
        {m: 0.01 for m in by_islands},
        {m: {1e7: 0.9} for m in by_islands},
        {m: 1e-8 for m in by_islands},
    )
    (folder / "calibration.json").write_text(calibration.to_json())
    (folder / "profile.json").write_text(
        json.dumps({"kind": "islands network profile", "version": 1, "hosts": []})
    )


# damages: each takes the workspace folder and changes one thing


def write(name: str, text: str | bytes) -> Callable[[Path], None]:
    def damage(folder: Path) -> None:
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text if isinstance(text, bytes) else text.encode())

    return damage


def remove(name: str) -> Callable[[Path], None]:
    return lambda folder: (folder / name).unlink()


def folder_for(name: str) -> Callable[[Path], None]:
    def damage(folder: Path) -> None:
        (folder / name).unlink()
        (folder / name).mkdir()

    return damage


def edit_json(name: str, change: Callable[[dict], None]) -> Callable[[Path], None]:
    def damage(folder: Path) -> None:
        document = json.loads((folder / name).read_text())
        change(document)
        (folder / name).write_text(json.dumps(document))

    return damage


def setting(key: str, value) -> Callable[[dict], None]:
    return lambda document: document.__setitem__(key, value)


def calibration_value(table: str, islands: str, value) -> Callable[[dict], None]:
    return lambda document: document[table].__setitem__(islands, value)


def trace_line(line: int, text: str) -> Callable[[Path], None]:
    """Replace line ``line`` (1: the header) of run/trace.csv."""

    def damage(folder: Path) -> None:
        path = folder / "run" / "trace.csv"
        lines = path.read_text().splitlines(keepends=True)
        lines[line - 1] = text + "\n"
        path.write_text("".join(lines))

    return damage


def cut_trace(folder: Path) -> None:
    """run/trace.csv cut in the middle of a line, as a full disk or a killed copy leaves it."""
    path = folder / "run" / "trace.csv"
    path.write_bytes(path.read_bytes()[:1005])


def steps_log(steps=range(1, 301), every: int = 100, rank: str = "", shift: int = 0) -> str:
    """A per-step log of the workspace's run: 1 s per step, a 24 s sync after every ``every``-th step
    (of steps numbered ``shift`` more)."""
    rows = ["step,wall_s,compute_s,blocked_s,synced" + (",rank" if rank else "")]
    synced = [(s + shift) % every == 0 for s in steps]
    rows += [
        f"{s},{25 if sync else 1},1,{24 if sync else 0},{int(sync)}" + (f",{rank}" if rank else "")
        for s, sync in zip(steps, synced)
    ]
    return "\n".join(rows) + "\n"


def chrome_trace(*events: dict) -> str:
    return (
        json.dumps(
            {"traceEvents": [{"ph": "X", "name": "ProfilerStep#0", "ts": 0, "dur": 1000}, *events]}
        )
        + "\n"
    )


TITAN_LINE = "[rank0]:[titan] 2025-01-22 10:00:{:02d},000 - root - INFO - step: {}  loss:  7.1234  tps: 1,234\n"


def every_worker_leaves(folder: Path) -> None:
    with open(folder / "scenario.toml", "a") as scenario:
        scenario.write('[[event]]\nat_s = 50\nisland = "a"\nkind = "leave"\n')


def copy(source: str, target: str) -> Callable[[Path], None]:
    def damage(folder: Path) -> None:
        (folder / target).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(folder / source, folder / target)

    return damage


@dataclass(frozen=True)
class Case:
    command: str
    what: str  # the bad input, in words
    argv: tuple[str, ...]  # after the command's name, run inside the workspace
    message: str  # a part of the one line that answers it
    damage: Callable[[Path], None] | None = None

    @property
    def id(self) -> str:
        return f"{self.command}: {self.what}"


def cases(command: str, base: tuple[str, ...], rows) -> list[Case]:
    """``rows``: (what, extra arguments, message[, damage]); each case runs ``command *base *extra``."""
    return [Case(command, row[0], (*base, *row[1]), row[2], *row[3:]) for row in rows]


STRIPED_JOINER = """
[[island]]
name = "late"
present = false
step_time_s = 1.0
bandwidth_gbps = 1.0
[[event]]
at_s = 10.0
island = "late"
kind = "join"
"""

TRAIN = cases(
    "train",
    ("scenario.toml",),
    [
        ("unwritable --out", ("--out", UNWRITABLE), f"--out {UNWRITABLE}: cannot write there"),
        (
            "--out is a file",
            ("--out", "scenario.toml"),
            "--out scenario.toml: is a file; name a folder",
        ),
        ("--out is empty", ("--out", ""), "argument --out: is empty: give a path"),
        ("--out holds a run", ("--out", "run"), "--out run: holds a run already"),
        (
            "--out --force would remove the --data text",
            ("--out", "run", "--force", "--data", "run/trace.csv"),
            "--out's trace.csv would overwrite --data",
        ),
        (
            "--workers not a number",
            ("--workers", "two"),
            "argument --workers: invalid int value: 'two'",
        ),
        (
            "--workers 0",
            ("--workers", "0"),
            "--workers 0: must be between 2 and the scenario's 4 workers",
        ),
        ("--workers negative", ("--workers", "-3"), "--workers -3: must be between 2"),
        ("--workers huge", ("--workers", "99999"), "--workers 99999: must be between 2"),
        ("--stop-after 0", ("--stop-after", "0"), "--stop-after 0: must be >= 1"),
        ("--stop-after negative", ("--stop-after", "-1"), "--stop-after -1: must be >= 1"),
        (
            "--stop-after NaN",
            ("--stop-after", "nan"),
            "argument --stop-after: invalid int value: 'nan'",
        ),
        (
            "an offload of no known kind",
            ("--set", "island.0.offload=cpu"),
            "island.0.offload: must be one of 'none', 'optimizer' (got 'cpu')",
        ),
        (
            "top-k payloads from several ranks per island",
            ("--set", "schedule.compression=topk", "--set", "trainer.ranks_per_island=2"),
            "trainer.ranks_per_island: 2: a top-k exchange is sent by one rank per island (set 1)",
        ),
        (
            "top-k payloads in an elastic run",
            ("--set", "schedule.compression=topk", "--set", "trainer.elastic=true"),
            "trainer.elastic: true: an elastic run does not carry top-k payloads",
        ),
        (
            "more gathered peers than islands trained",
            (
                "--workers",
                "2",
                "--set",
                "schedule.compression=topk",
                "--set",
                "network.gather=store",
                "--set",
                "schedule.gather_peers=3",
            ),
            "schedule.gather_peers: must be at most the 2 islands trained (got 3)",
        ),
        (
            "a pseudo-gradient's backward overlap",
            ("--set", "schedule.backward_overlap=0.5"),
            "schedule.backward_overlap: the real trainer sends a pseudo-gradient after the whole "
            "backward pass, so it trains only 0 (got 0.5); the overlap is simulated only",
        ),
        (
            "tensor sizes of another model than the trainer's",
            (
                "--set",
                "exchange.calls=buckets",
                "--set",
                "exchange.tensor_values=[6e8, 4e8]",
            ),
            "exchange.tensor_values: lists 2 tensors, and the trainer's GPT of 2 blocks has 28 (12 per "
            "block, 2 embeddings, the final LayerNorm's 2): list its own, or leave the key out",
        ),
        ("--data missing", ("--data", "nowhere"), "nowhere: no such file or folder"),
        (
            "--data endless",
            ("--data", "/dev/zero"),
            "/dev/zero: holds no UTF-8 text file to train on",
        ),
        (
            "a joiner's state striped over the holders",
            ("--out", "striped", "--set", "network.weights_from=striped"),
            "network.weights_from: the real trainer sends a joiner the whole state from the fastest "
            "holder (got 'striped'); \"striped\" is simulated only",
            write("scenario.toml", SCENARIO + STRIPED_JOINER),
        ),
        (
            "a joiner whose top-k payloads go through a store",
            (
                "--out",
                "stored",
                "--set",
                "schedule.compression=topk",
                "--set",
                "schedule.bits=2",
                "--set",
                "network.gather=store",
            ),
            'network.gather = "store": islands that leave and join (churn, trainer.elastic) do not '
            "exchange through an object store in the real trainer yet",
            write("scenario.toml", SCENARIO + STRIPED_JOINER),
        ),
        (
            "a store that answers before it is asked",
            (
                "--set",
                "schedule.compression=topk",
                "--set",
                "network.gather=store",
                "--set",
                "store.request_ms=-1",
            ),
            "store.request_ms: must be >= 0 ms (got -1.0)",
        ),
        (
            "a reduce-scatter around the ring",
            ("--out", "ringed", "--set", "network.reduce_scatter=ring"),
            "network.reduce_scatter: the real trainer's all-reduce makes its first pass as an "
            "all-to-all (got 'ring'); \"ring\" is simulated only",
        ),
        ("--resume without a checkpoint", ("--resume", "run"), "run: no checkpoint to resume from"),
        (
            "--resume no such folder",
            ("--resume", "nowhere"),
            "--resume nowhere: no such run folder",
        ),
        (
            "--resume a file",
            ("--resume", "scenario.toml"),
            "--resume scenario.toml: no such run folder",
        ),
    ],
) + cases(
    "train",
    (),
    [
        ("no scenario file", ("nowhere.toml",), "nowhere.toml: no such file or bundled scenario"),
    ],
)

VALIDATE = cases(
    "validate",
    ("scenario.toml",),
    [
        (
            "--target-wall NaN",
            ("--target-wall", "nan"),
            "--target-wall nan: must be above 0 and at most 86400 seconds",
        ),
        ("--target-wall infinite", ("--target-wall", "inf"), "--target-wall inf: must be above 0"),
        (
            "--target-wall overflowing",
            ("--target-wall", "1e999"),
            "--target-wall inf: must be above 0",
        ),
        ("--target-wall negative", ("--target-wall", "-1"), "--target-wall -1: must be above 0"),
        ("--target-wall 0", ("--target-wall", "0"), "--target-wall 0: must be above 0"),
        (
            "--target-wall not a number",
            ("--target-wall", "ten"),
            "argument --target-wall: invalid float value: 'ten'",
        ),
        ("--step-time NaN", ("--step-time", "nan"), "--step-time nan: must be 0.05 to 5 seconds"),
        ("--step-time 0", ("--step-time", "0"), "--step-time 0: must be 0.05 to 5 seconds"),
        (
            "--step-time negative",
            ("--step-time", "-0.2"),
            "--step-time -0.2: must be 0.05 to 5 seconds",
        ),
        (
            "--step-time huge",
            ("--step-time", "1e9"),
            "--step-time 1e+09: must be 0.05 to 5 seconds",
        ),
        ("--workers 1", ("--workers", "1"), "--workers 1: must be 2 to 8"),
        ("--workers huge", ("--workers", "99999"), "--workers 99999: must be 2 to 8"),
        (
            "--workers not a whole number",
            ("--workers", "2.5"),
            "argument --workers: invalid int value: '2.5'",
        ),
        ("--compute unknown", ("--compute", "fast"), "argument --compute: invalid choice: 'fast'"),
        (
            "--calibration is a folder",
            ("--calibration", "run"),
            "run: is a folder, not a calibration",
        ),
        (
            "--calibration empty file",
            ("--calibration", "calibration.json"),
            "calibration.json: not valid JSON",
            write("calibration.json", ""),
        ),
        (
            "--calibration broken JSON",
            ("--calibration", "calibration.json"),
            "calibration.json: not valid JSON",
            write("calibration.json", '{"mode": '),
        ),
        (
            "--calibration is a network profile",
            ("--calibration", "profile.json"),
            "profile.json: is a network profile (islands calibrate writes it for --network-profile), not a calibration",
        ),
        (
            "--calibration is another JSON file",
            ("--calibration", "run/summary.json"),
            "run/summary.json: no mode, label, link_ratio",
        ),
        (
            "--calibration not UTF-8",
            ("--calibration", "calibration.json"),
            "calibration.json: this calibration is not UTF-8",
            write("calibration.json", b"\xff\xfe"),
        ),
        (
            "--calibration with NaN",
            ("--calibration", "calibration.json"),
            "calibration.json: holds NaN",
            write("calibration.json", '{"link_ratio": NaN}'),
        ),
        (
            "--calibration with a null ratio",
            ("--calibration", "calibration.json"),
            "calibration.json: exchange_ratio.2.10000000.0 must be a finite number, 0.001 or more (got None)",
            edit_json(
                "calibration.json", calibration_value("exchange_ratio", "2", {"10000000.0": None})
            ),
        ),
        (
            "--calibration with a zero ratio",
            ("--calibration", "calibration.json"),
            "calibration.json: exchange_ratio.2.10000000.0 must be a finite number, 0.001 or more (got 0)",
            edit_json(
                "calibration.json", calibration_value("exchange_ratio", "2", {"10000000.0": 0})
            ),
        ),
        (
            "--calibration with a negative cost",
            ("--calibration", "calibration.json"),
            "calibration.json: overhead_s.3 must be a finite number, 0 or more (got -0.5)",
            edit_json("calibration.json", calibration_value("overhead_s", "3", -0.5)),
        ),
        (
            "--calibration without rates",
            ("--calibration", "calibration.json"),
            "calibration.json: exchange_ratio.2: give its values by probed rates",
            edit_json("calibration.json", calibration_value("exchange_ratio", "2", {})),
        ),
        (
            "--calibration with an unknown wire format",
            ("--calibration", "calibration.json"),
            "calibration.json: exchange_ratio_by_bits.12: a wire format is one of 32, 16, 8, 4 bits",
            edit_json(
                "calibration.json",
                setting("exchange_ratio_by_bits", {"12": {"2": {"10000000.0": 0.9}}}),
            ),
        ),
        (
            "--calibration with a negative int8 ratio",
            ("--calibration", "calibration.json"),
            "calibration.json: exchange_ratio_by_bits.8.2.10000000.0 must be a finite number, 0.001 or more (got -0.9)",
            edit_json(
                "calibration.json",
                setting("exchange_ratio_by_bits", {"8": {"2": {"10000000.0": -0.9}}}),
            ),
        ),
        (
            "--calibration with int8 ratios for 1 island",
            ("--calibration", "calibration.json"),
            "calibration.json: exchange_ratio_by_bits.8.1: give ratios by 2 islands or more",
            edit_json(
                "calibration.json",
                setting("exchange_ratio_by_bits", {"8": {"1": {"10000000.0": 0.9}}}),
            ),
        ),
        (
            "--calibration with a rate written twice",
            ("--calibration", "calibration.json"),
            "calibration.json: exchange_ratio.2: the rate 1e+07 is written twice ('10000000.0' and '1e7')",
            edit_json(
                "calibration.json",
                calibration_value("exchange_ratio", "2", {"10000000.0": 0.9, "1e7": 0.8}),
            ),
        ),
        (
            "--calibration with a list for a cost",
            ("--calibration", "calibration.json"),
            "calibration.json: exchange_ratio.2 must be an object keyed by rate (got [0.9])",
            edit_json("calibration.json", calibration_value("exchange_ratio", "2", [0.9])),
        ),
        (
            "--calibration with a key written twice",
            ("--calibration", "calibration.json"),
            "calibration.json: the key 'label' is written twice in one object",
            lambda folder: write(
                "calibration.json",
                (folder / "calibration.json")
                .read_text()
                .replace('"label"', '"label": "again", "label"', 1),
            )(folder),
        ),
        (
            "--calibration for fewer islands",
            ("--calibration", "calibration.json"),
            "calibration.json: measured for 2, 3 islands, not 4: give --calibration a new file",
            edit_json("calibration.json", lambda document: document["overhead_s"].pop("4")),
        ),
        (
            "--calibration of kernel shaping for --in-process",
            ("--calibration", "calibration.json", "--in-process"),
            "calibration.json: measured with kernel-htb-fq-cubic shaping; --in-process runs need a "
            "calibration measured in-process",
            edit_json("calibration.json", setting("mode", "kernel-htb-fq-cubic")),
        ),
        (
            "--calibration of an older shaper",
            ("--calibration", "calibration.json"),
            "calibration.json: measured with kernel-tbf shaping, which this version no longer builds: "
            "give --calibration a new file",
            edit_json("calibration.json", setting("mode", "kernel-tbf")),
        ),
        (
            "--calibration of the shaper with one FIFO per direction",
            ("--calibration", "calibration.json"),
            "calibration.json: measured with kernel-htb shaping, which this version no longer builds: "
            "give --calibration a new file",
            edit_json("calibration.json", setting("mode", "kernel-htb")),
        ),
        (
            "--calibration of the fair shaper for --shaper fifo",
            ("--calibration", "calibration.json", "--shaper", "fifo"),
            "calibration.json: measured with kernel-htb-fq-cubic shaping; this run shapes with "
            "kernel-tbf-fifo-200ms-cubic (--shaper fifo --tcp-congestion-control cubic): give --calibration a new file",
            edit_json("calibration.json", setting("mode", "kernel-htb-fq-cubic")),
        ),
        (
            "--calibration of the other TCP",
            ("--calibration", "calibration.json", "--tcp-congestion-control", "bbr"),
            "calibration.json: measured with kernel-htb-fq-cubic shaping; this run shapes with "
            "kernel-htb-fq-bbr (--shaper fair --tcp-congestion-control bbr): give --calibration a new file",
            edit_json("calibration.json", setting("mode", "kernel-htb-fq-cubic")),
        ),
        (
            "--calibration taken before the TCP was set",
            ("--calibration", "calibration.json"),
            "calibration.json: measured with kernel-htb-fq shaping, which this version no longer builds: "
            "give --calibration a new file",
            edit_json("calibration.json", setting("mode", "kernel-htb-fq")),
        ),
        (
            "--calibration of a FIFO of another depth",
            ("--calibration", "calibration.json", "--shaper", "fifo", "--queue-ms", "50"),
            "calibration.json: measured with kernel-tbf-fifo-200ms-cubic shaping; this run shapes with "
            "kernel-tbf-fifo-50ms-cubic (--shaper fifo --tcp-congestion-control cubic): give --calibration a new file",
            edit_json("calibration.json", setting("mode", "kernel-tbf-fifo-200ms-cubic")),
        ),
        (
            "--calibration of a FIFO for the fair shaper",
            ("--calibration", "calibration.json"),
            "calibration.json: measured with kernel-tbf-fifo-20ms-cubic shaping; this run shapes with "
            "kernel-htb-fq-cubic (--shaper fair --tcp-congestion-control cubic): give --calibration a new file",
            edit_json("calibration.json", setting("mode", "kernel-tbf-fifo-20ms-cubic")),
        ),
        (
            "--calibration of a FIFO of no depth",
            ("--calibration", "calibration.json"),
            "calibration.json: measured with kernel-tbf-fifo-ms shaping, which this version no longer builds",
            edit_json("calibration.json", setting("mode", "kernel-tbf-fifo-ms")),
        ),
        ("--shaper unknown", ("--shaper", "red"), "argument --shaper: invalid choice: 'red'"),
        (
            "--queue-ms without --shaper fifo",
            ("--queue-ms", "50"),
            "--queue-ms goes with --shaper fifo",
        ),
        (
            "--queue-ms 0",
            ("--shaper", "fifo", "--queue-ms", "0"),
            "--queue-ms: queue depth 0.0 ms: must be 1 to 2000 ms",
        ),
        (
            "--queue-ms NaN",
            ("--shaper", "fifo", "--queue-ms", "nan"),
            "--queue-ms: queue depth nan ms: must be 1 to 2000",
        ),
        (
            "--queue-ms infinite",
            ("--shaper", "fifo", "--queue-ms", "inf"),
            "--queue-ms: queue depth inf ms: must be 1",
        ),
        (
            "--queue-ms huge",
            ("--shaper", "fifo", "--queue-ms", "1e9"),
            "--queue-ms: queue depth 1000000000.0 ms: must be 1 to 2000 ms",
        ),
        (
            "--queue-ms not a number",
            ("--shaper", "fifo", "--queue-ms", "deep"),
            "argument --queue-ms: invalid float value: 'deep'",
        ),
        (
            "--tcp-congestion-control bbr with --in-process",
            ("--tcp-congestion-control", "bbr", "--in-process"),
            "--tcp-congestion-control goes with the kernel's shaping, not --in-process",
        ),
        (
            "--tcp-congestion-control not one the emulation sets",
            ("--tcp-congestion-control", "reno"),
            "argument --tcp-congestion-control: invalid choice: 'reno' (choose from 'cubic', 'bbr')",
        ),
        (
            "--shaper fifo with --in-process",
            ("--shaper", "fifo", "--in-process"),
            "--shaper fifo needs the kernel's shaping, not --in-process",
        ),
        (
            "a scenario's FIFO deeper than the emulation builds",
            ("--set", 'network.egress_queue="fifo"', "--set", "network.fifo_queue_ms=5000"),
            "network.fifo_queue_ms: queue depth 5000.0 ms: must be 1 to 2000 ms (what the emulation "
            "builds: give --queue-ms)",
        ),
        (
            "a scenario's FIFO with --in-process",
            ("--set", 'network.egress_queue="fifo"', "--in-process"),
            "the scenario's network.egress_queue = \"fifo\" needs the kernel's shaping, not --in-process",
        ),
        (
            "a scenario's BBR with --in-process",
            (
                "--set",
                'network.egress_queue="fifo"',
                "--set",
                'network.tcp_congestion_control="bbr"',
                "--shaper",
                "fair",
                "--in-process",
            ),
            "the scenario's network.tcp_congestion_control = 'bbr' goes with the kernel's shaping",
        ),
        (
            "--calibration unwritable",
            ("--calibration", f"{UNWRITABLE}/calibration.json"),
            f"{UNWRITABLE}/calibration.json: cannot create its folder",
        ),
        (
            "--calibration empty",
            ("--calibration", ""),
            "argument --calibration: is empty: give a path",
        ),
        ("unwritable --out", ("--out", UNWRITABLE), f"--out {UNWRITABLE}: cannot write there"),
        (
            "--out is a file",
            ("--out", "scenario.toml"),
            "--out scenario.toml: is a file; name a folder",
        ),
        (
            "--out holds an earlier validation",
            ("--out", "earlier"),
            "--out earlier: earlier/run holds an earlier run",
            copy("run/summary.json", "earlier/run/summary.json"),
        ),
        (
            "--out and --calibration on one file",
            ("--out", "v", "--calibration", "v/validation.json"),
            "v/validation.json: --out's validation.json and --calibration name the same file",
        ),
    ],
) + cases(
    "validate",
    (),
    [
        (
            "--out would overwrite the scenario",
            ("v/scaled.toml", "--out", "v"),
            "v/scaled.toml: --out's scaled.toml would overwrite the scenario",
            copy("scenario.toml", "v/scaled.toml"),
        ),
        ("neither FILE nor --suite", (), "give a scenario FILE or --suite (not both)"),
        (
            "both FILE and --suite",
            ("scenario.toml", "--suite"),
            "give a scenario FILE or --suite (not both)",
        ),
        ("--quick without --suite", ("scenario.toml", "--quick"), "--quick goes with --suite"),
        (
            "--case without --suite",
            ("scenario.toml", "--case", "topk-ring-m3"),
            "--case goes with --suite",
        ),
        (
            "--case and --quick",
            ("--suite", "--quick", "--case", "topk-ring-m3"),
            "--case or --quick, not both",
        ),
        (
            "--case of no case",
            ("--suite", "--case", "nowhere"),
            "--case nowhere: no such case (the suite's: ddp-bf16-m2,",
        ),
        (
            "--set with --suite",
            ("--suite", "--set", "schedule.bits=8"),
            "--set goes with a scenario FILE",
        ),
        (
            "--suite's file and --calibration on one file",
            ("--suite", "--out", "v", "--calibration", "v/suite.json"),
            "v/suite.json: --out's suite.json and --calibration name the same file",
        ),
        ("no scenario file", ("nowhere.toml",), "nowhere.toml: no such file or bundled scenario"),
        (
            "a prediction that stops short",
            ("scenario.toml", "--calibration", "calibration.json", "--out", "v"),
            "test: the prediction of the scaled scenario stopped short (every worker had left",
            every_worker_leaves,
        ),
    ],
)

CALIBRATE = cases(
    "calibrate",
    (),
    [
        (
            "unwritable --out, on hosts",
            ("--out", "/proc/x.json"),
            "/proc/x.json: cannot write in /proc",
        ),
        (
            "unwritable --out",
            ("--out", f"{UNWRITABLE}/profile.json", "--emulate", "scenario.toml"),
            f"{UNWRITABLE}/profile.json: cannot create its folder",
        ),
        (
            "--out is a folder",
            ("--out", "run", "--emulate", "scenario.toml"),
            "run: is a folder; name a file in it",
        ),
        (
            "--out not .json",
            ("--out", "profile.txt", "--emulate", "scenario.toml"),
            "profile.txt: '.txt' is not a format this writes; end the name with .json",
        ),
        (
            "--out is the --emulate scenario",
            ("--out", "s.json", "--emulate", "s.json"),
            "s.json: --out would overwrite --emulate",
            copy("scenario.toml", "s.json"),
        ),
        ("--out is empty", ("--out", ""), "argument --out: is empty: give a path"),
        ("no --out", ("--emulate", "scenario.toml"), "the following arguments are required: --out"),
        (
            "--set without --emulate",
            ("--out", "p.json", "--set", "schedule.bits=8"),
            "--set goes with --emulate FILE",
        ),
        (
            "--in-process without --emulate",
            ("--out", "p.json", "--in-process"),
            "--in-process goes with --emulate FILE",
        ),
        ("--name empty", ("--out", "p.json", "--name", ""), "argument --name: is empty"),
        (
            "--name blank",
            ("--out", "p.json", "--name", "  "),
            "--name is empty: give this host's island name",
        ),
        (
            "--name with --emulate",
            ("--out", "p.json", "--name", "a", "--emulate", "scenario.toml"),
            "--name names a real host under torchrun",
        ),
        (
            "neither torchrun nor --emulate",
            ("--out", "p.json"),
            "run it under torchrun, one process per host",
        ),
        (
            "--emulate missing",
            ("--out", "p.json", "--emulate", "nowhere.toml"),
            "nowhere.toml: no such file",
        ),
        (
            "--emulate nine islands",
            ("--out", "p.json", "--emulate", "nine.toml"),
            "nine.toml: island: calibrate --emulate runs 2 to 8 islands on this machine (got 9)",
            write(
                "nine.toml",
                SCENARIO.split("[[island]]")[0]
                + "".join(
                    f'[[island]]\nname = "i{n}"\nstep_time_s = 1.0\nbandwidth_gbps = 1.0\n'
                    for n in range(9)
                ),
            ),
        ),
        (
            "--emulate an island of 4 workers",
            ("--out", "p.json", "--emulate", "scenario.toml"),
            "island.0.replicas: calibrate --emulate runs one host per island",
        ),
    ],
)

TOOL_SAMPLES = Path(__file__).resolve().parent / "data" / "calibrate"
TOOL_FILES = {
    "a-c.json": "iperf3-a-c-bidir.json",
    "a-b.json": "iperf3-a-b-P2.json",
    "ping.txt": "ping-a-c-quiet.txt",
    "reduce.txt": "nccl-all-reduce-3.txt",
    "gather.txt": "nccl-all-gather-3.txt",
}
TWO_HOSTS = ("--host", "a=10.0.0.1", "--host", "c=10.0.0.3")


def tool_files(name: str | None = None, edit: Callable[[str], str] = str) -> Callable[[Path], None]:
    """The samples of tests/data/calibrate under short names (``TOOL_FILES``), ``name`` edited."""

    def damage(folder: Path) -> None:
        for short, sample in TOOL_FILES.items():
            text = (TOOL_SAMPLES / sample).read_text()
            (folder / short).write_text(edit(text) if short == name else text)

    return damage


NO_REPLY = (
    "PING 10.0.0.3 (10.0.0.3) 56(84) bytes of data.\n\n--- 10.0.0.3 ping statistics ---\n"
    "5 packets transmitted, 0 received, 100% packet loss, time 4097ms\n"
)
CALIBRATE += cases(
    "calibrate",
    ("--out", "p.json", *TWO_HOSTS),
    [
        (f"{what} (*calibrate from files*)", extra, message, damage)
        for what, extra, message, damage in [
            (
                "--iperf3 with --emulate",
                ("--iperf3", "a-c.json", "--emulate", "scenario.toml"),
                "--emulate measures with islands on the hosts; --iperf3 reads files measured without it",
                tool_files(),
            ),
            (
                "--ping without --iperf3",
                ("--ping", "a:c=ping.txt"),
                "--ping needs --iperf3 FILE...",
                tool_files(),
            ),
            (
                "--nccl-ranks without --nccl-tests",
                ("--iperf3", "a-c.json", "--nccl-ranks", "3"),
                "--nccl-ranks 3: goes with --nccl-tests FILE",
                tool_files(),
            ),
            (
                "--nccl-ranks 1",
                ("--iperf3", "a-c.json", "--nccl-tests", "reduce.txt", "--nccl-ranks", "1"),
                "--nccl-ranks 1: a collective has at least 2 ranks",
                tool_files(),
            ),
            (
                "--host without an address",
                ("--host", "b=", "--iperf3", "a-c.json"),
                "--host b=: give NAME=ADDRESS[,ADDRESS...]",
                tool_files(),
            ),
            (
                "--host with another's address",
                ("--host", "b=10.0.0.1", "--iperf3", "a-c.json"),
                "--host b: 10.0.0.1 is also --host a's address",
                tool_files(),
            ),
            (
                "--ping of no --host",
                ("--iperf3", "a-c.json", "--ping", "a:z=ping.txt"),
                "z is no --host name (a, c)",
                tool_files(),
            ),
            (
                "--ping of a host and itself",
                ("--iperf3", "a-c.json", "--ping", "a:a=ping.txt"),
                "a host and itself; name two hosts",
                tool_files(),
            ),
            (
                "--ping of a pair twice",
                ("--iperf3", "a-c.json", "--ping", "a:c=ping.txt", "--ping", "c:a=ping.txt"),
                "--ping c:a: given twice",
                tool_files(),
            ),
            (
                "--out is an --iperf3 file",
                ("--iperf3", "a-c.json", "--out", "a-c.json"),
                "a-c.json: --out would overwrite --iperf3 a-c.json",
                tool_files(),
            ),
            (
                "--iperf3 missing",
                ("--iperf3", "nowhere.json"),
                "nowhere.json: cannot read this iperf3 -J file",
                tool_files(),
            ),
            (
                "--iperf3 cut short",
                ("--iperf3", "a-c.json"),
                "a-c.json: not valid JSON",
                tool_files("a-c.json", lambda text: text[: len(text) // 2]),
            ),
            (
                "--iperf3 with NaN",
                ("--iperf3", "a-c.json"),
                "a-c.json: holds NaN, which is no number in JSON",
                tool_files("a-c.json", lambda text: text.replace("47500000.0", "NaN")),
            ),
            (
                "--iperf3 a rate of text",
                ("--iperf3", "a-c.json"),
                "a-c.json: end.sum_received.bits_per_second: '47500000.0' is not a rate > 0",
                tool_files("a-c.json", lambda text: text.replace("\t47500000.0", '\t"47500000.0"')),
            ),
            (
                "--iperf3 the server's file",
                ("--iperf3", "a-c.json"),
                "a-c.json: start.connecting_to: missing (it is the server's: give the client's",
                tool_files(
                    "a-c.json", lambda text: text.replace("connecting_to", "accepted_connection")
                ),
            ),
            (
                "--iperf3 a UDP test",
                ("--iperf3", "a-c.json"),
                "a-c.json: start.test_start.protocol: 'UDP': calibrate reads TCP tests",
                tool_files("a-c.json", lambda text: text.replace('"TCP"', '"UDP"')),
            ),
            (
                "--iperf3 a failed test",
                ("--iperf3", "a-c.json"),
                "a-c.json: error: iperf3 reported 'unable to connect to server",
                tool_files(
                    "a-c.json",
                    lambda text: (
                        '{"start": {}, "intervals": [], "end": {}, '
                        '"error": "unable to connect to server - server may have stopped running or use a different '
                        'port, firewall issue, etc.: Connection refused"}\n'
                    ),
                ),
            ),
            (
                "--iperf3 an address no --host has",
                ("--iperf3", "a-b.json"),
                "a-b.json: start.connected.0.remote_host: 198.51.100.2 (the server) is no --host's address",
                tool_files(),
            ),
            (
                "--iperf3 a host that never sends",
                ("--host", "b=198.51.100.2", "--iperf3", "a-b.json", "a-c.json"),
                "--iperf3: no file has host b sending",
                tool_files(),
            ),
            (
                "--ping with no reply",
                ("--iperf3", "a-c.json", "--ping", "a:c=ping.txt"),
                "ping.txt: no reply in it",
                tool_files("ping.txt", lambda text: NO_REPLY),
            ),
            (
                "--ping cut short",
                ("--iperf3", "a-c.json", "--ping", "a:c=ping.txt"),
                "ping.txt: its last line has no line end: the file is cut short",
                tool_files("ping.txt", lambda text: text[:-20]),
            ),
            (
                "--nccl-tests no table",
                ("--iperf3", "a-c.json", "--nccl-tests", "reduce.txt"),
                "reduce.txt: header: no '# size count type ...' line: not nccl-tests output",
                tool_files("reduce.txt", lambda text: "mpirun: command not found\n"),
            ),
            (
                "--nccl-tests cut short",
                ("--iperf3", "a-c.json", "--nccl-tests", "reduce.txt"),
                "reduce.txt: its last line has no line end: the file is cut short",
                tool_files("reduce.txt", lambda text: text[:1800]),
            ),
            (
                "--nccl-tests wrong results",
                ("--iperf3", "a-c.json", "--nccl-tests", "reduce.txt"),
                "reduce.txt: line 14: #wrong is 12: the collective gave wrong results",
                tool_files(
                    "reduce.txt",
                    lambda text: text.replace("0.00      0    99999", "0.00     12    99999"),
                ),
            ),
            (
                "--nccl-tests a broadcast",
                ("--iperf3", "a-c.json", "--nccl-tests", "reduce.txt"),
                "reduce.txt: a broadcast_perf run: calibrate reads all_reduce_perf and all_gather_perf",
                tool_files(
                    "reduce.txt",
                    lambda text: text.replace(
                        "starting: all_reduce_perf", "starting: broadcast_perf"
                    ),
                ),
            ),
            (
                "--nccl-tests without its ranks",
                ("--iperf3", "a-c.json", "--nccl-tests", "gather.txt"),
                "gather.txt: ranks: no '#  Rank N ... on HOST' or NCCL 'nranks N' line: give --nccl-ranks N",
                tool_files(),
            ),
            (
                "--nccl-tests among other hosts",
                ("--iperf3", "a-c.json", "--nccl-tests", "reduce.txt"),
                "reduce.txt: ranks: the run was among 3 hosts, the profile's --host names 2",
                tool_files(),
            ),
            (
                "--streams without --egress-queue fifo",
                ("--iperf3", "a-c.json", "--streams", "4"),
                "--streams describes one FIFO per egress: it goes with --egress-queue fifo",
                tool_files(),
            ),
            (
                "--queue-ms 0",
                ("--iperf3", "a-c.json", "--egress-queue", "fifo", "--queue-ms", "0"),
                "--queue-ms 0: must be > 0",
                tool_files(),
            ),
            (
                "--streams 0",
                ("--iperf3", "a-c.json", "--egress-queue", "fifo", "--streams", "0"),
                "--streams 0: must be >= 1",
                tool_files(),
            ),
        ]
    ],
)

COMPARE = (
    cases(
        "compare",
        ("scenario.toml", "run"),
        [
            (
                "no such run folder",
                (),
                "run: no such run folder",
                lambda folder: shutil.rmtree(folder / "run"),
            ),
            (
                "the run folder is a file",
                (),
                "run: is a file, not a run folder",
                lambda folder: (shutil.rmtree(folder / "run"), (folder / "run").write_text("x")),
            ),
            (
                "no summary.json",
                (),
                "run: no summary.json: not a folder `islands train --out` wrote",
                remove("run/summary.json"),
            ),
            (
                "summary.json is a folder",
                (),
                "run/summary.json: is a folder, not a run file",
                folder_for("run/summary.json"),
            ),
            (
                "summary.json empty",
                (),
                "run/summary.json: is empty: the run did not finish writing it",
                write("run/summary.json", ""),
            ),
            (
                "summary.json cut short",
                (),
                "run/summary.json: not valid JSON",
                write("run/summary.json", '{"complete": tr'),
            ),
            (
                "summary.json with NaN",
                (),
                "run/summary.json: holds NaN, which is no number in JSON",
                write("run/summary.json", '{"complete": true, "wall_time_s": NaN}'),
            ),
            (
                "summary.json with Infinity",
                (),
                "run/summary.json: holds Infinity",
                write("run/summary.json", '{"complete": true, "mean_sync_s": Infinity}'),
            ),
            (
                "summary.json not an object",
                (),
                "run/summary.json: must hold one JSON object",
                write("run/summary.json", "[]"),
            ),
            (
                "summary.json a key written twice",
                (),
                "run/summary.json: the key 'wall_time_s' is written twice in one object",
                lambda folder: write(
                    "run/summary.json",
                    (folder / "run" / "summary.json")
                    .read_text()
                    .replace('"wall_time_s"', '"wall_time_s": 1, "wall_time_s"', 1),
                )(folder),
            ),
            (
                "a figure missing",
                (),
                "run/summary.json: no 'mean_sync_s'",
                edit_json("run/summary.json", lambda document: document.pop("mean_sync_s")),
            ),
            (
                "a figure that is text",
                (),
                "run/summary.json: 'mean_sync_s' must be a finite number (got 'slow')",
                edit_json("run/summary.json", setting("mean_sync_s", "slow")),
            ),
            (
                "a figure that is true",
                (),
                "run/summary.json: 'stall_s' must be a finite number (got True)",
                edit_json("run/summary.json", setting("stall_s", True)),
            ),
            (
                "a figure past float's range",
                (),
                "run/summary.json: 'idle_s' must be a finite number (got an integer of 401 digits)",
                edit_json("run/summary.json", setting("idle_s", 10**400)),
            ),
            (
                "wall time 0",
                (),
                "run/summary.json: 'wall_time_s' must be above 0 s (got 0)",
                edit_json("run/summary.json", setting("wall_time_s", 0)),
            ),
            (
                "negative stall",
                (),
                "run/summary.json: 'stall_s' must be 0 to the run's wall_time_s, 372 s (got -50)",
                edit_json("run/summary.json", setting("stall_s", -50)),
            ),
            (
                "stall longer than the run",
                (),
                "'stall_s' must be 0 to the run's wall_time_s, 372 s (got 400)",
                edit_json("run/summary.json", setting("stall_s", 400)),
            ),
            (
                "utilisation above 1",
                (),
                "run/summary.json: 'compute_utilisation' is a fraction, 0 to 1 (got 1.5)",
                edit_json("run/summary.json", setting("compute_utilisation", 1.5)),
            ),
            (
                "negative bytes",
                (),
                "run/summary.json: 'bytes_per_worker' must be 0 or more (got -1)",
                edit_json("run/summary.json", setting("bytes_per_worker", -1)),
            ),
            (
                "a run that stopped short",
                (),
                "run/summary.json: the run stopped short (killed): compare a finished run",
                edit_json(
                    "run/summary.json",
                    lambda document: document.update(complete=False, incomplete_reason="killed"),
                ),
            ),
            (
                "a run of other work",
                (),
                "run/summary.json: workers is 3, the scenario's workers gives 4",
                edit_json("run/summary.json", setting("workers", 3)),
            ),
            ("run.json empty", (), "run/run.json: is empty", write("run/run.json", "")),
            (
                "run.json not UTF-8",
                (),
                "run/run.json: this run file is not UTF-8 text (byte 0)",
                write("run/run.json", b"\xff"),
            ),
            ("no trace.csv", (), "run: no trace.csv", remove("run/trace.csv")),
            ("trace.csv empty", (), "run/trace.csv: is empty", write("run/trace.csv", "")),
            (
                "trace.csv cut mid-line",
                (),
                "run/trace.csv: its last line has no line end: the file is cut short",
                cut_trace,
            ),
            (
                "trace.csv cut at a line end, the last sync lost",
                (),
                "run/trace.csv: spans 348 s, summary.json's wall_time_s 372 s: the trace is cut short or from "
                "another run",
                lambda folder: write(
                    "run/trace.csv",
                    "".join(
                        (folder / "run" / "trace.csv").read_text().splitlines(keepends=True)[:-8]
                    ),
                )(folder),
            ),
            (
                "trace.csv header only",
                (),
                "run/trace.csv: has no rows",
                write(
                    "run/trace.csv",
                    "time_start_s,time_end_s,worker,island,kind,bytes,fragment,outer_step\n",
                ),
            ),
            (
                "trace.csv wrong columns",
                (),
                "run/trace.csv: no column time_end_s, island, kind, bytes, fragment, outer_step",
                write("run/trace.csv", "time_start_s,worker\n0.0,0\n"),
            ),
            (
                "trace.csv an empty cell",
                (),
                "run/trace.csv: line 2 has no bytes: the file is damaged or cut short",
                trace_line(2, "0.0,100.0,0,a,compute,,-1,0"),
            ),
            (
                "trace.csv a short line",
                (),
                "run/trace.csv: line 2 has no outer_step",
                trace_line(2, "0.0,100.0,0,a,compute,0.0,-1"),
            ),
            (
                "trace.csv a long line",
                (),
                "run/trace.csv: not a trace in the islands schema (Length of header or names does not match",
                trace_line(2, "0.0,100.0,0,a,compute,0.0,-1,0,7"),
            ),
            (
                "trace.csv a long line further down",
                (),
                "run/trace.csv: not a trace in the islands schema (Error tokenizing data",
                trace_line(5, "0.0,100.0,3,a,compute,0.0,-1,0,7"),
            ),
            (
                "trace.csv a NaN time",
                (),
                "run/trace.csv: line 2 has no time_end_s",
                trace_line(2, "0.0,nan,0,a,compute,0.0,-1,0"),
            ),
            (
                "trace.csv an infinite time",
                (),
                "run/trace.csv: time_end_s must be finite and 0 or more (got inf)",
                trace_line(2, "0.0,inf,0,a,compute,0.0,-1,0"),
            ),
            (
                "trace.csv a negative time",
                (),
                "run/trace.csv: time_start_s must be finite and 0 or more (got -5)",
                trace_line(2, "-5.0,100.0,0,a,compute,0.0,-1,0"),
            ),
            (
                "trace.csv a worker that is text",
                (),
                "run/trace.csv: line 2: worker must be a whole number (got 'x')",
                trace_line(2, "0.0,100.0,x,a,compute,0.0,-1,0"),
            ),
            (
                "trace.csv bytes that are text",
                (),
                "run/trace.csv: line 2: bytes must be a number (got 'x')",
                trace_line(2, "0.0,100.0,0,a,compute,x,-1,0"),
            ),
            (
                "trace.csv a worker of 0.5",
                (),
                "run/trace.csv: line 2: worker must be a whole number (got 0.5)",
                trace_line(2, "0.0,100.0,0.5,a,compute,0.0,-1,0"),
            ),
            (
                "trace.csv a negative outer step",
                (),
                "run/trace.csv: outer_step must be 0 to 4294967296 (got -1)",
                trace_line(2, "0.0,100.0,0,a,compute,0.0,-1,-1"),
            ),
            (
                "trace.csv an unknown kind",
                (),
                "run/trace.csv: line 2: kind must be one of compute, comm, stall, idle, wasted (got 'nap')",
                trace_line(2, "0.0,100.0,0,a,nap,0.0,-1,0"),
            ),
            (
                "trace.csv a row that ends first",
                (),
                "trace has rows that end before they start",
                trace_line(2, "100.0,0.0,0,a,compute,0.0,-1,0"),
            ),
            (
                "--measured-steps without compute",
                ("--measured-steps",),
                "run/summary.json: 'islands' must list each island's name, compute_s and inner_steps",
                edit_json(
                    "run/summary.json",
                    setting("islands", [{"name": "a", "compute_s": None, "inner_steps": 300}]),
                ),
            ),
            (
                "--measured-steps negative compute",
                ("--measured-steps",),
                "run/summary.json: island 'a': compute_s and inner_steps must be finite and 0 or more (got -1 and 300)",
                edit_json(
                    "run/summary.json",
                    setting("islands", [{"name": "a", "compute_s": -1, "inner_steps": 300}]),
                ),
            ),
            (
                "--measured-steps an island that ran no step",
                ("--measured-steps",),
                "run/summary.json: island 'a' ran 0 inner steps in 0 s: no step time to measure; compare without "
                "--measured-steps",
                edit_json(
                    "run/summary.json",
                    setting("islands", [{"name": "a", "compute_s": 0, "inner_steps": 0}]),
                ),
            ),
            (
                "--measured-steps an island with steps but no compute",
                ("--measured-steps",),
                "run/summary.json: island 'a' ran 300 inner steps in 0 s: no step time to measure",
                edit_json(
                    "run/summary.json",
                    setting("islands", [{"name": "a", "compute_s": 0, "inner_steps": 300}]),
                ),
            ),
            ("unwritable --out", ("--out", UNWRITABLE), f"--out {UNWRITABLE}: cannot write there"),
            (
                "--out is a file",
                ("--out", "scenario.toml"),
                "--out scenario.toml: is a file; name a folder",
            ),
            ("--out is empty", ("--out", ""), "argument --out: is empty: give a path"),
            (
                "--network-profile is a folder",
                ("--network-profile", "run"),
                "run: is a folder, not a network profile",
            ),
        ],
    )
    + cases(
        "compare",
        (),
        [
            (
                "a prediction that stops short",
                ("scenario.toml", "run"),
                "scenario.toml: the prediction stopped short (every worker had left by 50 s",
                every_worker_leaves,
            ),
            (
                "--out would overwrite the scenario",
                ("v/comparison.json", "run", "--out", "v"),
                "v/comparison.json: --out's comparison.json would overwrite the scenario",
                copy("scenario.toml", "v/comparison.json"),
            ),
            ("RUN_DIR empty", ("scenario.toml", ""), "argument RUN_DIR: is empty: give a path"),
            (
                "no scenario file",
                ("nowhere.toml", "run"),
                "nowhere.toml: no such file or bundled scenario",
            ),
        ],
    )
    + cases(
        "compare",
        ("scenario.toml", "steps.csv"),
        [
            (
                "a log in no format islands reads",
                (),
                "steps.csv: is a file, not a run folder, nor a log in a format islands reads",
                write("steps.csv", "hello\n"),
            ),
            (
                "a log that is empty",
                (),
                "steps.csv: is empty: the run logged nothing",
                write("steps.csv", ""),
            ),
            (
                "a per-step log without compute_s",
                (),
                "steps.csv: no column compute_s: not a per-step log",
                write("steps.csv", "step,wall_s,blocked_s,synced\n1,1,0,0\n"),
            ),
            (
                "a per-step log cut mid-line",
                (),
                "steps.csv: its last line has no line end: the file is cut short",
                write("steps.csv", steps_log()[:-3]),
            ),
            (
                "a per-step log with a short line",
                (),
                "steps.csv: line 3: 4 cells, the header names 5 columns",
                write("steps.csv", steps_log().replace("\n2,1,1,0,0\n", "\n2,1,1,0\n")),
            ),
            (
                "a NaN step time",
                (),
                "steps.csv: line 3: wall_s must be a finite number (got nan)",
                write("steps.csv", steps_log().replace("\n2,1,1,0,0\n", "\n2,nan,1,0,0\n")),
            ),
            (
                "a negative blocked time",
                (),
                "steps.csv: line 3: blocked_s must be 0 to 1e+06 (got -1)",
                write("steps.csv", steps_log().replace("\n2,1,1,0,0\n", "\n2,1,1,-1,0\n")),
            ),
            (
                "synced neither 0 nor 1",
                (),
                "steps.csv: line 3: synced must be 0 or 1, false or true (got 2)",
                write("steps.csv", steps_log().replace("\n2,1,1,0,0\n", "\n2,1,1,0,2\n")),
            ),
            (
                "a step longer than its wall time",
                (),
                "steps.csv: line 3: compute_s + blocked_s is 3 s, more than the "
                "step's wall time 1 s",
                write("steps.csv", steps_log().replace("\n2,1,1,0,0\n", "\n2,1,1,2,0\n")),
            ),
            (
                "a step twice",
                (),
                "steps.csv: line 4: step 2 after step 2: steps twice",
                write("steps.csv", steps_log().replace("\n3,1,1,0,0\n", "\n2,1,1,0,0\n")),
            ),
            (
                "a step missing",
                (),
                "steps.csv: line 3: step 3 after step 1: every step is logged (step 2 is missing)",
                write("steps.csv", steps_log().replace("\n2,1,1,0,0\n", "\n")),
            ),
            (
                "a clock that goes back",
                (),
                "steps.csv: line 3: time_s 4 is before the rank's previous step's 5",
                write(
                    "steps.csv", "step,time_s,compute_s,blocked_s,synced\n1,5,1,0,0\n2,4,1,0,0\n"
                ),
            ),
            (
                "a JSON lines log with a step that is text",
                ("--format", "steps"),
                "steps.csv: line 1: step must be a whole number (got '1')",
                write(
                    "steps.csv",
                    json.dumps(
                        {"step": "1", "wall_s": 1, "compute_s": 1, "blocked_s": 0, "synced": 0}
                    )
                    + "\n",
                ),
            ),
            (
                "syncs every 50 steps, the scenario's H is 100",
                (),
                "steps.csv: line 51: step 50 ends in a sync, the "
                "scenario syncs after every 100th step: the log syncs every 50 steps",
                write("steps.csv", steps_log(every=50)),
            ),
            (
                "steps counted from 0",
                (),
                "steps.csv: line 100: step 99 ends in a sync, the scenario syncs after every "
                "100th step: its steps look counted from 0",
                write("steps.csv", steps_log(range(1, 300), shift=1)),
            ),
            (
                "a step 0",
                (),
                "steps.csv: line 2: step must be 1 to 9007199254740992 (got 0): the format counts the run's "
                "first step as 1",
                write("steps.csv", steps_log(range(0, 300), shift=1)),
            ),
            (
                "a window without a sync",
                (),
                "steps.csv: the window, steps 1-50, holds no sync: the scenario syncs after "
                "every 100th step; log a window that holds one",
                write("steps.csv", steps_log(range(1, 51))),
            ),
            (
                "a log past the scenario's steps",
                (),
                "steps.csv: runs to step 400, the scenario's 3 outer steps of 100 make "
                "300: --set schedule.outer_steps=4",
                write("steps.csv", steps_log(range(1, 401))),
            ),
            (
                "a rank the scenario has not",
                (),
                "steps.csv: rank 4 logged, the scenario has 4 workers (ranks 0-3)",
                write("steps.csv", steps_log(rank="4")),
            ),
            (
                "a Chrome trace without steps",
                ("--format", "chrome"),
                "steps.csv: no ProfilerStep#N events",
                write("steps.csv", json.dumps({"traceEvents": []}) + "\n"),
            ),
            (
                "a Chrome trace with a duration that is text",
                (),
                "steps.csv: traceEvents[1] (ProfilerStep#1): 'dur' must be "
                "a finite number of microseconds, 0 or more (got 'x')",
                write(
                    "steps.csv",
                    chrome_trace({"ph": "X", "name": "ProfilerStep#1", "ts": 1000, "dur": "x"}),
                ),
            ),
            (
                "a Chrome trace with a rank that is text",
                (),
                "steps.csv: distributedInfo.rank must be a whole number",
                write(
                    "steps.csv",
                    json.dumps({"distributedInfo": {"rank": "0"}, **json.loads(chrome_trace())})
                    + "\n",
                ),
            ),
            (
                "a torchtitan log of one step line",
                (),
                "steps.csv: one step line (step 1) for rank 0: the step time is the "
                "time between two logged steps",
                write("steps.csv", TITAN_LINE.format(0, 1)),
            ),
            (
                "a torchtitan log without time stamps",
                (),
                "steps.csv: line 1: a step line with no time stamp",
                write("steps.csv", "step: 1  loss: 7.1\nstep: 10  loss: 6.9\n"),
            ),
            (
                "a torchtitan log whose steps go back",
                (),
                "steps.csv: line 2: step 1 after step 10: steps out of order",
                write("steps.csv", TITAN_LINE.format(0, 10) + TITAN_LINE.format(9, 1)),
            ),
            (
                "--measured-steps with a torchtitan log",
                ("--measured-steps",),
                "steps.csv: a torchtitan log gives no compute "
                "seconds per step: compare without --measured-steps",
                write("steps.csv", TITAN_LINE.format(0, 1) + TITAN_LINE.format(9, 100)),
            ),
            (
                "--comm-event with a per-step log",
                ("--comm-event", "gloo"),
                "steps.csv: --comm-event goes with a Chrome trace; this is a steps log",
                write("steps.csv", steps_log()),
            ),
        ],
    )
    + cases(
        "compare",
        ("scenario.toml", "run"),
        [
            (
                "--format with a run folder",
                ("--format", "steps"),
                "--format goes with a log file; run is a run folder",
            ),
        ],
    )
)

TRACE = cases(
    "trace",
    ("scenario.toml",),
    [
        (
            "unwritable -o",
            ("-o", f"{UNWRITABLE}/trace.json"),
            f"{UNWRITABLE}/trace.json: cannot create its folder",
        ),
        ("-o is a folder", ("-o", "run"), "run: is a folder; name a file in it"),
        ("-o not .json", ("-o", "trace.csv"), "trace.csv: '.csv' is not a format this writes"),
        ("-o is empty", ("-o", ""), "argument -o/--output: is empty: give a path"),
    ],
) + cases(
    "trace",
    (),
    [
        (
            "-o is the scenario",
            ("s.json", "-o", "s.json"),
            "s.json: --output would overwrite the scenario",
            copy("scenario.toml", "s.json"),
        ),
        ("no scenario file", ("nowhere.toml",), "nowhere.toml: no such file or bundled scenario"),
    ],
)

QUALITY_POINT = {
    "algorithm": "diloco",
    "inner_steps": 10,
    "workers": 2,
    "bits": 16,
    "fragments": 1,
    "steps": 300,
    "eval_loss": 4.01,
    "ddp_eval_loss": 4.0,
}


def quality_profile(**change) -> Callable[[Path], None]:
    """p.json: a quality profile of one point, with ``change`` made."""
    return write(
        "p.json",
        json.dumps(
            {"scenario": "x", "model_parameters": 120_576, "points": [QUALITY_POINT], **change}
        ),
    )


QUALITY = cases(
    "quality",
    ("scenario.toml",),
    [
        (
            "a grid of compressed runs",
            ("--grid", "workers=2", "--set", "schedule.compression=topk"),
            'schedule.compression: "topk": a profile\'s points are dense exchanges',
        ),
        ("--steps 0", ("--grid", "workers=2", "--steps", "0"), "--steps 0: must be 1 to 100000"),
        (
            "--steps negative",
            ("--grid", "workers=2", "--steps", "-5"),
            "--steps -5: must be 1 to 100000",
        ),
        (
            "--steps huge",
            ("--grid", "workers=2", "--steps", "99999999900"),
            "--steps 99999999900: must be 1 to 100000",
        ),
        (
            "--steps NaN",
            ("--grid", "workers=2", "--steps", "nan"),
            "argument --steps: invalid int value: 'nan'",
        ),
        (
            "--steps without --grid",
            ("--steps", "30"),
            "--steps is the length of each --grid run: add --grid",
        ),
        ("--grid unknown key", ("--grid", "speed=1"), "--grid speed=1: the key must be one of"),
        ("--grid 0 workers", ("--grid", "workers=0"), "--grid workers=0: values must be 1 or more"),
        (
            "--grid no values",
            ("--grid", "workers="),
            "--grid workers=: values must be whole numbers",
        ),
        (
            "--grid NaN",
            ("--grid", "inner_steps=nan"),
            "--grid inner_steps=nan: values must be whole numbers",
        ),
        (
            "--grid unknown schedule",
            ("--grid", "algorithm=fast"),
            "--grid algorithm=fast: 'fast' is not a schedule",
        ),
        (
            "--grid with --profile",
            ("--grid", "workers=2", "--profile", "p.json"),
            "--grid measures a profile and --profile",
        ),
        (
            "--save without --grid",
            ("--save", "p.json"),
            "--save writes the profile that --grid measures: add --grid",
        ),
        (
            "unwritable --save",
            ("--grid", "workers=2", "--save", f"{UNWRITABLE}/p.json"),
            f"{UNWRITABLE}/p.json: cannot create its folder",
        ),
        (
            "--save is a folder",
            ("--grid", "workers=2", "--save", "run"),
            "run: is a folder; name a file in it",
        ),
        (
            "--save not .json",
            ("--grid", "workers=2", "--save", "p.csv"),
            "p.csv: '.csv' is not a format this writes",
        ),
        (
            "--profile missing",
            ("--profile", "nowhere.json"),
            "nowhere.json: cannot read this quality profile",
        ),
        ("--profile is a folder", ("--profile", "run"), "run: is a folder, not a quality profile"),
        (
            "--profile endless",
            ("--profile", "/dev/zero"),
            "/dev/zero: a quality profile is at most 16777216 bytes",
        ),
        (
            "--profile another JSON file",
            ("--profile", "run/summary.json"),
            "run/summary.json: not a quality profile",
        ),
        (
            "--profile with a NaN loss",
            ("--profile", "p.json"),
            "p.json: holds NaN, which is no number in JSON: write it with islands quality --grid --save",
            write(
                "p.json",
                json.dumps(
                    {
                        "scenario": "x",
                        "model_parameters": 5,
                        "points": [
                            {
                                "algorithm": "diloco",
                                "inner_steps": 1,
                                "workers": 2,
                                "bits": 16,
                                "fragments": 1,
                                "steps": 10,
                                "eval_loss": float("nan"),
                                "ddp_eval_loss": 1.0,
                            }
                        ],
                    }
                ),
            ),
        ),
        (
            "--profile of a model of 0 parameters",
            ("--profile", "p.json"),
            "p.json: model_parameters: must be a whole number >= 1 (got 0)",
            quality_profile(model_parameters=0),
        ),
        (
            "--profile of a negative size",
            ("--profile", "p.json"),
            "p.json: model_parameters: must be a whole number >= 1 (got -5)",
            quality_profile(model_parameters=-5),
        ),
        (
            "--profile of an unknown schedule",
            ("--profile", "p.json"),
            "p.json: points.0.algorithm: must be a schedule compared with DDP",
            quality_profile(points=[{**QUALITY_POINT, "algorithm": "dilocco"}]),
        ),
        (
            "--profile with two points at one setting",
            ("--profile", "p.json"),
            "p.json: points.1: measures diloco at H = 10, M = 2, 16 bits, 1 fragments, as points.0 does: "
            "each setting once",
            quality_profile(points=[QUALITY_POINT, {**QUALITY_POINT, "eval_loss": 4.5}]),
        ),
        ("--profile empty", ("--profile", ""), "argument --profile: is empty: give a path"),
    ],
) + cases(
    "quality",
    (),
    [
        (
            "--save is the scenario",
            ("s.json", "--grid", "workers=2", "--save", "s.json"),
            "s.json: --save would overwrite the scenario",
            copy("scenario.toml", "s.json"),
        ),
        ("no scenario file", ("nowhere.toml",), "nowhere.toml: no such file or bundled scenario"),
    ],
)

COMMANDS = {
    "train": TRAIN,
    "validate": VALIDATE,
    "calibrate": CALIBRATE,
    "compare": COMPARE,
    "trace": TRACE,
    "quality": QUALITY,
}
CASES = [case for listed in COMMANDS.values() for case in listed]


def answer(case: Case, folder: Path) -> tuple[int, str]:
    """The exit code and what ``islands <case>`` wrote to stderr, run in a fresh, damaged workspace."""
    make_workspace(folder)
    if case.damage:
        case.damage(folder)
    errors = io.StringIO()
    with (
        contextlib.chdir(folder),
        contextlib.redirect_stderr(errors),
        contextlib.redirect_stdout(io.StringIO()),
    ):
        try:
            code = main([case.command, *case.argv])
        except SystemExit as done:  # argparse's refusals
            code = done.code
    return code, errors.getvalue()


def long_work_started(*args, **kwargs):
    raise AssertionError("the long work started before the bad input was refused")


@pytest.fixture
def no_long_work(monkeypatch):
    """Training, calibrating and measuring fail the test: every refusal must come before them."""
    monkeypatch.delenv("RANK", raising=False)  # calibrate: not under torchrun
    for target in LONG_WORK:
        monkeypatch.setattr(target, long_work_started)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_a_bad_input_is_one_line_and_exit_code_2(case, tmp_path, no_long_work):
    code, stderr = answer(case, tmp_path)
    assert code == 2
    assert len(stderr.splitlines()) == 1, stderr
    assert stderr.startswith(f"islands {case.command}: error: ") and case.message in stderr, stderr


@pytest.mark.parametrize(
    "damage, message",
    [
        (cut_trace, "v/run/trace.csv: its last line has no line end: the file is cut short"),
        (remove("run/summary.json"), "v/run: no summary.json"),
        (write("run/run.json", "{"), "v/run/run.json: not valid JSON"),
    ],
)
def test_validate_answers_a_damaged_run_folder_in_one_line(
    tmp_path, monkeypatch, capsys, damage, message
):
    """The real run replaced by one that leaves a damaged folder (as a rank killed mid-write would):
    validate reads it through run_folder, as compare does, and says what is wrong with it."""
    make_workspace(tmp_path)
    damage(tmp_path)

    def leave_the_damaged_run(wan, argv, *args, **kwargs):
        shutil.copytree(tmp_path / "run", argv[argv.index("--out") + 1])
        return []

    monkeypatch.setattr(
        "islands.validation.run.open_wan",
        lambda *args, **kwargs: contextlib.nullcontext(type("WAN", (), {"label": "none"})()),
    )
    monkeypatch.setattr("islands.validation.run.start_ranks", leave_the_damaged_run)
    monkeypatch.setattr("islands.validation.run.run_all", lambda *args: None)
    monkeypatch.setattr("islands.validation.run.sent_bytes", lambda *args: None)
    monkeypatch.chdir(tmp_path)
    assert (
        main(["validate", "scenario.toml", "--calibration", "calibration.json", "--out", "v"]) == 2
    )
    stderr = capsys.readouterr().err
    assert len(stderr.splitlines()) == 1 and message in stderr, stderr


@pytest.mark.parametrize(
    "argv, written",
    [(("scenario.toml",), "validation.json"), (("--suite", "--quick"), "suite.json")],
)
def test_validate_with_good_inputs_still_runs_to_its_comparison(
    tmp_path, monkeypatch, capsys, argv, written
):
    """The same stand-in run, whole: the simulation of the scaled scenario written as `islands train`
    writes it. Every check above passes and validate writes its comparison; run again into the same
    --out, it refuses to mix its runs with the first ones."""
    from islands.scenarios import load

    make_workspace(tmp_path)

    def simulate_the_run(wan, argv, *args, **kwargs):
        out = Path(argv[argv.index("--out") + 1])
        result = simulate(load(argv[argv.index("train") + 1]))
        out.mkdir(parents=True)
        (out / "summary.json").write_text(json_text(result.summary))
        facts = {"algorithm": result.summary["algorithm"], "mean_step_compute_s": 0.2}
        (out / "run.json").write_text(json.dumps(facts))
        write_table(result.trace, out / "trace.csv")
        return []

    monkeypatch.setattr(
        "islands.validation.run.open_wan",
        lambda *args, **kwargs: contextlib.nullcontext(type("WAN", (), {"label": "none"})()),
    )
    monkeypatch.setattr("islands.validation.run.start_ranks", simulate_the_run)
    monkeypatch.setattr("islands.validation.run.run_all", lambda *args: None)
    monkeypatch.setattr("islands.validation.run.sent_bytes", lambda *args: None)
    monkeypatch.chdir(tmp_path)
    command = ["validate", *argv, "--calibration", "calibration.json", "--out", "v"]
    assert main(command) == 0
    assert "wall time" in capsys.readouterr().out or argv[0] == "--suite"
    assert json.loads((tmp_path / "v" / written).read_text())
    assert main(command) == 2
    assert "holds an earlier run; give another --out" in capsys.readouterr().err


def document(folder: Path) -> str:
    """docs/bad-inputs-run.md: per command, each case's input and the line that answers it."""
    lines = [
        "# Bad input to the run-side commands, and the one line each gets",
        "",
        "Each row is a case of `tests/test_bad_inputs_run.py`, run inside a small workspace: `scenario.toml`",
        "(one island of 4 workers, DiLoCo), `run/` (what `islands train --out run` writes for that scenario:",
        "`summary.json`, `run.json`, `trace.csv`), `calibration.json` (a calibration `islands validate` saved,",
        "for 2 to 4 islands) and `profile.json` (a network profile), with the one thing the row names damaged;",
        "the rows of `islands compare scenario.toml steps.csv` write `steps.csv` as a log of another stack (a",
        "per-step log, a Chrome trace or a torchtitan log, whatever its name; docs/how-to/compare-any-stack.md).",
        "Every answer is one line on stderr, `islands COMMAND: error: ` and then what the table shows, with",
        "exit code 2, before any training, calibrating or measuring starts (the test fails if any of them",
        "starts). The table is written by `python tests/test_bad_inputs_run.py > docs/bad-inputs-run.md`",
        "and a test fails when it is out of date.",
        "",
        "`--set KEY=VALUE` is checked by the scenario loader, as for every command: its rules are in",
        "docs/limits.md.",
        "",
        "The rows marked *calibrate from files* also have copies of the samples in `tests/data/calibrate`:",
        "`a-c.json` and `a-b.json` (clients' `iperf3 -J` files), `ping.txt` (`ping -q`), `reduce.txt` and",
        "`gather.txt` (nccl-tests' `all_reduce_perf` and `all_gather_perf`; docs/how-to/calibrate.md).",
        "",
        "Beyond these rows, generated suites check every file these commands read (`tests/test_properties_*.py`,",
        "a few cases each in `make test`, thousands in `make fuzz`): a valid run folder, calibration, quality",
        "profile, tool file or log, changed at one place (a value of another type, out of range, NaN, an",
        "infinity, an integer of 401 digits, arrays 100,000 deep, a key removed, added or written twice) or cut",
        "at any byte, is read or refused in one line naming the file.",
    ]
    for number, (command, listed) in enumerate(COMMANDS.items()):
        lines += [
            "",
            f"## islands {command}",
            "",
            "| bad input | command line | answer |",
            "|---|---|---|",
        ]
        for index, case in enumerate(listed):
            workspace = folder / f"{number}-{index}"
            workspace.mkdir()
            _, stderr = answer(case, workspace)
            command_line = " ".join(
                ["islands", command, *(argument or "''" for argument in case.argv)]
            )
            said = stderr.strip().removeprefix(f"islands {command}: error: ")
            lines.append(f"| {case.what} | {code_cell(command_line)} | {code_cell(said)} |")
    return "\n".join(lines) + "\n"


def code_cell(text: str) -> str:
    """``text`` as code in a Markdown table cell: a backtick in it takes a double-backtick span."""
    text = text.replace("|", "\\|")
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def test_the_document_shows_every_case_and_its_answer(tmp_path, no_long_work):
    assert DOCUMENT.read_text() == document(tmp_path), (
        "regenerate: python tests/test_bad_inputs_run.py > docs/bad-inputs-run.md"
    )


if __name__ == "__main__":
    import os
    import tempfile

    os.environ.pop("RANK", None)
    with tempfile.TemporaryDirectory() as scratch:
        sys.stdout.write(document(Path(scratch)))
