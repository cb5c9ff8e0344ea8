"""Atomic file output: write to a temporary file beside the target, fsync, then rename over it.

A crash or Ctrl+C mid-write leaves the previous file intact, never a truncated one.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Iterator

from .errors import UserError


@contextlib.contextmanager
def atomic_path(target: str | Path) -> Iterator[Path]:
    """Yield a temporary path to write; on success it is fsynced and renamed onto ``target``."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp" + target.suffix, dir=target.parent)
    os.fchmod(handle, 0o666 & ~current_umask())  # mkstemp makes 0600; a shared report should not be
    os.close(handle)
    temporary = Path(name)
    try:
        yield temporary
        with open(temporary, "rb+") as written:
            os.fsync(written.fileno())
        os.replace(temporary, target)
        directory = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
    finally:
        temporary.unlink(missing_ok=True)


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text(target: str | Path, text: str) -> None:
    with atomic_path(target) as temporary:
        temporary.write_text(text, encoding="utf-8")


def write_table(frame, target: str | Path) -> None:
    """Write a DataFrame as Parquet (``.parquet``) or CSV (anything else), atomically."""
    target = Path(target)
    with atomic_path(target) as temporary:
        if target.suffix == ".parquet":
            try:
                frame.to_parquet(temporary, index=False)
            except ImportError as exc:
                raise UserError(f"{target}: writing Parquet needs pyarrow ({exc}); use a .csv name") from None
        else:
            frame.to_csv(temporary, index=False)
