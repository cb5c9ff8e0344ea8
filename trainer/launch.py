"""Starting a run: ``train(plan, options)``, the trainer's API, and one process of a run.

``train`` runs a plan on this machine: it checks what it can before any process starts (a resume's
checkpoints, the data, the output folder), writes the plan where the processes read it and starts one
process per rank (``launch_local``; and Decoupled DiLoCo's syncer), each ``python -m islands.trainer``
with a typed launch spec (``runtime/spec.py``). Under torchrun, ``islands train`` is itself one
process of a run (``run_process``). Rank r belongs to island r // R (R = ``trainer.ranks_per_island``):
under torchrun with ``--nproc-per-node=R`` each node is one island. Both ask the plan's run kind
(``kinds.kind_of``: fixed, elastic or decoupled) how.

Each island's processes can be wrapped: ``IslandLaunch`` gives a command prefix (e.g. ``ip netns exec
ns0``), extra environment (e.g. GLOO_SOCKET_IFNAME) and the WAN's pacer, and ``master_addr`` may be
an address other than 127.0.0.1, which is what network emulation needs.
"""

from __future__ import annotations

import pickle
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from islands.errors import UserError
from islands.io import check_out_folder, refuse_shared_paths, safe_name

from .config import RunPlan
from .kinds import kind_of
from .runtime.processes import DistEnv, IslandLaunch, LocalLaunch, RankRun, free_port, uses_cuda
from .runtime.spec import LaunchSpec

RUNS_FOLDER = "runs"
PLAN_FILE = "plan.pickle"


@dataclass(frozen=True)
class TrainOptions:
    """How ``train`` runs a plan: ``out_dir`` (None: ``resume_dir``, else runs/<time>-<scenario>),
    ``resume_dir`` (continue the run there from its latest checkpoint), ``stop_after`` (periods of H
    inner steps, then a checkpoint) and ``force`` (replace a run already in ``out_dir``)."""

    out_dir: Path | None = None
    resume_dir: Path | None = None
    stop_after: int | None = None
    force: bool = False


@dataclass(frozen=True)
class Trained:
    """A local run's end: the first failing exit code (0: every process finished), its folder and
    (when it finished) its ``summary.json``."""

    exit_code: int
    out_dir: Path
    summary: dict[str, Any] | None


def default_out(scenario_name: str) -> Path:
    return Path(RUNS_FOLDER) / f"{time.strftime('%Y%m%d-%H%M%S')}-{safe_name(scenario_name)}"


def train(plan: RunPlan, options: TrainOptions = TrainOptions()) -> Trained:
    """Run ``plan`` on this machine, one process per rank; every refusal (one line, ``UserError``)
    comes before any process starts."""
    from .core.tracing import read_output

    out_dir = check_run(plan, options)
    print(
        f"islands train: {plan.islands} islands x {plan.ranks_per_island} ranks, {plan.algorithm}, "
        f"{plan.total_steps} inner steps; writing {out_dir}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="islands-run-") as folder:
        plan_file = Path(folder) / PLAN_FILE
        plan_file.write_bytes(pickle.dumps(plan))
        run = LaunchSpec(
            plan_file=str(plan_file),
            out_dir=str(out_dir),
            stop_after=options.stop_after,
            resume_dir=str(options.resume_dir) if options.resume_dir else None,
        )
        code = launch_local(plan, run)
    summary = (
        read_output(out_dir, "summary")
        if code == 0 and (out_dir / "summary.json").is_file()
        else None
    )
    return Trained(code, out_dir, summary)


def check_run(plan: RunPlan, options: TrainOptions) -> Path:
    """Refuse what would fail later, in one line: a resume or a stop the kind cannot do, an output folder
    where nothing can be written or whose files would overwrite the data, a folder that holds another
    run, data without text, checkpoints that do not fit; returns the output folder."""
    from .core import checkpoint
    from .core.loop import default_corpus, model_config, shapes_of
    from .core.model import build_model
    from .outputs import RUN_FILES, claim_out_dir

    resume = options.resume_dir
    check_resumable(plan, resume, options.stop_after)
    if resume is not None and not resume.is_dir():
        raise UserError(f"--resume {resume}: no such run folder")
    out_dir = options.out_dir or resume or default_out(plan.scenario.name)
    flag = "--resume" if out_dir == resume else "--out"
    refuse_shared_paths(
        {f"{flag}'s {name}": out_dir / name for name in RUN_FILES},
        {"--data": plan.data_path or None},
    )
    check_out_folder(flag, out_dir)
    if out_dir != resume:
        claim_out_dir(out_dir, options.force)
    default_corpus(plan)  # a data path without text fails here, before any process starts
    if resume:
        shapes = shapes_of(build_model(model_config(plan), plan.spec.seed, "cpu"))
        checkpoint.verify_all(resume, plan.world_size, plan.fingerprint(), shapes)
    return out_dir


def check_resumable(plan: RunPlan, resume_dir: Path | None, stop_after: int | None) -> None:
    """A stop after at least one period, and a resume or a stop only where the kind keeps its state in
    the ranks' checkpoints."""
    if stop_after is not None and stop_after < 1:
        raise UserError(f"--stop-after {stop_after}: must be >= 1")
    if not kind_of(plan).resumes and (resume_dir or stop_after is not None):
        raise UserError(
            f'{plan.scenario.source}: schedule.algorithm = "{plan.algorithm}": its state lives in the '
            "syncer and in each learner's own pace, so --resume and --stop-after are not supported"
        )


def launch_local(
    plan: RunPlan,
    run: LaunchSpec,
    master_addr: str = "127.0.0.1",
    island_launch: Callable[[int], IslandLaunch] | None = None,
    port: int | None = None,
    syncer_launch: IslandLaunch = IslandLaunch(),
) -> int:
    """Start every process of ``plan`` on this machine, each with the ``run``'s launch spec, and wait;
    returns the first failing exit code or 0. ``port`` is the rendezvous port; by default a free one
    on ``master_addr``, which must then be an address of this host's namespace (pass ``port`` for one
    that exists only inside island 0's). ``island_launch(island)`` wraps an island's processes,
    ``syncer_launch`` a Decoupled DiLoCo syncer's (which hosts the store at ``master_addr``)."""
    port = port or free_port(master_addr)
    uses_cuda(plan.spec.device, plan.ranks_per_island)  # one line before any process starts
    return kind_of(plan).launch(
        LocalLaunch(run, plan, master_addr, port, island_launch, syncer_launch)
    )


def run_process(
    plan: RunPlan,
    env: DistEnv | None,
    spec: LaunchSpec,
    out_dir: Path | None,
    resume_dir: Path | None,
    stop_after: int | None,
) -> dict | None:
    """One process's whole life (a rank, or the syncer, as its launch ``spec`` says): train, write the
    outputs (the process that reports), leave; returns the summary on the process that wrote it."""
    return kind_of(plan).run_rank(
        RankRun(
            plan,
            env,
            spec,
            out_dir,
            resume_dir,
            stop_after,
            lambda: default_out(plan.scenario.name),
        )
    )


def launched_process(spec: LaunchSpec, env: DistEnv | None) -> dict | None:
    """A process a local launcher started (``python -m islands.trainer``): the plan and the run as its
    spec says."""
    assert spec.plan_file is not None, "__main__ refuses a spec without a plan file"
    plan = pickle.loads(Path(spec.plan_file).read_bytes())

    def as_path(text: str | None) -> Path | None:
        return Path(text) if text else None

    return run_process(
        plan, env, spec, as_path(spec.out_dir), as_path(spec.resume_dir), spec.stop_after
    )
