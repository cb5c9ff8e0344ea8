"""Checkpoints of the outer state, one file per rank, that a crash can never half-write.

Layout: ``OUT/checkpoints/period-000010/rank-0003.pt`` and ``OUT/checkpoints/LATEST`` naming the
newest complete folder. Each rank writes its file atomically (temp file, fsync, rename:
``islands.io.atomic_path``); only after every rank has written does ``LATEST`` move (atomically too),
and only then are older folders removed: the last good checkpoint is never overwritten.

Before a file is used it is verified: every record's zip CRC (``torch.save`` writes a zip whose
records carry CRC-32s that ``torch.load`` never checks, so a flipped bit would load silently), then
the format, world size, model shapes and scenario fingerprint.

A rank's file holds what that rank needs to continue bit for bit: the fragments' fp32 global weights
and outer-optimizer state, the local model and inner-optimizer state (an island's own), the step
counters, the data sampler's generator state, torch's RNG state and the trace rows so far. It is
read with ``torch.load(weights_only=True)``: tensors and plain containers only.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import Any

import torch

from islands.errors import UserError
from islands.io import atomic_path, write_text

from ..exchange.group import Group
from .faults import kill_point

FORMAT = 1


class PeerFailed(Exception):
    """Another process refused its checkpoint and said why; this one stops too, quietly (exit 2)."""


FOLDER = "checkpoints"
LATEST = "LATEST"


def cuda_rng_state() -> list[torch.Tensor] | None:
    """Every GPU's RNG state where CUDA is available (dropout or sampling on the GPU resumes
    bit-for-bit), else None."""
    return torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None


def restore_rng(state: dict[str, Any]) -> None:
    """The CPU RNG, and the GPUs' where the checkpoint holds them and CUDA is available."""
    torch.set_rng_state(state["torch_rng"])
    cuda = state.get("cuda_rng")
    if cuda is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)


def period_dir(out_dir: Path, period: int) -> Path:
    return out_dir / FOLDER / f"period-{period:06d}"


def rank_file(folder: Path, rank: int) -> Path:
    return folder / f"rank-{rank:04d}.pt"


def save(
    out_dir: Path,
    period: int,
    rank: int,
    island: int,
    state: dict[str, Any],
    world: Group,
    writes_latest: bool,
) -> None:
    """Write this rank's file; once all have, point ``LATEST`` at the folder and drop older ones."""
    folder = period_dir(out_dir, period)
    write_rank_file(folder, rank, island, state)
    world.barrier()
    if writes_latest:
        write_text(out_dir / FOLDER / LATEST, folder.name + "\n")
    world.barrier()
    remove_older(out_dir / FOLDER, folder.name, rank)


def write_rank_file(folder: Path, rank: int, island: int, state: dict[str, Any]) -> None:
    """Rank ``rank``'s file (``island``: its island, for the ``checkpoint-write`` kill point)."""
    with atomic_path(rank_file(folder, rank)) as temporary:
        torch.save({"format": FORMAT, **state}, temporary)
        kill_point("checkpoint-write", island)


def remove_older(root: Path, keep: str, rank: int) -> None:
    for folder in root.glob("period-*"):
        if folder.name < keep:
            rank_file(folder, rank).unlink(missing_ok=True)
            try:
                os.rmdir(folder)
            except OSError:
                pass


def latest_dir(run_dir: Path) -> Path:
    pointer = run_dir / FOLDER / LATEST
    if not pointer.is_file():
        raise UserError(f"{run_dir}: no checkpoint to resume from ({pointer} is missing)")
    try:
        name = pointer.read_text(encoding="utf-8").strip()
    except (UnicodeDecodeError, OSError) as exc:
        raise UserError(
            f"{pointer}: cannot be read ({reason_of(exc)}); it should name a period-NNNNNN "
            f"folder beside it"
        ) from None
    folder = run_dir / FOLDER / name
    if not name.startswith("period-") or "/" in name or not folder.is_dir():
        raise UserError(f"{pointer}: names {folder.name}, which does not exist")
    return folder


def verify_all(
    run_dir: Path, world_size: int, fingerprint: str, shapes: dict[str, tuple[int, ...]]
) -> None:
    """Every rank's file of the latest checkpoint, verified as ``load`` does, before any process starts
    (an elastic run's checkpoint may lack the islands that were away; it needs one file at least)."""
    folder = latest_dir(run_dir)
    files = sorted(folder.glob("rank-*.pt"))
    if not files:
        raise UserError(f"{folder}: holds no rank-NNNN.pt file to resume from")
    for path in files:
        rank = path.stem.split("-")[1]
        if not rank.isdigit():
            raise UserError(f"{path}: not a checkpoint file name of this project (rank-NNNN.pt)")
        load(run_dir, int(rank), world_size, fingerprint, shapes)


def load(
    run_dir: Path, rank: int, world_size: int, fingerprint: str, shapes: dict[str, tuple[int, ...]]
) -> dict[str, Any]:
    """This rank's state from the latest checkpoint, checked against the run it continues (``shapes``:
    the model's parameter shapes by name)."""
    path = rank_file(latest_dir(run_dir), rank)
    if not path.is_file():
        raise UserError(
            f"{path}: missing; the checkpoint was written by a run of a different world size "
            f"than this one ({world_size} processes)"
        )
    verify_crc(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (
        Exception
    ) as exc:  # torch raises many types for a damaged file; all mean the same to a user
        raise UserError(f"{path}: cannot be read as a checkpoint ({reason_of(exc)})") from None
    check(state, path, world_size, fingerprint, shapes)
    return state


def reason_of(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def verify_crc(path: Path) -> None:
    """Refuse a file whose zip structure or any record's CRC-32 is damaged (a flipped bit anywhere)."""
    try:
        with zipfile.ZipFile(path) as archive:
            damaged = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        raise UserError(f"{path}: damaged, not a readable checkpoint ({reason_of(exc)})") from None
    if damaged is not None:
        raise UserError(
            f"{path}: damaged: record {damaged} fails its CRC-32 check; resume from an "
            f"intact copy or an earlier run"
        )


def check(
    state: Any, path: Path, world_size: int, fingerprint: str, shapes: dict[str, tuple[int, ...]]
) -> None:
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise UserError(f"{path}: not an islands checkpoint of format {FORMAT}")
    check_shapes(state["model"], path, shapes)
    if state["world_size"] != world_size:
        raise UserError(
            f"{path}: written by {state['world_size']} processes, this run has {world_size} "
            f"(islands x trainer.ranks_per_island must match)"
        )
    if state["fingerprint"] != fingerprint:
        raise UserError(
            f"{path}: written for a different scenario, --set, --workers or --data; "
            f"resume with the command that started the run"
        )


def check_shapes(
    saved: dict[str, torch.Tensor], path: Path, shapes: dict[str, tuple[int, ...]]
) -> None:
    """Refuse a checkpoint of another model shape, naming the first tensor that differs."""
    for name in sorted(set(saved) | set(shapes)):
        have = tuple(saved[name].shape) if name in saved else None
        if have != shapes.get(name):
            raise UserError(
                f"{path}: a model of another shape ({name}: checkpoint {have}, this run "
                f"{shapes.get(name)}); check trainer.n_layer, n_head, n_embd and block_size"
            )
