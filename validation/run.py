"""The measured side of a validation: the scaled scenario trained for real over an emulated WAN.

Each island's rank runs inside its network namespace (kernel htb shaping, ``EmulatedWAN``) or, where
namespaces are unavailable, over loopback with the in-process shaper; either way the cross-island
collectives are paced by the launch spec's ``wan_pacer`` (``trainer/runtime/paced.py``). Bytes per island are read
from the shaped interface's own kernel counters before and after the run.

Ranks are started here rather than by ``launch.launch_local`` because the same starter serves the
calibration probe (not a training run, its rank 0's output piped back) and the training run (its
console silenced). A fresh namespace has every port free, so ``RENDEZVOUS_PORT`` is used there.

The object store of ``network.gather = "store"``: under kernel shaping, a host of its own on the link
after the islands' (``store_link``: its ingress is what that link takes in, its egress what it sends,
its latency the store's), serving a directory over HTTP (``store_host``,
``trainer/runtime/object_store_host.py``, each request answered after ``store.request_ms``), so that
every PUT and GET crosses the island's shaped link and the store's as TCP streams; in-process, the
directory itself, paced by each rank (``trainer/runtime/paced.py``).
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from islands.emulation import (
    EmulatedWAN,
    InProcessShaper,
    LinkSpec,
    Shaper,
    links_from_workers,
    open_wan,
)
from islands.errors import UserError
from islands.schedules import SCHEDULES
from islands.schedules.gather import STORE
from islands.trainer.kinds import kind_of
from islands.trainer.runtime.processes import free_port, stop_all, wait_all
from islands.trainer.runtime.spec import LaunchSpec
from islands.units import BITS_PER_GBIT, MS_PER_S

from .run_folder import read_run

RENDEZVOUS_PORT = 29500
STORE_PORT = 29700  # the object store host's, in its own namespace
STORE_STOP_S = 10.0
# Every emulated WAN of ``islands validate`` is named <stem><use> (isvcalib, isvrun, isvchurn); the
# demo uses its own stem, so that it can run beside a validation.
VALIDATE_STEM = "isv"
FP32_BYTES = 4


@dataclass
class Measured:
    summary: dict
    trace: pd.DataFrame
    run_info: dict
    interface_bytes: list[int] | None  # per island, sent on its shaped interface; None in-process
    wan_label: str
    weights_broadcast: (
        bool  # whether the islands got the initial fp32 weights over the shaped links
    )
    store_bytes: dict[str, int] | None = None  # the store host's interface: rx_bytes, tx_bytes


def rendezvous(wan: EmulatedWAN | InProcessShaper, host: int = 0) -> tuple[str, int]:
    if isinstance(wan, EmulatedWAN):
        return wan.address(host), RENDEZVOUS_PORT
    return "127.0.0.1", free_port("127.0.0.1")


def start_ranks(
    wan: EmulatedWAN | InProcessShaper,
    argv: list[str],
    world_size: int,
    stdout: int | None = None,
    extra_env: dict[str, str] | None = None,
    syncer: bool = False,
    object_store: str | None = None,
) -> list[subprocess.Popen]:
    """One process per island (rank = island), inside its namespace, with the pacer in its environment;
    with ``syncer``, Decoupled DiLoCo's syncer first, on the link after the islands', hosting the store;
    ``object_store``: the address of the object store host (``store_host``)."""
    address, port = rendezvous(wan, world_size if syncer else 0)
    children = []
    for rank in range(world_size + 1 if syncer else world_size):
        env = {
            **os.environ,
            "RANK": str(rank),
            "WORLD_SIZE": str(world_size),
            "LOCAL_RANK": "0",
            "LOCAL_WORLD_SIZE": "1",
            "MASTER_ADDR": address,
            "MASTER_PORT": str(port),
            "OMP_NUM_THREADS": "1",
            "TORCH_CPP_LOG_LEVEL": "ERROR",
            **wan.environment(rank),
            **(extra_env or {}),
            **LaunchSpec(
                wan_pacer=wan.pacer_config(),
                syncer=rank == world_size,
                object_store=object_store,
            ).environment(),
        }
        command = [*wan.command_prefix(rank), sys.executable, *argv]
        children.append(
            subprocess.Popen(command, env=env, stdout=stdout if rank == 0 else subprocess.DEVNULL)
        )
    return children


def syncer_link(plan) -> LinkSpec:
    """The syncer's link, after the islands': its ``[syncer]`` rate, or unshaped (a non-blocking core)."""
    spec = plan.scenario.syncer
    rate = math.inf if spec.bandwidth_gbps is None else spec.bandwidth_gbps * BITS_PER_GBIT
    return LinkSpec(plan.islands, rate, rate, spec.latency_ms / MS_PER_S)


def store_link(plan) -> LinkSpec:
    """The object store's link, after the islands': what it takes in (every PUT) at its ingress, what
    it sends (every GET) at its egress, unshaped where ``[store]`` gives none, its latency the store's."""
    spec = plan.scenario.store
    ingress, egress = (
        math.inf if g is None else g * BITS_PER_GBIT for g in (spec.ingress, spec.egress)
    )
    return LinkSpec(plan.islands, egress, ingress, spec.latency_ms / MS_PER_S)


@contextmanager
def store_host(
    wan: EmulatedWAN | InProcessShaper, index: int, request_ms: float = 0.0
) -> Iterator[str | None]:
    """The object store host on link ``index`` while the block runs, answering each request after
    ``request_ms``, its address (None in-process: the ranks use a directory, paced by themselves);
    its directory is removed after."""
    if not isinstance(wan, EmulatedWAN):
        yield None
        return
    root = tempfile.mkdtemp(prefix="islands-store-")
    address = wan.address(index)
    command = [
        *wan.command_prefix(index),
        sys.executable,
        "-m",
        "islands.trainer.runtime.object_store_host",
        *("--root", root, "--host", address, "--port", str(STORE_PORT)),
        *("--request-ms", repr(request_ms)),
    ]
    host = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert host.stdout is not None  # piped
        if not host.stdout.readline().startswith("listening"):
            raise UserError(f"the object store host did not start (exit code {host.wait()})")
        yield f"http://{address}:{STORE_PORT}"
    finally:
        host.terminate()
        try:
            host.wait(timeout=STORE_STOP_S)
        except subprocess.TimeoutExpired:
            host.kill()
            host.wait()
        shutil.rmtree(root, ignore_errors=True)


def run_all(children: list[subprocess.Popen], what: str) -> None:
    try:
        code = wait_all(children)
    finally:
        stop_all(children)
    if code:
        raise UserError(f"{what} failed with exit code {code} (its output is above)")


def sent_bytes(wan: EmulatedWAN | InProcessShaper, islands: int) -> list[int] | None:
    if not isinstance(wan, EmulatedWAN):
        return None
    return [wan.counters(i)["tx_bytes"] for i in range(islands)]


def train_scaled(
    scenario_path: Path,
    plan,
    out_dir: Path,
    kernel: bool | None,
    stem: str = VALIDATE_STEM,
    shaper: Shaper = Shaper(),
) -> Measured:
    """Train ``scenario_path`` (already scaled) under emulation; outputs go to ``out_dir``."""
    decoupled = kind_of(plan).has_syncer
    through_store = plan.scenario.network.gather == STORE
    links = links_from_workers(plan.workers)
    links += [syncer_link(plan)] if decoupled else [store_link(plan)] if through_store else []
    with open_wan(links, prefix=f"{stem}run", kernel=kernel, shaper=shaper) as wan:
        request_ms = plan.scenario.store.request_ms
        with store_host(wan, plan.islands, request_ms) if through_store else no_store() as address:
            before = sent_bytes(wan, plan.islands)
            store_before = store_counters(wan, plan.islands, address)
            argv = ["-m", "islands.cli", "train", str(scenario_path), "--out", str(out_dir)]
            children = start_ranks(
                wan,
                argv,
                plan.world_size,
                stdout=subprocess.DEVNULL,
                syncer=decoupled,
                object_store=address,
            )
            run_all(children, "the scaled training run")
            after = sent_bytes(wan, plan.islands)
            store_after = store_counters(wan, plan.islands, address)
        label = wan.label
    moved = (
        [a - b for a, b in zip(after, before)] if before is not None and after is not None else None
    )
    run = read_run(out_dir)
    return Measured(
        summary=run.summary,
        trace=run.trace,
        run_info=run.run_info,
        interface_bytes=moved,
        wan_label=label,
        weights_broadcast=SCHEDULES[run.run_info["algorithm"]].coupled,
        store_bytes=(
            {key: store_after[key] - store_before[key] for key in store_after}
            if store_before is not None and store_after is not None
            else None
        ),
    )


@contextmanager
def no_store() -> Iterator[None]:
    yield None


def store_counters(
    wan: EmulatedWAN | InProcessShaper, index: int, address: str | None
) -> dict[str, int] | None:
    """The store host's interface counters (None without a host)."""
    if address is None or not isinstance(wan, EmulatedWAN):
        return None
    return wan.counters(index)


def interface_bytes_per_worker(measured: Measured) -> float | None:
    """Mean bytes an island's interface sent, less the start-up broadcast of the fp32 weights.

    Whatever tree the broadcast uses, every island but the root receives the weights once over the
    shaped links, so the islands together send (M-1) * 4 * parameters bytes for it: (M-1)/M per island.
    Decoupled learners and the elastic trainer's islands broadcast nothing (each builds the model
    from the seed; an elastic joiner's download is in both the prediction and the trainer's count)."""
    if measured.interface_bytes is None:
        return None
    m = len(measured.interface_bytes)
    startup = (
        (m - 1) / m * FP32_BYTES * measured.run_info["parameters"]
        if measured.weights_broadcast
        else 0.0
    )
    return sum(measured.interface_bytes) / m - startup
