"""``islands train FILE``: run the scenario's schedule for real (torch.distributed) and measure it.

Without torchrun's environment this starts one process per rank on this machine (gloo on CPU, NCCL
on CUDA); under torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set) it is one of the ranks.
Outputs go to --out: trace.csv (the simulator's trace schema), metrics.jsonl, summary.json (the keys
of ``islands simulate --json``), run.json and checkpoints/. A scenario with churn ([[event]] leave /
join, islands with present = false) runs elastic: the launcher kills and starts islands at the
events' times, the others train on, and churn.json records lost compute and join times. Decoupled
DiLoCo starts a syncer process too (under torchrun: start it yourself with ISLANDS_SYNCER=1 and
MASTER_ADDR:MASTER_PORT its own address), which writes the outputs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from islands.io import check_out_folder

from .common import add_scenario_arguments, path_text, read_source


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train", help="train the scenario for real and measure it", description=__doc__
    )
    add_scenario_arguments(parser)
    parser.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="keep only the first N workers (islands x replicas, in rank order: the islands by name)",
    )
    parser.add_argument(
        "--out",
        type=path_text,
        metavar="DIR",
        help="output folder (default: runs/<time>-<scenario>, or the --resume folder)",
    )
    parser.add_argument(
        "--data",
        type=path_text,
        metavar="PATH",
        help="train on your own text files (a file or a folder) "
        "instead of Python's standard-library sources",
    )
    parser.add_argument(
        "--resume",
        type=path_text,
        metavar="DIR",
        help="continue the run in DIR from its latest checkpoint",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="write into an --out folder that holds a run already, replacing that run's outputs",
    )
    parser.add_argument(
        "--stop-after",
        type=int,
        metavar="PERIODS",
        help="stop (with a checkpoint) once this many periods of inner_steps steps are done",
    )
    parser.set_defaults(handler=run)


def claims_out_dir(env, spec) -> bool:
    """Who checks that --out holds no other run: the local launcher, or under torchrun rank 0 at its
    start (before the rendezvous, so before any rank writes), but not a process that joins later."""
    if env is None:
        return True
    return env.rank == 0 and not spec.launched and spec.join_at_s is None


def check_outputs(args: argparse.Namespace, out_dir: Path) -> None:
    """Refuse, before the run: an output folder where nothing can be written, or whose files would
    overwrite (or --force remove) the scenario or the --data text."""
    from islands.errors import UserError
    from islands.io import refuse_shared_paths
    from islands.trainer.outputs import RUN_FILES

    flag = "--out" if args.out or not args.resume else "--resume"
    if flag == "--resume" and not out_dir.is_dir():
        raise UserError(f"--resume {out_dir}: no such run folder")
    refuse_shared_paths(
        {f"{flag}'s {name}": out_dir / name for name in RUN_FILES},
        {"the scenario": args.scenario, "--data": args.data},
    )
    check_out_folder(flag, out_dir)


def run(args: argparse.Namespace) -> int:
    from islands.trainer.core.checkpoint import PeerFailed

    try:
        return train(args)
    except PeerFailed:
        return 2  # another process refused its checkpoint and printed the one line


def train(args: argparse.Namespace) -> int:
    """Under torchrun: this process is one of the run's. Otherwise: the output folder checked against
    the command's files, then ``islands.trainer.train`` (the API) runs the plan on this machine."""
    from islands.errors import UserError
    from islands.trainer.core.faults import check_environment
    from islands.trainer.kinds import kind_of, make_run_plan
    from islands.trainer.launch import TrainOptions, check_resumable, default_out, run_process
    from islands.trainer.launch import train as train_plan
    from islands.trainer.outputs import claim_out_dir
    from islands.trainer.report import print_summary
    from islands.trainer.runtime.processes import distributed_env
    from islands.trainer.runtime.spec import launch_spec

    if args.stop_after is not None and args.stop_after < 1:
        raise UserError(f"--stop-after {args.stop_after}: must be >= 1")
    check_environment()
    scenario = read_source(args).scenario
    plan = make_run_plan(scenario, args.workers, args.data)
    resume = Path(args.resume) if args.resume else None
    check_resumable(plan, resume, args.stop_after)
    out_dir = Path(args.out) if args.out else resume
    env, spec = distributed_env(), launch_spec()
    if not kind_of(plan).runs_here(env, spec):
        out_dir = out_dir or default_out(scenario.name)
        check_outputs(args, out_dir)
        return train_plan(
            plan, TrainOptions(out_dir, resume, args.stop_after, args.force)
        ).exit_code
    if out_dir is not None and claims_out_dir(env, spec):
        check_outputs(args, out_dir)
        if out_dir != resume:
            claim_out_dir(out_dir, args.force)
    summary = run_process(plan, env, spec, out_dir, resume, args.stop_after)
    if summary is not None:
        print_summary(summary)
    return 0
