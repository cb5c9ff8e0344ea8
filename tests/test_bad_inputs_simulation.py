"""Every simulation-side command answers bad input with one line and exit code 2, before any long work.

``CASES`` is the list of bad inputs tried; docs/bad-inputs-simulation.md is written from it
(``python tests/test_bad_inputs_simulation.py`` rewrites it) and a test checks that the doc matches
what the commands answer now. In an argument, ``{tmp}`` is a fresh folder holding ``s.toml`` (the
worked example reading ``rtt.csv``), ``p.json`` (a network profile for it) and the files below.
"""

from __future__ import annotations

import contextlib
import io
import re
import socket
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from islands.cli import main
from islands.errors import UserError

DOC = Path(__file__).resolve().parent.parent / "docs" / "bad-inputs-simulation.md"
SECONDS_BEFORE_WORK = 10  # every case is refused well within this (most in milliseconds)

HUGE = "1" + "0" * 309  # past float's range
LONG = "1" * 5000  # past Python's int-to-text limit (4,300 digits)
PROFILE = (
    '{"kind": "islands network profile", "version": 1, "label": "t", "hosts": [%s], "rtt_ms": [], '
    '"exchange": {"members": 1, "cpu_s_per_value": 0, "hop_overhead_s": 0, "end_spread_s": 0}}'
)
HOST = '{"name": "dc", "upload_gbps": 1, "download_gbps": 1}'
SWEEP_CSV = (
    "run,schedule.inner_steps,island.*.bandwidth_gbps,valid,error,compute_utilisation,wall_time_s\n"
    "0,10,1,True,,0.5,10\n1,10,10,True,,0.9,9\n2,20,1,True,,0.6,20\n3,20,10,True,,0.95,19\n"
)
FILES = {
    "rtt.csv": "a,b,rtt_ms\ndc,dc,1\n",
    "p.json": PROFILE % HOST,
    "dup.json": PROFILE % f"{HOST}, {HOST}",
    "dup-rtt.json": (PROFILE % f"{HOST}, {HOST.replace('dc', 'x')}").replace(
        '"rtt_ms": []',
        '"rtt_ms": [{"between": ["dc", "x"], "rtt_ms": 1}, {"between": ["x", "dc"], "rtt_ms": 2}]',
    ),
    "fast.json": PROFILE % HOST.replace('"upload_gbps": 1', '"upload_gbps": 2e6'),
    "zero.json": (PROFILE % HOST).replace('"members": 1', '"members": 0'),
    "ab.json": (PROFILE % f"{HOST}, {HOST.replace('dc', 'x')}").replace(
        '"rtt_ms": []', '"rtt_ms": [{"between": "dcx", "rtt_ms": 1}]'
    ),
    "twice.json": (PROFILE % HOST).replace('"label": "t"', '"label": "t", "label": "u"'),
    "fifo.json": (PROFILE % HOST)[:-1]
    + ', "fifo": {"queue_ms": 200, "streams": 0, "tcp_congestion_control": "cubic"}}',
    "deep.json": "[" * 100_000,
    "digits.json": '{"kind": "islands network profile", "version": ' + LONG + "}",
    "bad.toml": "name = [",
    "deep.toml": "name = " + "[" * 100_000 + "]" * 100_000,
    "sweep.csv": SWEEP_CSV,
    "other-sweep.csv": "run,schedule.inner_steps,valid,compute_utilisation,scenario\n0,10,True,0.5,home-lab\n",
    "huge.toml": None,  # the worked example with these replacements (see scenario_files)
    "long.toml": None,
    "overflow.toml": None,
    "inf.toml": None,
    "nan.toml": None,
    "absent.toml": None,
    "clash.toml": None,
    "derived.toml": None,
}
EXTRA_ISLAND = '\n[[island]]\nname = "%s"\nstep_time_s = 1.5\nbandwidth_gbps = 1.0\n%s'

REPLACEMENTS = {
    "huge.toml": ("outer_steps = 20", f"outer_steps = {HUGE}"),
    "long.toml": ("outer_steps = 20", f"outer_steps = {LONG}"),
    "overflow.toml": ("step_time_s = 1.5", "step_time_s = 1e999"),
    "inf.toml": ("step_time_s = 1.5", "step_time_s = inf"),
    "nan.toml": ("step_time_s = 1.5", "step_time_s = nan"),
    "absent.toml": (
        "latency_ms = 0.0",
        "latency_ms = 0.0\n" + EXTRA_ISLAND % ("late", "present = false\n"),
    ),
    "clash.toml": ("latency_ms = 0.0", "latency_ms = 0.0\n" + EXTRA_ISLAND % ("dc-1", "")),
    "derived.toml": ("step_time_s = 1.5", 'gpu = "H100"\nmfu = 0.4\noffload = "optimizer"'),
}
S = "{tmp}/s.toml"
WE = "worked-example"
SHORT = ["--set", "schedule.outer_steps=2"]
THOUSAND = ",".join(map(str, range(1, 1001)))  # a thousand values of a grid axis
TARGET = "target utilisation must be in (0, 1]"
DENSITY = "--densities: each must be in (0, 1], e.g. 0.0156 for 64 of 4096 values"


@dataclass(frozen=True)
class Case:
    command: str
    what: str  # the bad input, in words, for the doc
    argv: tuple[str, ...]
    expected: str  # a part of the one line the command answers (after {tmp} is filled in)


def case(command: str, what: str, argv: list[str], expected: str) -> Case:
    return Case(command, what, (command, *argv), expected)


CASES = [
    # the scenario file, as every scenario-reading command loads it
    case(
        "simulate",
        "no such file",
        ["{tmp}/missing.toml"],
        "missing.toml: no such file or bundled scenario",
    ),
    case("simulate", "a folder", ["{tmp}"], "is a folder: name a scenario TOML file"),
    case("simulate", "an empty name", [""], "argument FILE: is empty"),
    case("simulate", "a file that never ends", ["/dev/zero"], "/dev/zero: is not a regular file"),
    case("simulate", "not TOML", ["{tmp}/bad.toml"], "bad.toml: not valid TOML"),
    case(
        "simulate",
        "arrays nested 100,000 deep",
        ["{tmp}/deep.toml"],
        "deep.toml: has arrays or tables nested too deeply to read",
    ),
    case(
        "simulate",
        "--set nested 100,000 deep",
        [WE, "--set", "schedule.inner_steps=" + "[" * 100_000],
        "schedule.inner_steps: must be an integer (got '[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[...)",
    ),
    case(
        "simulate",
        "a 310-digit integer",
        ["{tmp}/huge.toml"],
        "schedule.outer_steps: must be an integer within +-2**53 (got an integer of 310 digits)",
    ),
    case(
        "simulate",
        "a 5,000-digit integer",
        ["{tmp}/long.toml"],
        "long.toml: has a number too long to read",
    ),
    case(
        "simulate",
        "a float that overflows (1e999)",
        ["{tmp}/overflow.toml"],
        "island.0.step_time_s: must be a finite number (got inf)",
    ),
    case(
        "simulate",
        "inf",
        ["{tmp}/inf.toml"],
        "island.0.step_time_s: must be a finite number (got inf)",
    ),
    case(
        "simulate",
        "nan",
        ["{tmp}/nan.toml"],
        "island.0.step_time_s: must be a finite number (got nan)",
    ),
    # --set
    case("simulate", "--set empty string", [WE, "--set", ""], "argument --set: is empty"),
    case(
        "simulate",
        "--set without =",
        [WE, "--set", "schedule.inner_steps"],
        "an override must look like key=value",
    ),
    case(
        "simulate", "--set with no key", [WE, "--set", "=3"], "an override names a key before the ="
    ),
    case(
        "simulate",
        "--set of an unknown key",
        [WE, "--set", "schedule.nonsense=2"],
        "schedule.nonsense: unknown key (the nearest known keys: inner_steps, outer_steps, overlap_steps)",
    ),
    case(
        "simulate",
        "--set of a misspelt key",
        [WE, "--set", "island.*.bandwith_gbps=3"],
        "island.0.bandwith_gbps: unknown key (did you mean 'bandwidth_gbps'?)",
    ),
    case(
        "simulate",
        "--set that matches no entry",
        [WE, "--set", "region.*.name=x"],
        "region.*.name: the scenario has no [[region]] entries, so this would set nothing",
    ),
    case(
        "simulate",
        "--set of an island that is not there",
        [WE, "--set", "island.9.bandwidth_gbps=1"],
        "island.9.bandwidth_gbps: no island 9: the scenario has 1",
    ),
    case(
        "simulate",
        "--set of the wrong type",
        [WE, "--set", "schedule.inner_steps=abc"],
        "schedule.inner_steps: must be an integer (got 'abc')",
    ),
    case(
        "simulate",
        "--set negative",
        [WE, "--set", "schedule.inner_steps=-1"],
        "schedule.inner_steps: must be >= 1",
    ),
    case(
        "simulate",
        "--set zero",
        [WE, "--set", "schedule.outer_steps=0"],
        "schedule.outer_steps: must be >= 1",
    ),
    case(
        "simulate",
        "--set empty",
        [WE, "--set", "schedule.inner_steps="],
        "must be an integer (got '')",
    ),
    case(
        "simulate",
        "--set nan",
        [WE, "--set", "model.parameters=nan"],
        "model.parameters: must be a finite number",
    ),
    case(
        "simulate",
        "--set inf",
        [WE, "--set", "model.parameters=inf"],
        "model.parameters: must be a finite number",
    ),
    case(
        "simulate",
        "--set a 310-digit number",
        [WE, "--set", f"model.parameters={HUGE}"],
        "model.parameters: must be a finite number (got an integer of 310 digits)",
    ),
    case(
        "simulate",
        "--set a 309-digit number past float's range",
        [WE, "--set", f"model.parameters={'9' * 309}"],
        "model.parameters: must be a finite number (got an integer of 309 digits)",
    ),
    case(
        "simulate",
        "--set a 309-digit integer key",
        [WE, "--set", f"seed={'9' * 309}"],
        "seed: must be an integer within +-2**53 (got an integer of 309 digits)",
    ),
    case(
        "simulate",
        "--set huge",
        [WE, "--set", "island.*.replicas=1000000"],
        "island.0.replicas: must be <= 100000",
    ),
    case(
        "simulate",
        "a quorum above the learners",
        [WE, "--set", "schedule.algorithm=decoupled", "--set", "schedule.quorum=9"],
        "schedule.quorum: must be at most the 8 learners (workers) that report (got 9)",
    ),
    case(
        "simulate",
        "alpha-beta under churn",
        [WE, "--set", "network.model=alpha-beta", "--set", "island.0.mtbf_s=100"],
        "network.model: alpha-beta prices each transfer alone, and under churn (mtbf_s, [[event]], present = "
        "false) a joining worker's download shares links",
    ),
    case(
        "simulate",
        "a bucket size without buckets",
        [WE, "--set", "exchange.bucket_cap_mb=25"],
        'exchange.bucket_cap_mb: has no effect with calls = "flat": set calls = "buckets" or remove it',
    ),
    case(
        "simulate",
        "a first bucket without buckets",
        [WE, "--set", "exchange.first_bucket_mb=1"],
        'exchange.first_bucket_mb: has no effect with calls = "flat": set calls = "buckets" or remove it',
    ),
    case(
        "simulate",
        "a first bucket of no bytes",
        [WE, "--set", "exchange.calls=buckets", "--set", "exchange.first_bucket_mb=0"],
        "exchange.first_bucket_mb: must be >= 0.000976562 MiB (see docs/limits.md) (got 0.0)",
    ),
    case(
        "simulate",
        "tensor sizes that are not a list of numbers",
        [WE, "--set", "exchange.calls=buckets", "--set", 'exchange.tensor_values="big"'],
        "exchange.tensor_values: must be a list of finite numbers, e.g. [4096, 64] (got 'big')",
    ),
    case(
        "simulate",
        "tensor sizes with a NaN",
        [WE, "--set", "exchange.calls=buckets", "--set", "exchange.tensor_values=[1e10, nan]"],
        "exchange.tensor_values: must be a list of finite numbers, e.g. [4096, 64] (got [10000000000.0, nan])",
    ),
    case(
        "simulate",
        "tensor sizes with a huge integer",
        [WE, "--set", "exchange.calls=buckets", "--set", f"exchange.tensor_values=[{LONG}]"],
        "exchange.tensor_values: must be a list of finite numbers, e.g. [4096, 64] (got '[111111111111",
    ),
    case(
        "simulate",
        "an empty list of tensor sizes",
        [WE, "--set", "exchange.calls=buckets", "--set", "exchange.tensor_values=[]"],
        "exchange.tensor_values: must list at least one tensor (got [])",
    ),
    case(
        "simulate",
        "a tensor of no values",
        [WE, "--set", "exchange.calls=buckets", "--set", "exchange.tensor_values=[1e10, 0]"],
        "exchange.tensor_values: tensor 1: must be >= 1 (got [10000000000.0, 0.0])",
    ),
    case(
        "simulate",
        "tensor sizes that do not add up to the model",
        [WE, "--set", "exchange.calls=buckets", "--set", "exchange.tensor_values=[5e9, 4e9]"],
        "exchange.tensor_values: must add up to model.parameters within 1% (they add up to 9e+09, "
        "model.parameters = 1e+10)",
    ),
    case(
        "simulate",
        "tensor sizes for a flat exchange",
        [WE, "--set", "exchange.tensor_values=[5e9, 5e9]"],
        'exchange.tensor_values: has no effect with calls = "flat": set calls = "buckets" or "per_tensor" or '
        "remove it",
    ),
    case(
        "simulate",
        "tensor sizes that disagree with the tensor count",
        [
            WE,
            "--set",
            "exchange.calls=per_tensor",
            "--set",
            "exchange.tensors=3",
            "--set",
            "exchange.tensor_values=[5e9, 5e9]",
        ],
        "exchange.tensor_values: lists 2 tensors but exchange.tensors = 3: give one of them",
    ),
    case(
        "simulate",
        "calls per tensor without the tensors",
        [WE, "--set", "exchange.calls=per_tensor"],
        'exchange.tensors: is required with calls = "per_tensor"',
    ),
    case(
        "simulate",
        "an outer step under DDP",
        [WE, "--set", "schedule.algorithm=ddp", "--set", "exchange.outer_step_s=0.1"],
        'exchange.outer_step_s: has no effect: algorithm = "ddp" takes no outer step (set it to 0)',
    ),
    case(
        "simulate",
        "collective calls priced for Decoupled DiLoCo's syncer",
        [WE, "--set", "schedule.algorithm=decoupled", "--set", "exchange.call_overhead_s=0.01"],
        '[exchange]: prices collective calls; algorithm = "decoupled" has none',
    ),
    case(
        "simulate",
        "weights from an unknown source",
        [WE, "--set", "network.weights_from=lowest"],
        "network.weights_from: must be one of 'fastest', 'striped'",
    ),
    case(
        "simulate",
        "weights from a number",
        [WE, "--set", "network.weights_from=1"],
        "network.weights_from: must be a string",
    ),
    case(
        "simulate",
        "striped weights where no worker joins",
        [WE, "--set", "network.weights_from=striped"],
        "network.weights_from: 'striped' has no effect: no worker ever joins",
    ),
    case(
        "simulate",
        "a ring efficiency above 1",
        [WE, "--set", "network.ring_efficiency=1.5"],
        "network.ring_efficiency: must be <= 1 (see docs/limits.md)",
    ),
    case(
        "simulate",
        "a ring efficiency too small to be a measured share",
        [WE, "--set", "network.ring_efficiency=1e-320"],
        "network.ring_efficiency: must be >= 0.001 (see docs/limits.md) (got 1e-320)",
    ),
    case(
        "simulate",
        "a reduce-scatter neither all-to-all nor ring",
        [WE, "--set", "network.reduce_scatter=tree"],
        "network.reduce_scatter: must be one of 'all_to_all', 'ring'",
    ),
    case(
        "simulate",
        "a FIFO's key under fair queues",
        [WE, "--set", "network.fifo_k_s=0.3"],
        'network.fifo_k_s: has no effect under egress_queue = "fair": it prices one FIFO per egress',
    ),
    case(
        "simulate",
        "a measured ring efficiency beside one FIFO per egress",
        [WE, "--set", "network.egress_queue=fifo", "--set", "network.ring_efficiency=0.9"],
        'network.ring_efficiency: 0.9 with egress_queue = "fifo" charges the FIFO twice',
    ),
    case(
        "simulate",
        "one FIFO per egress under a tree",
        [WE, "--set", "network.egress_queue=fifo", "--set", "network.collective=tree"],
        'network.egress_queue: "fifo" prices ring collectives, in which every worker sends and '
        'receives at once; network.collective = "tree" is not priced by it',
    ),
    case(
        "simulate",
        "a negative k_u of unequal links",
        [WE, "--set", "network.egress_queue=fifo", "--set", "network.fifo_k_u=-0.1"],
        "network.fifo_k_u: must be >= 0 (got -0.1)",
    ),
    case(
        "simulate",
        "a FIFO 0 ms deep",
        [WE, "--set", "network.egress_queue=fifo", "--set", "network.fifo_queue_ms=0"],
        "network.fifo_queue_ms: must be > 0",
    ),
    case(
        "simulate",
        "a first call's set-up of NaN seconds",
        [WE, "--set", "exchange.first_call_s=nan"],
        "exchange.first_call_s: must be a finite number",
    ),
    case(
        "simulate",
        "a negative slowdown of compute while exchanging",
        [WE, "--set", "compute.slowdown_while_exchanging=-0.04"],
        "compute.slowdown_while_exchanging: must be >= 0 (got -0.04)",
    ),
    case(
        "simulate",
        "a slowdown of compute of NaN",
        [WE, "--set", "compute.slowdown_while_exchanging=nan"],
        "compute.slowdown_while_exchanging: must be a finite number (got nan)",
    ),
    case(
        "simulate",
        "a slowdown of compute past its bound",
        [WE, "--set", "compute.slowdown_while_exchanging=11"],
        "compute.slowdown_while_exchanging: must be <= 10 (see docs/limits.md) (got 11.0)",
    ),
    case(
        "simulate",
        "a slowdown of compute past float's range",
        [WE, "--set", f"compute.slowdown_while_exchanging={HUGE}"],
        "compute.slowdown_while_exchanging: must be a finite number (got an integer of 310 digits)",
    ),
    case(
        "simulate",
        "a slowdown of compute as text",
        [WE, "--set", "compute.slowdown_while_exchanging=fast"],
        "compute.slowdown_while_exchanging: must be a finite number (got 'fast')",
    ),
    case(
        "simulate",
        "a quorum on a schedule that syncs everyone",
        [WE, "--set", "schedule.quorum=3"],
        'schedule.quorum: 3 has no effect: algorithm = "diloco" syncs every worker each round; a quorum is '
        'read by "decoupled" only (remove it, or set it to 1)',
    ),
    case(
        "simulate",
        "a return time without departures",
        [WE, "--set", "island.0.mttr_s=3600"],
        "island.0.mttr_s: has no effect without mtbf_s",
    ),
    case(
        "simulate",
        "a recovery time without failures",
        [WE, "--set", "island.0.recovery_s=60"],
        "island.0.recovery_s: has no effect without chip_mtbf_s",
    ),
    case(
        "simulate",
        "a deadline's slack under the wait barrier",
        [WE, "--set", "schedule.deadline_slack=0.5"],
        'schedule.deadline_slack: 0.5 has no effect under barrier = "wait"',
    ),
    case(
        "simulate",
        "a chunk size without compression",
        [WE, "--set", "schedule.chunk_values=1024"],
        'schedule.chunk_values: has no effect without compression = "topk"',
    ),
    case(
        "simulate",
        "error feedback under DDP",
        [WE, "--set", "schedule.algorithm=ddp", "--set", "schedule.error_feedback=0.95"],
        'schedule.error_feedback: has no effect without compression = "topk"',
    ),
    case(
        "simulate",
        "a DCT without compression",
        [WE, "--set", "schedule.transform=dct"],
        'schedule.transform: has no effect without compression = "topk"',
    ),
    case(
        "simulate",
        "an unknown transform",
        [WE, "--set", "schedule.compression=topk", "--set", "schedule.transform=fft"],
        "schedule.transform: must be one of",
    ),
    case(
        "simulate",
        "a DCT of chunks past 4096 values",
        [
            WE,
            "--set",
            "schedule.compression=topk",
            "--set",
            "schedule.transform=dct",
            "--set",
            "schedule.chunk_values=8192",
        ],
        'schedule.chunk_values: must be at most 4096 with transform = "dct"',
    ),
    case(
        "simulate",
        "top-k compression under DDP",
        [WE, "--set", "schedule.algorithm=ddp", "--set", "schedule.compression=topk"],
        'schedule.compression: "topk" is not run by algorithm = "ddp"',
    ),
    case(
        "simulate",
        "2-bit values on a dense payload",
        [WE, "--set", "schedule.bits=2"],
        'schedule.bits: 2 needs compression = "topk"',
    ),
    case(
        "simulate",
        "3-bit values",
        [WE, "--set", "schedule.compression=topk", "--set", "schedule.bits=3"],
        "schedule.bits: must be one of 32, 16, 8, 4, 2, 1",
    ),
    case(
        "simulate",
        "more values kept than a chunk holds",
        [WE, "--set", "schedule.compression=topk", "--set", "schedule.topk=5000"],
        "schedule.topk: must be at most chunk_values = 4096 (got 5000)",
    ),
    case(
        "simulate",
        "a chunk of no values",
        [WE, "--set", "schedule.compression=topk", "--set", "schedule.chunk_values=0"],
        "schedule.chunk_values: must be >= 1",
    ),
    case(
        "simulate",
        "a chunk of half values",
        [WE, "--set", "schedule.compression=topk", "--set", "schedule.chunk_values=64.5"],
        "schedule.chunk_values: must be an integer (got 64.5)",
    ),
    case(
        "simulate",
        "an error feedback that never forgets",
        [WE, "--set", "schedule.compression=topk", "--set", "schedule.error_feedback=1"],
        "schedule.error_feedback: must be in [0, 1)",
    ),
    case(
        "simulate",
        "top-k payloads merged by a median",
        [WE, "--set", "schedule.compression=topk", "--set", "trainer.aggregation=median"],
        'trainer.aggregation: "median" is not run on top-k payloads',
    ),
    case(
        "simulate",
        "a dense payload gathered through a store",
        [WE, "--set", "network.gather=store"],
        'network.gather: "store" gathers top-k payloads: set schedule.compression = "topk"',
    ),
    case(
        "simulate",
        "a gather of no known way",
        [WE, "--set", "schedule.compression=topk", "--set", "network.gather=relay"],
        "network.gather: must be one of 'ring', 'direct', 'store' (got 'relay')",
    ),
    case(
        "simulate",
        "K of M peers around a ring",
        [WE, "--set", "schedule.compression=topk", "--set", "schedule.gather_peers=4"],
        'schedule.gather_peers: has no effect with network.gather = "ring"',
    ),
    case(
        "simulate",
        "more gathered peers than workers",
        [
            WE,
            "--set",
            "schedule.compression=topk",
            "--set",
            "network.gather=direct",
            "--set",
            "schedule.gather_peers=9",
        ],
        "schedule.gather_peers: must be at most the 8 workers of the scenario (got 9)",
    ),
    case(
        "simulate",
        "no gathered peer",
        [
            WE,
            "--set",
            "schedule.compression=topk",
            "--set",
            "network.gather=direct",
            "--set",
            "schedule.gather_peers=0",
        ],
        "schedule.gather_peers: must be >= 1",
    ),
    case(
        "simulate",
        "a store without the store exchange",
        [WE, "--set", "schedule.compression=topk", "--set", "store.bandwidth_gbps=10"],
        'store.bandwidth_gbps: has no effect with network.gather = "ring"',
    ),
    case(
        "simulate",
        "a store of no bandwidth",
        [
            WE,
            "--set",
            "schedule.compression=topk",
            "--set",
            "network.gather=store",
            "--set",
            "store.egress_gbps=0",
        ],
        "store.egress_gbps: must be >= 1e-06 Gbit/s (see docs/limits.md) (got 0.0)",
    ),
    case(
        "simulate",
        "a store connection with no handshake",
        [
            WE,
            "--set",
            "schedule.compression=topk",
            "--set",
            "network.gather=store",
            "--set",
            "store.handshake_round_trips=0",
        ],
        "store.handshake_round_trips: must be >= 1 (got 0)",
    ),
    case(
        "simulate",
        "a store handshake of a fractional round trip",
        [
            WE,
            "--set",
            "schedule.compression=topk",
            "--set",
            "network.gather=store",
            "--set",
            "store.handshake_round_trips=1.5",
        ],
        "store.handshake_round_trips: must be an integer (got 1.5)",
    ),
    case(
        "simulate",
        "a store that answers before it is asked",
        [
            WE,
            "--set",
            "schedule.compression=topk",
            "--set",
            "network.gather=store",
            "--set",
            "store.request_ms=-5",
        ],
        "store.request_ms: must be >= 0 ms (got -5.0)",
    ),
    case(
        "simulate",
        "a store's time to answer that is not a number",
        [
            WE,
            "--set",
            "schedule.compression=topk",
            "--set",
            "network.gather=store",
            "--set",
            "store.request_ms=nan",
        ],
        "store.request_ms: must be a finite number (got nan)",
    ),
    case(
        "simulate",
        "a store's time to answer past float's range",
        [
            WE,
            "--set",
            "schedule.compression=topk",
            "--set",
            "network.gather=store",
            "--set",
            f"store.request_ms={HUGE}",
        ],
        "store.request_ms: must be a finite number (got an integer of 310 digits)",
    ),
    case(
        "simulate",
        "a store slower to answer than an S3 client waits",
        [
            WE,
            "--set",
            "schedule.compression=topk",
            "--set",
            "network.gather=store",
            "--set",
            "store.request_ms=1e6",
        ],
        "store.request_ms: must be <= 60000 ms (see docs/limits.md) (got 1000000.0)",
    ),
    case(
        "simulate",
        "a store's time to answer as text",
        [
            WE,
            "--set",
            "schedule.compression=topk",
            "--set",
            "network.gather=store",
            "--set",
            "store.request_ms=fast",
        ],
        "store.request_ms: must be a finite number (got 'fast')",
    ),
    case(
        "simulate",
        "a store's time to answer with no store",
        [WE, "--set", "schedule.compression=topk", "--set", "store.request_ms=20"],
        'store.request_ms: has no effect with network.gather = "ring"',
    ),
    case(
        "simulate",
        "a store in a region never declared",
        [
            WE,
            "--set",
            "schedule.compression=topk",
            "--set",
            "network.gather=store",
            "--set",
            "store.region=eu",
        ],
        "store.region: names region 'eu', but no [[region]] is declared",
    ),
    case(
        "simulate",
        "collective calls priced on a store's round",
        [
            WE,
            "--set",
            "schedule.compression=topk",
            "--set",
            "network.gather=store",
            "--set",
            "exchange.call_overhead_s=0.1",
        ],
        '[exchange]: prices a ring\'s collective calls; network.gather = "store"',
    ),
    case(
        "simulate",
        "top-k payloads summed up a tree",
        [
            WE,
            "--set",
            "schedule.compression=topk",
            "--set",
            "network.collective=tree",
            "--set",
            "network.model=flow",
        ],
        'network.collective: "tree" sums on the wire, and top-k payloads cannot be summed',
    ),
    case(
        "simulate",
        "a syncer under a coupled schedule",
        [WE, "--set", "syncer.latency_ms=5"],
        'syncer.latency_ms: has no effect: algorithm = "diloco" has no syncer',
    ),
    case(
        "simulate",
        "an absent island that nothing brings in",
        ["{tmp}/absent.toml"],
        "island.1.present: false, and nothing ever brings worker 'late' in",
    ),
    case(
        "simulate",
        "an island named as another island's replica",
        ["{tmp}/clash.toml"],
        "island.1.name: 'dc-1' names both a replica of island 0 ('dc') and island 1: names must be unique",
    ),
    case(
        "simulate",
        "an empty island name",
        [WE, "--set", 'island.0.name=""'],
        "island.0.name: must not be empty (got '')",
    ),
    case(
        "simulate",
        "a replica that does not fit its accelerators",
        [WE, "--set", "island.0.memory_gb=80"],
        "island.0.gpus: a replica of island 'dc' does not fit: it needs 240 GB per accelerator",
    ),
    case(
        "simulate",
        "an accelerator of no memory",
        [WE, "--set", "island.0.memory_gb=0"],
        "island.0.memory_gb: must be >= 0.001 GB",
    ),
    case(
        "simulate",
        "an offload of no known kind",
        [WE, "--set", "island.0.offload=cpu"],
        "island.0.offload: must be one of 'none', 'optimizer'",
    ),
    case(
        "simulate",
        "an offloaded state that outgrows the host",
        [WE, "--set", "island.0.offload=optimizer", "--set", "island.0.host_memory_gb=100"],
        "island.0.host_memory_gb: the offloaded state of a replica of island 'dc' does not fit its "
        "host: it needs 220 GB",
    ),
    case(
        "simulate",
        "host memory without offload",
        [WE, "--set", "island.0.host_memory_gb=2048"],
        'island.0.host_memory_gb: has no effect without offload = "optimizer"',
    ),
    case(
        "simulate",
        "an offload with nothing to check or price",
        [WE, "--set", "island.0.offload=optimizer"],
        "island.0.offload: has no effect here: the step time is given",
    ),
    case(
        "simulate",
        "the host's optimizer rate beside a measured step time",
        [
            WE,
            "--set",
            "island.0.offload=optimizer",
            "--set",
            "island.0.memory_gb=80",
            "--set",
            "island.0.host_optimizer_params_per_s=1e9",
        ],
        "island.0.host_optimizer_params_per_s: has no effect beside step_time_s",
    ),
    case(
        "simulate",
        "a derived step with offload and no host optimizer rate",
        ["{tmp}/derived.toml", "--set", "model.tokens_per_step=1e6"],
        "island.0.host_optimizer_params_per_s: is required with offload",
    ),
    case(
        "simulate",
        "a derived step with offload on an accelerator of no listed host link",
        [
            "{tmp}/derived.toml",
            "--set",
            "model.tokens_per_step=1e6",
            "--set",
            "island.0.gpu=B200",
            "--set",
            "island.0.host_optimizer_params_per_s=1e9",
        ],
        "island.0.host_link_gb_per_s: is required with offload",
    ),
    case(
        "simulate",
        "a host link of NaN",
        [WE, "--set", "island.0.host_link_gb_per_s=nan"],
        "island.0.host_link_gb_per_s: must be a finite number",
    ),
    case(
        "simulate",
        "a negative host memory",
        [WE, "--set", "island.0.host_memory_gb=-1"],
        "island.0.host_memory_gb: must be >= 0.001 GB",
    ),
    case(
        "simulate",
        "a host optimizer rate past any host",
        [WE, "--set", "island.0.host_optimizer_params_per_s=1e20"],
        "island.0.host_optimizer_params_per_s: must be <= 1e+16",
    ),
    case(
        "simulate",
        "alpha-beta where learners share the syncer's link",
        [
            WE,
            "--set",
            "schedule.algorithm=decoupled",
            "--set",
            "syncer.bandwidth_gbps=10",
            "--set",
            "network.model=alpha-beta",
        ],
        "network.model: alpha-beta prices each transfer alone",
    ),
    case(
        "simulate",
        "an rtt_csv that never ends",
        [WE, "--set", 'network.rtt_csv="/dev/zero"'],
        "network.rtt_csv: cannot read /dev/zero: /dev/zero: a round-trip CSV is at most 16777216 bytes",
    ),
    case(
        "simulate",
        "an rtt_csv that is a folder",
        [WE, "--set", 'network.rtt_csv="{tmp}"'],
        "is a folder, not a round-trip CSV",
    ),
    # --network-profile
    case(
        "simulate",
        "--network-profile that never ends",
        [S, "--network-profile", "/dev/zero"],
        "/dev/zero: a network profile is at most 16777216 bytes",
    ),
    case(
        "simulate",
        "--network-profile empty",
        [S, "--network-profile", ""],
        "argument --network-profile: is empty",
    ),
    case(
        "simulate",
        "--network-profile missing",
        [S, "--network-profile", "{tmp}/none.json"],
        "cannot read this network profile: No such file or directory",
    ),
    case(
        "simulate",
        "--network-profile nested 100,000 deep",
        [S, "--network-profile", "{tmp}/deep.json"],
        "deep.json: nested too deeply to be a network profile",
    ),
    case(
        "simulate",
        "--network-profile with a 5,000-digit number",
        [S, "--network-profile", "{tmp}/digits.json"],
        "digits.json: not valid JSON (Exceeds the limit",
    ),
    case(
        "simulate",
        "--network-profile listing a host twice",
        [S, "--network-profile", "{tmp}/dup.json"],
        "dup.json: hosts.1.name: 'dc' is listed twice",
    ),
    case(
        "simulate",
        "--network-profile measuring a pair twice",
        [S, "--network-profile", "{tmp}/dup-rtt.json"],
        "dup-rtt.json: rtt_ms.1: the round trip between 'x' and 'dc' is listed twice",
    ),
    case(
        "simulate",
        "--network-profile with a rate past the scenario's limits",
        [S, "--network-profile", "{tmp}/fast.json"],
        "fast.json: hosts.0.upload_gbps: must be <= 1e+06 Gbit/s (see docs/limits.md) (got 2000000.0)",
    ),
    case(
        "simulate",
        "--network-profile whose FIFO has 0 streams",
        [S, "--network-profile", "{tmp}/fifo.json"],
        "fifo.json: fifo.streams: must be >= 1 (got 0)",
    ),
    case(
        "simulate",
        "--network-profile with an exchange of 0 members",
        [S, "--network-profile", "{tmp}/zero.json"],
        "zero.json: exchange.members: must be a whole number, 1 to the 1 hosts (got 0)",
    ),
    case(
        "simulate",
        "--network-profile with a pair written as text",
        [S, "--network-profile", "{tmp}/ab.json"],
        "ab.json: rtt_ms.0.between: must list two hosts (got 'dcx')",
    ),
    case(
        "simulate",
        "--network-profile with a key written twice",
        [S, "--network-profile", "{tmp}/twice.json"],
        "twice.json: the key 'label' is written twice in one object: one value would be lost",
    ),
    # outputs
    case(
        "simulate",
        "--trace onto the scenario",
        [S, "--trace", S],
        "--trace would overwrite the scenario",
    ),
    case(
        "simulate",
        "--trace onto its rtt_csv",
        [S, "--trace", "{tmp}/rtt.csv"],
        "--trace would overwrite network.rtt_csv",
    ),
    case(
        "simulate",
        "--trace onto the profile",
        [S, "--network-profile", "{tmp}/p.json", "--trace", "{tmp}/p.json"],
        "--trace would overwrite --network-profile",
    ),
    case(
        "simulate",
        "--trace and --links on one file",
        [S, "--trace", "{tmp}/t.csv", "--links", "{tmp}/t.csv"],
        "--trace and --links name the same file",
    ),
    case(
        "simulate",
        "--trace unwritable",
        [WE, "--trace", "/proc/x.csv"],
        "/proc/x.csv: cannot write in /proc",
    ),
    case("simulate", "--trace empty", [WE, "--trace", ""], "argument --trace: is empty"),
    case(
        "simulate", "--links a folder", [WE, "--links", "{tmp}"], "is a folder; name a file in it"
    ),
    case(
        "simulate",
        "--trace with an unknown extension",
        [WE, "--trace", "{tmp}/t.txt"],
        "'.txt' is not a format this writes",
    ),
    case(
        "simulate",
        "--max-events nan",
        [WE, "--max-events", "nan"],
        "--max-events must be >= 1 (got nan)",
    ),
    case(
        "simulate", "--max-events 0", [WE, "--max-events", "0"], "--max-events must be >= 1 (got 0)"
    ),
    case(
        "simulate",
        "--max-events not a number",
        [WE, "--max-events", "many"],
        "argument --max-events: invalid float value: 'many'",
    ),
    case(
        "simulate",
        "a run played with arrays beyond --max-events",
        [WE, "--max-events", "10"],
        "--max-events: the run would take as long as about",
    ),
    case(
        "simulate",
        "a run played event by event beyond --max-events",
        ["decoupled-fleet", "--max-events", "10"],
        "--max-events: the run would need about",
    ),
    # sweep
    case(
        "sweep",
        "--grid without values",
        [WE, "--grid", "schedule.inner_steps"],
        "--grid schedule.inner_steps",
    ),
    case(
        "sweep",
        "--grid of an unknown key",
        [WE, "--grid", "schedule.inner_stepz=1,2"],
        "schedule.inner_stepz: unknown key (did you mean 'schedule.inner_steps'?)",
    ),
    case(
        "sweep",
        "a grid of a million runs",
        [
            WE,
            "--grid",
            f"schedule.inner_steps={THOUSAND}",
            "--grid",
            f"island.*.bandwidth_gbps={THOUSAND}",
        ],
        "--grid: 1000 x 1000 = 1,000,000 runs, above the 100,000 a sweep runs",
    ),
    case(
        "sweep",
        "--seeds huge",
        [WE, "--grid", "schedule.inner_steps=1", "--seeds", "100000000"],
        "--grid: 1 x 100000000 seeds = 100,000,000 runs",
    ),
    case(
        "sweep",
        "--grid with nan",
        [WE, "--grid", "island.*.bandwidth_gbps=nan,1"],
        "island.*.bandwidth_gbps: must be a finite number (got nan)",
    ),
    case(
        "sweep",
        "--grid with a value twice",
        [WE, "--grid", "schedule.inner_steps=1,1"],
        "a value is listed twice",
    ),
    case("sweep", "--grid with no values", [WE, "--grid", "schedule.inner_steps="], "no values"),
    case(
        "sweep",
        "--seeds 0",
        [WE, "--grid", "schedule.inner_steps=1", "--seeds", "0"],
        "--seeds must be >= 1",
    ),
    case(
        "sweep",
        "--top -1",
        [WE, "--grid", "schedule.inner_steps=1", "--top", "-1"],
        "--top must be >= 1",
    ),
    case(
        "sweep",
        "--jobs 0",
        [WE, "--grid", "schedule.inner_steps=1", "--jobs", "0"],
        "--jobs must be >= 1",
    ),
    case(
        "sweep",
        "--rank-by nothing known",
        [WE, *SHORT, "--grid", "schedule.inner_steps=1", "--rank-by", "x"],
        "--rank-by x: not a numeric summary figure",
    ),
    case(
        "sweep",
        "--output unwritable",
        [WE, "--grid", "schedule.inner_steps=1", "-o", "/proc/x.csv"],
        "/proc/x.csv: cannot write in /proc",
    ),
    case(
        "sweep",
        "--output empty",
        [WE, "--grid", "schedule.inner_steps=1", "-o", ""],
        "argument -o/--output: is empty",
    ),
    case(
        "sweep",
        "--output a folder",
        [WE, "--grid", "schedule.inner_steps=1", "-o", "{tmp}"],
        "is a folder",
    ),
    case(
        "sweep",
        "--output onto the rtt_csv",
        [S, "--grid", "schedule.inner_steps=1", "-o", "{tmp}/rtt.csv"],
        "--output would overwrite network.rtt_csv",
    ),
    case(
        "sweep",
        "--dask at a closed port",
        [WE, "--grid", "schedule.inner_steps=1", "--dask", "tcp://127.0.0.1:1"],
        "--dask tcp://127.0.0.1:1: cannot reach a Dask scheduler there",
    ),
    case(
        "sweep",
        "--dask without a port",
        [WE, "--grid", "schedule.inner_steps=1", "--dask", "tcp://127.0.0.1"],
        "not a scheduler address like tcp://HOST:8786",
    ),
    # plan
    case("plan", "--target-utilisation nan", [WE, "--target-utilisation", "nan"], TARGET),
    case("plan", "--target-utilisation 1.5", [WE, "--target-utilisation", "1.5"], TARGET),
    case("plan", "--target-utilisation 0", [WE, "--target-utilisation", "0"], TARGET),
    case(
        "plan",
        "--targets with a word",
        [WE, "--targets", "0.5,most"],
        "expected fractions like 0.5,0.9,0.99",
    ),
    case("plan", "--targets inf", [WE, "--targets", "inf"], TARGET),
    case("plan", "--targets empty", [WE, "--targets", ""], "expected fractions like 0.5,0.9,0.99"),
    case("plan", "--densities 0", ["covenant-72b", "--densities", "0"], DENSITY),
    case("plan", "--densities nan", ["covenant-72b", "--densities", "0.01,nan"], DENSITY),
    case("plan", "--densities above 1", ["covenant-72b", "--densities", "1.5"], DENSITY),
    case(
        "plan",
        "--densities with a word",
        ["covenant-72b", "--densities", "0.01,most"],
        "expected fractions of schedule.chunk_values like 0.0156,0.03",
    ),
    case(
        "plan",
        "--densities on a dense scenario",
        [WE, "--densities", "0.01"],
        "--densities searches the top-k density: seed-10b-1gbps exchanges dense payloads",
    ),
    case("plan", "--seeds 0", [WE, "--seeds", "0"], "--seeds must be in [1, 100] (got 0)"),
    case("plan", "--jobs -2", [WE, "--jobs", "-2"], "--jobs must be >= 1"),
    case(
        "plan",
        "--objective unknown",
        [WE, "--objective", "speed"],
        "argument --objective: invalid choice: 'speed'",
    ),
    case(
        "plan",
        "--profile without an objective",
        [WE, "--profile", "{tmp}/p.json"],
        "--profile prices loss: it goes with --objective time-to-loss or cost",
    ),
    case(
        "plan",
        "--seeds huge",
        [WE, "--seeds", "100000000"],
        "--seeds must be in [1, 100] (got 100000000)",
    ),
    case(
        "plan",
        "--objective cost without prices",
        [WE, "--objective", "cost"],
        "island.0.cost_per_hour: --objective cost needs every island's price per worker-hour",
    ),
    case(
        "plan",
        "--profile that never ends",
        [WE, "--objective", "time-to-loss", "--profile", "/dev/zero"],
        "/dev/zero: a quality profile is at most 16777216 bytes",
    ),
    case(
        "plan",
        "--profile nested 100,000 deep",
        [
            WE,
            "--objective",
            "cost",
            "--set",
            "island.*.cost_per_hour=1",
            "--profile",
            "{tmp}/deep.json",
        ],
        "deep.json: nested too deeply to be a quality profile",
    ),
    case(
        "plan",
        "--profile missing",
        [WE, "--objective", "time-to-loss", "--profile", "{tmp}/none.json"],
        "cannot read this quality profile: No such file or directory",
    ),
    case("plan", "--max-events -1", [WE, "--max-events", "-1"], "--max-events must be >= 1"),
    case("plan", "--dask empty", [WE, "--dask", ""], "argument --dask: is empty"),
    case(
        "plan",
        "--dask at a closed port",
        [WE, "--dask", "tcp://127.0.0.1:1"],
        "cannot reach a Dask scheduler there",
    ),
    case(
        "plan",
        "--dask a tls:// address",
        [WE, "--dask", "tls://127.0.0.1:1"],
        "--dask tls://127.0.0.1:1: islands connects to tcp:// schedulers only (tls:// is not supported)",
    ),
    # bandwidth-table
    case(
        "bandwidth-table",
        "--sizes unknown",
        ["--sizes", "2b"],
        "--sizes: each must be one of 1b, 10b, 100b",
    ),
    case("bandwidth-table", "--sizes empty", ["--sizes", ""], "argument --sizes: is empty"),
    case(
        "bandwidth-table",
        "--sizes of commas",
        ["--sizes", ",,"],
        "--sizes: each must be one of 1b, 10b, 100b",
    ),
    case(
        "bandwidth-table",
        "--sizes with a size twice",
        ["--sizes", "1b,1b"],
        "--sizes: 1b is listed twice (got '1b,1b'); name each size once",
    ),
    case("bandwidth-table", "--jobs 0", ["--jobs", "0"], "--jobs must be >= 1"),
    case(
        "bandwidth-table",
        "--max-events nan",
        ["--max-events", "nan"],
        "--max-events must be >= 1 (got nan)",
    ),
    case(
        "bandwidth-table",
        "--set of an unknown key",
        ["--set", "schedule.x=1"],
        "schedule.x: unknown key",
    ),
    case(
        "bandwidth-table",
        "--set beyond the simulator's bound",
        ["--sizes", "1b", "--set", "schedule.outer_steps=10000000"],
        "--max-events: the run would need about 5.5e+07 simulator events",
    ),
    case(
        "bandwidth-table",
        "--output unwritable",
        ["--output", "/proc/x.csv"],
        "/proc/x.csv: cannot write in /proc",
    ),
    case("bandwidth-table", "--output a folder", ["--output", "{tmp}"], "is a folder"),
    case(
        "bandwidth-table",
        "--output with an unknown extension",
        ["--output", "{tmp}/t.txt"],
        "'.txt' is not a format this writes",
    ),
    # goodput
    case(
        "goodput", "--failures 0", ["--failures", "0"], "--failures must be in [1, 10000] (got 0)"
    ),
    case(
        "goodput",
        "--failures 1000000",
        ["--failures", "1000000"],
        "--failures must be in [1, 10000] (got 1000000)",
    ),
    case(
        "goodput",
        "--failures not an integer",
        ["--failures", "1e3"],
        "argument --failures: invalid int value: '1e3'",
    ),
    case(
        "goodput",
        "--failures 2000: the grid would run for hours",
        ["--failures", "2000"],
        "chaos: --failures 2000: the goodput grid would need about 2.89e+08 simulator events in all, above the 6e+07 "
        "(about an hour of CPU) it allows: use --failures 415 or fewer",
    ),
    case(
        "goodput",
        "--failures 10000 (the most a cell takes): a cell beyond the simulator's bound",
        ["--failures", "10000"],
        "the goodput cell Decoupled, M=8, 0.15M chips would need about 1.76e+08 simulator "
        "events, above 1e+08: lower --failures",
    ),
    case(
        "goodput",
        "cells priced beyond the simulator's bound",
        ["--failures", "3000", "--set", "island.0.step_time_s=0.01"],
        "the goodput cell DP, non-elastic, 0.15M chips would need about 1.23e+09 simulator events, above 1e+08",
    ),
    case(
        "goodput",
        "--set of a key every cell sets",
        ["--set", "island.0.chips=1"],
        "--set island.0.chips=1: the goodput grid sets island.0.chips itself in every cell",
    ),
    case(
        "goodput",
        "--set of the method",
        ["--set", "schedule.algorithm=ddp"],
        "--set schedule.algorithm=ddp: the goodput grid sets schedule.algorithm itself in every cell",
    ),
    case("goodput", "--jobs 0", ["--jobs", "0"], "--jobs must be >= 1"),
    case(
        "goodput",
        "a scenario without chip failures",
        [WE],
        "island.0.chip_mtbf_s: is required for the goodput grid",
    ),
    case(
        "goodput",
        "--output unwritable",
        ["--output", "/proc/x.csv"],
        "/proc/x.csv: cannot write in /proc",
    ),
    case("goodput", "--output a folder", ["--output", "{tmp}"], "is a folder"),
    case(
        "goodput",
        "--output onto the rtt_csv",
        [S, "--output", "{tmp}/rtt.csv"],
        "--output would overwrite",
    ),
    # report
    case(
        "report",
        "--output unwritable",
        [WE, "-o", "/proc/x.html"],
        "/proc/x.html: cannot write in /proc",
    ),
    case("report", "--output a folder", [WE, "-o", "{tmp}"], "is a folder"),
    case(
        "report",
        "--output onto the sweep table",
        [WE, "--sweep", "{tmp}/rtt.csv", "-o", "{tmp}/rtt.csv"],
        "'.csv' is not a format this writes",
    ),
    case(
        "report",
        "--sweep that never ends",
        [WE, "--sweep", "/dev/zero"],
        "/dev/zero: a sweep table is at most",
    ),
    case(
        "report",
        "--sweep missing",
        [WE, "--sweep", "{tmp}/none.csv"],
        "cannot read this sweep table",
    ),
    case(
        "report", "--sweep not a sweep table", [WE, "--sweep", "{tmp}/rtt.csv"], "not a sweep table"
    ),
    case(
        "report",
        "--where without --sweep",
        [WE, "--where", "a=1"],
        "--where picks rows of a sweep table",
    ),
    case(
        "report",
        "--sweep of another scenario",
        [WE, "--sweep", "{tmp}/other-sweep.csv"],
        "other-sweep.csv: a sweep of 'home-lab', not of 'seed-10b-1gbps' (the scenario given)",
    ),
    case(
        "report",
        "--sweep --where of no row",
        [WE, "--sweep", "{tmp}/sweep.csv", "--where", "schedule.inner_steps=7"],
        "--where schedule.inner_steps=7: no row of the sweep table has schedule.inner_steps = 7",
    ),
    case("report", "--max-events 0", [WE, "--max-events", "0"], "--max-events must be >= 1"),
    case("report", "--max-events below the run", [WE, "--max-events", "10"], "raise --max-events"),
    case("report", "--target-utilisation nan", [WE, "--target-utilisation", "nan"], TARGET),
    case("report", "--seeds 0", [WE, "--seeds", "0"], "--seeds must be in [1, 100] (got 0)"),
    case(
        "report",
        "--seeds huge",
        [WE, "--seeds", "100000000"],
        "--seeds must be in [1, 100] (got 100000000)",
    ),
    case("report", "--jobs 0", [WE, "--jobs", "0"], "--jobs must be >= 1"),
    case(
        "report",
        "--dask at a closed port",
        [WE, "--dask", "tcp://127.0.0.1:1"],
        "cannot reach a Dask scheduler",
    ),
    # trace
    case("trace", "--max-events 0", [WE, "--max-events", "0"], "--max-events must be >= 1"),
    case("trace", "--max-events below the run", [WE, "--max-events", "10"], "raise --max-events"),
    # plot
    case(
        "plot",
        "an unknown kind",
        ["bandwith", WE],
        "unknown plot kind 'bandwith' (did you mean 'bandwidth'?)",
    ),
    case("plot", "--size 0x0", ["timeline", WE, "--size", "0x0"], "--size 0x0: each side must be"),
    case(
        "plot",
        "--size huge",
        ["timeline", WE, "--size", "100000x100000"],
        "--size 100000x100000: each side must be",
    ),
    case(
        "plot",
        "--size not WxH",
        ["timeline", WE, "--size", "big"],
        "--size big: write WIDTHxHEIGHT",
    ),
    case(
        "plot", "--max-events 0", ["timeline", WE, "--max-events", "0"], "--max-events must be >= 1"
    ),
    case(
        "plot",
        "--max-events below the run",
        ["bandwidth", WE, "--max-events", "10"],
        "raise --max-events",
    ),
    case(
        "plot",
        "--worker out of range",
        ["bandwidth", WE, "--worker", "99"],
        "--worker 99: the scenario has workers 0 to 7",
    ),
    case(
        "plot",
        "--worker negative",
        ["bandwidth", WE, "--worker", "-1"],
        "--worker -1: the scenario has workers",
    ),
    case(
        "plot",
        "--direction unknown",
        ["bandwidth", WE, "--direction", "sideways"],
        "--direction sideways: must be",
    ),
    case(
        "plot",
        "--intervals backwards",
        ["timeline", WE, "--intervals", "5:2"],
        "need 0 <= START < STOP",
    ),
    case(
        "plot",
        "--intervals not numbers",
        ["timeline", WE, "--intervals", "a:b"],
        "write START:STOP",
    ),
    case(
        "plot",
        "--output unwritable",
        ["timeline", WE, "-o", "/proc/x.png"],
        "/proc/x.png: cannot write in /proc",
    ),
    case("plot", "--output empty", ["timeline", WE, "-o", ""], "argument -o/--output: is empty"),
    case("plot", "--output a folder", ["timeline", WE, "-o", "{tmp}"], "is a folder"),
    case(
        "plot",
        "--output with an unknown extension",
        ["timeline", WE, "-o", "{tmp}/x.txt"],
        "'.txt' is not a format this writes",
    ),
    case(
        "plot",
        "heatmap of a file that never ends",
        ["heatmap", "/dev/zero"],
        "a sweep table is at most",
    ),
    case(
        "plot",
        "heatmap --metric of text",
        ["heatmap", "{tmp}/sweep.csv", "--metric", "error"],
        "--metric error: not a numeric column of the sweep table (e.g. compute_utilisation, wall_time_s)",
    ),
    case(
        "plot",
        "heatmap --x and --y the same",
        [
            "heatmap",
            "{tmp}/sweep.csv",
            "--x",
            "schedule.inner_steps",
            "--y",
            "schedule.inner_steps",
        ],
        "--x and --y both name schedule.inner_steps",
    ),
    case(
        "plot",
        "heatmap --where of no row",
        ["heatmap", "{tmp}/sweep.csv", "--where", "schedule.inner_steps=7"],
        "--where schedule.inner_steps=7: no row of the sweep table has schedule.inner_steps = 7",
    ),
    case(
        "plot",
        "heatmap --output onto the sweep table",
        ["heatmap", "{tmp}/sweep.csv", "-o", "{tmp}/sweep.csv"],
        "'.csv' is not a format this writes",
    ),
    case(
        "plot",
        "heatmap with --set",
        ["heatmap", "{tmp}/rtt.csv", "--set", "a=1"],
        "--set applies to scenarios",
    ),
    # list, demo
    case("list", "an argument it does not take", ["extra"], "unrecognized arguments: extra"),
    case("demo", "--out unwritable", [WE, "--no-train", "--out", "/proc/demo"], "/proc/demo"),
    case("demo", "--out empty", [WE, "--no-train", "--out", ""], "argument --out: is empty"),
    case(
        "demo",
        "--out a file",
        [WE, "--no-train", "--out", "{tmp}/rtt.csv"],
        "--out must be a folder",
    ),
    case("demo", "a bad scenario", ["{tmp}/bad.toml", "--no-train"], "bad.toml: not valid TOML"),
    # report --axis: parsed and each value checked before any run
    case(
        "report", "--axis without =", [WE, "--axis", "latency"], "--axis latency: write KEY=V1,V2"
    ),
    case(
        "report",
        "--axis with an empty value",
        [WE, "--axis", "schedule.bits=4,"],
        "a value is empty",
    ),
    case("report", "--axis with a value twice", [WE, "--axis", "schedule.bits=4,4"], "given twice"),
    case(
        "report",
        "--axis with a value the format refuses",
        [WE, "--axis", "island.0.replicas=4,0"],
        "--axis island.0.replicas=4,0: 0: island.0.replicas: must be >= 1 (got 0)",
    ),
    case(
        "report",
        "--axis of an unknown key",
        [WE, "--axis", "schedule.inner_stepz=1,2"],
        "schedule.inner_stepz: unknown key",
    ),
    case(
        "report",
        "--axis of one key twice",
        [WE, "--axis", "schedule.bits=4", "--axis", "schedule.bits=8"],
        "--axis schedule.bits: marked twice",
    ),
    # serve: refused before anything is served
    case(
        "serve", "no such scenario", ["{tmp}/missing.toml"], "missing.toml: no such file or bundled"
    ),
    case("serve", "not TOML", ["{tmp}/bad.toml"], "bad.toml: not valid TOML"),
    case(
        "serve",
        "a --set the loader refuses",
        [WE, "--set", "schedule.inner_steps=0"],
        "schedule.inner_steps: must be >= 1 (got 0)",
    ),
    case(
        "serve",
        "--port not a number",
        [WE, "--port", "eighty"],
        "argument --port: invalid int value: 'eighty'",
    ),
    case("serve", "--port out of range", [WE, "--port", "70000"], "must be in [0, 65535]"),
    case("serve", "--port negative", [WE, "--port=-1"], "--port -1: must be in [0, 65535]"),
    case("serve", "--port in use", [WE, "--port", "{busy}"], "already in use on 127.0.0.1"),
    case(
        "serve",
        "--host not this machine's",
        [WE, "--host", "192.0.2.1"],
        "--host 192.0.2.1 --port 8765: cannot listen there",
    ),
    case("serve", "--max-events below 1", [WE, "--max-events", "0"], "--max-events must be >= 1"),
]
# A port that is in use while the cases run ("{busy}" in an argument; "{busy}" in the doc)
BUSY = socket.create_server(("127.0.0.1", 0))
BUSY_PORT = str(BUSY.getsockname()[1])


def scenario_files(folder: Path) -> None:
    """``s.toml`` (the worked example reading rtt.csv) and every file of ``FILES`` in ``folder``."""
    from islands.scenarios.loader import resolve

    worked = resolve(WE).read_text(encoding="utf-8")
    (folder / "s.toml").write_text(worked + '\n[network]\nrtt_csv = "rtt.csv"\n')
    for name, text in FILES.items():
        if text is None:
            old, new = REPLACEMENTS[name]
            text = worked.replace(old, new)
        (folder / name).write_text(text)


def answer(case_: Case, folder: Path) -> tuple[int, str]:
    """The exit code and what the command printed on stderr."""
    err = io.StringIO()
    argv = [part.replace("{tmp}", str(folder)).replace("{busy}", BUSY_PORT) for part in case_.argv]
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as exit_:  # argparse's own errors
            code = exit_.code
    busy = "{busy}" in case_.argv
    return code, err.getvalue().replace(BUSY_PORT, "{busy}") if busy else err.getvalue()


ANSWERS: dict[int, str] = {}  # case index -> the line it answered, with the folder as {tmp}


@pytest.fixture
def folder(tmp_path):
    scenario_files(tmp_path)
    return tmp_path


@pytest.mark.parametrize("index", range(len(CASES)), ids=[f"{c.command}: {c.what}" for c in CASES])
def test_a_bad_input_is_one_line_and_exit_2_before_any_work(index, folder):
    case_ = CASES[index]
    started = time.monotonic()
    code, err = answer(case_, folder)
    assert time.monotonic() - started < SECONDS_BEFORE_WORK
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith((f"islands {case_.command}: error: ", "islands: error: ")), lines[0]
    assert case_.expected.replace("{tmp}", str(folder)) in lines[0], lines[0]
    ANSWERS[index] = lines[0].replace(str(folder), "{tmp}")


def test_a_goodput_cell_cut_short_is_marked_not_a_number():
    from islands.analysis.sweep.goodput import METHODS, goodput_table, table_text
    from islands.scenarios import ScenarioSource

    source = ScenarioSource.read(
        "chaos", ["island.0.recovery_s=1e7"]
    )  # a failed DP fleet never recovers in time
    table = goodput_table(source, failures=3, chips=(150_000,), methods=(METHODS[0],), jobs=1)
    row = table.iloc[0]
    assert row["simulated_percent"] is None and row["difference_points"] is None
    assert "stopped at the horizon" in row["incomplete_reason"]
    text = table_text(table)
    assert "| DP, non-elastic | cut short (72%) |" in text
    assert "worst difference none over 0 complete cells" in text


def test_learners_sharing_the_syncer_link_take_n_times_as_long():
    """8 learners each send S = 2 GB (1e9 bf16 values) up to the syncer's 10 Gbit/s link together, then
    take the merged fragment back down it: each way takes 8 x 16 Gbit / 10 Gbit/s = 12.8 s, not 1.6 s."""
    from islands.scenarios import from_dict
    from islands.simulator import simulate

    learners, payload_bytes, syncer_bits_per_s, compute_s = 8, 2e9, 10e9, 10 * 1.0
    document = {
        "name": "shared",
        "model": {"parameters": 1e9, "bytes_per_param": 2},
        "schedule": {
            "algorithm": "decoupled",
            "inner_steps": 10,
            "outer_steps": 1,
            "quorum": learners,
        },
        "syncer": {"bandwidth_gbps": syncer_bits_per_s / 1e9},
        "island": [{"name": "l", "replicas": learners, "step_time_s": 1.0, "bandwidth_gbps": 1000}],
    }
    summary = simulate(from_dict(document)).summary
    one_way_s = learners * payload_bytes * 8 / syncer_bits_per_s
    assert summary["wall_time_s"] == pytest.approx(compute_s + 2 * one_way_s, rel=1e-9)


def test_bandwidth_table_rows_are_labelled_by_the_schedule_they_run():
    from islands.analysis.planner.bandwidth_table import bandwidth_table, table_text

    table = bandwidth_table(("1b",), ("schedule.algorithm=ddp", "schedule.outer_steps=2"), jobs=1)
    methods = list(dict.fromkeys(table["method"]))
    assert methods == [
        "Data-Parallel",
        "Vanilla DiLoCo",
        "Streaming DiLoCo run as DDP",
        "w/ overlapped com. run as DDP",
        "w/ overlapped FP4 com. run as DDP",
    ]
    assert table[table["method"].str.endswith("as DDP")]["paper_gbps"].isna().all()
    assert "of 10 cells within one grid step" in table_text(table)


def test_the_guard_counts_the_islands_by_islands_matrix(tmp_path):
    """2,000 islands with one measured round trip: a 2,000 x 2,000 float64 matrix, 32 MB, above the
    10 MB that --max-events 10,000 allows (1 kB per event), though the run needs far fewer events."""
    islands = "".join(
        f'[[island]]\nname = "i{i}"\nstep_time_s = 1\nbandwidth_gbps = 10\n' for i in range(2000)
    )
    path = tmp_path / "wide.toml"
    path.write_text(
        'name = "wide"\n[model]\nparameters = 1e6\n[schedule]\nalgorithm = "diloco"\nouter_steps = 1\n'
        f'{islands}[[latency]]\nbetween = ["i0", "i1"]\nrtt_ms = 10\n'
    )
    code, err = answer(case("simulate", "", [str(path), "--max-events", "10000"], ""), tmp_path)
    assert code == 2 and len(err.strip().splitlines()) == 1
    topology_bytes = (
        8 * (1 + 2000**2) + 200 * 2000
    )  # the region and island matrices, 200 B per worker
    memory_bytes = topology_bytes + 2000 * 2000  # and 2 kB per worker-sync: 2,000 workers sync once
    assert (
        f"wide.toml: --max-events: the run would take about {memory_bytes / 1e9:.3g} GB of memory "
        f"({topology_bytes / 1e9:.3g} GB of it the topology: 2000 islands"
    ) in err


def serve(reply: bytes | None) -> tuple[socket.socket, str]:
    """A local port that answers every connection with ``reply`` once it has read a request (None: never)."""
    server = socket.create_server(("127.0.0.1", 0))

    def handle() -> None:
        while True:
            try:
                connection, _ = server.accept()
            except OSError:
                return
            if reply is not None:
                connection.recv(1024)
                connection.sendall(reply)
            threading.Timer(5, connection.close).start()

    threading.Thread(target=handle, daemon=True).start()
    return server, f"tcp://127.0.0.1:{server.getsockname()[1]}"


@pytest.mark.parametrize(
    "reply, expected",
    [
        (
            b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n",
            "no Dask scheduler answered within 0.5 s",
        ),
        (None, "no Dask scheduler answered within 0.5 s"),
    ],
)
def test_dask_at_a_port_that_is_not_a_scheduler_is_one_line(reply, expected, monkeypatch, tmp_path):
    from islands.commands import common

    monkeypatch.setattr(common, "DASK_CONNECT_TIMEOUT_S", 0.5)
    server, address = serve(reply)
    with server:
        started = time.monotonic()
        code, err = answer(case("plan", "", [WE, "--dask", address], ""), tmp_path)
    assert time.monotonic() - started < SECONDS_BEFORE_WORK
    assert code == 2 and err.strip() == f"islands plan: error: --dask {address}: {expected}"


def test_dask_at_a_port_that_greets_in_http_is_one_line(monkeypatch):
    from islands.commands import common

    server = socket.create_server(("127.0.0.1", 0))
    address = f"tcp://127.0.0.1:{server.getsockname()[1]}"

    def greet() -> None:
        connection, _ = server.accept()
        connection.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
        threading.Timer(5, connection.close).start()

    threading.Thread(target=greet, daemon=True).start()
    with (
        server,
        pytest.raises(
            UserError,
            match=r"something answers there, but not a Dask scheduler "
            r"\(it began with b'HTTP/1.1'\)",
        ),
    ):
        common.probe_dask_scheduler(address, 5)


def doc_text(answers: dict[int, str]) -> str:
    """docs/bad-inputs-simulation.md: per command, a table of the inputs tried and the line answered."""
    parts = [DOC_HEAD]
    for command in dict.fromkeys(c.command for c in CASES):
        parts.append(
            f"\n## islands {command}\n\n| bad input | arguments | answer (exit code 2) |\n| --- | --- | --- |"
        )
        for index, case_ in enumerate(CASES):
            if case_.command == command:
                argv = " ".join(shown_argument(part) for part in case_.argv[1:])
                parts.append(
                    f"| {case_.what} | `{argv}` | `{cell(answers[index].removeprefix('islands '))}` |"
                )
    return "\n".join(parts) + "\n"


def shown_argument(part: str) -> str:
    """An argument as the doc shows it: a long value cut to its first characters and its length."""
    key, equals, value = part.rpartition("=")
    if len(part) <= 40 or len(value) <= 20:
        return part
    return f"{key}{equals}{value[:10]}...({len(value)} characters)"


def cell(line: str) -> str:
    line = re.sub(r"\d{40,}", lambda m: f"{m.group()[:20]}...", line)
    return line.replace("|", "\\|").replace("`", "'")


DOC_HEAD = """# Bad input on the simulation side: what each command answers

Every command that reads a scenario (simulate, sweep, plan, bandwidth-table, goodput, report, plot,
demo, serve) answers bad input with **one line on stderr and exit code 2**, before any long work: never a
traceback, a hang, or a silent wrong number. The tables below list the inputs tried and the line
each gets, exactly as the commands print it after `islands ` (`{tmp}` is the folder of the test's files: `s.toml` is
the worked example reading `rtt.csv`, `p.json` a network profile for it).

This file is written from the case list of `tests/test_bad_inputs_simulation.py` by running the
commands (`python tests/test_bad_inputs_simulation.py` rewrites it), and a test checks that it still
matches what they answer. Beyond these rows, generated suites (`tests/test_properties_scenario_files.py`,
`tests/test_properties_network_profile.py`, `tests/test_properties_quality_profile.py`; a few cases
each in `make test`, thousands in `make fuzz`) change a valid scenario or profile at one place (a value
of another type, out of range, NaN, an infinity, an integer of 401 digits, arrays 100,000 deep, a key
removed, added or written twice) or cut it at any byte: each is read or refused in one line naming
the file.

Rules behind the answers:

* every file read is bounded (`islands/io.py`: 64 MB for a scenario, 16 MB for a network profile or
  a round-trip CSV): `/dev/zero` costs one bounded read;
* a number must be finite as a float, an integer key within +-2**53; a huge number is shown by its
  digit count, never printed whole;
* `--set` that would set nothing (no such key, no such entry) is refused, naming the nearest keys;
* an output that is also an input (the scenario, its `rtt_csv`, the network profile) or another
  output, an unwritable path or a folder is refused before the run;
* `serve` binds its port before it serves: a port in use (`{busy}` above: one held by the test), out
  of range or not a number, or an address that is not this machine's, is one line;
* `--dask tcp://HOST:PORT` is probed first (5 s): a closed, silent or non-Dask (HTTP) port is one line;
  another scheme (`tls://`, which needs certificates islands does not configure) is refused;
* the simulator's resource guard refuses a run beyond `--max-events` events, or beyond 1 kB of
  memory per event, the topology's islands x islands matrix of measured round trips counted;
* `goodput` runs at most 10,000 failures per cell and at most 6e7 simulator events for its whole
  grid (the default, 300 failures, is about 1.8e7; 10,000 would take hours), priced before any cell
  runs, and marks a cell a run cut short instead of giving it a number.
"""


@pytest.mark.skipif(sys.platform != "linux", reason="the messages name Linux's /proc and /dev/zero")
def test_the_doc_lists_every_case_with_its_answer(folder):
    assert DOC.read_text(encoding="utf-8") == doc_text(all_answers(folder))


def all_answers(folder: Path) -> dict[int, str]:
    """Every case's line, from this session's tests where they ran, else by running it now."""
    for index, case_ in enumerate(CASES):
        if index not in ANSWERS:
            ANSWERS[index] = answer(case_, folder)[1].strip().replace(str(folder), "{tmp}")
    return ANSWERS


if __name__ == "__main__":  # rewrite the doc from the commands' answers
    with tempfile.TemporaryDirectory() as temporary:
        scenario_files(Path(temporary))
        DOC.write_text(doc_text(all_answers(Path(temporary))), encoding="utf-8")
    print(f"wrote {DOC}")
