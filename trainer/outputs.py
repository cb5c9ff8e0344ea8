"""A run's output folder: what a run writes there, and never over another run by accident.

``islands train --out DIR`` refuses a folder that holds a run already (its summary, trace, metrics or
checkpoints): continuing that run is ``--resume DIR``; replacing it is ``--force``, which removes that
run's outputs (only the files and folders a run writes; anything else in DIR is left alone) so that
nothing of the old run (a ``LATEST`` pointer, a metrics line) mixes into the new one.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from islands.errors import UserError

from .core.checkpoint import FOLDER as CHECKPOINTS
from .core.tracing import TRACE_FILE
from .elastic.rows import ROWS_FOLDER

RUN_FILES = ("summary.json", "run.json", "churn.json", TRACE_FILE, "metrics.jsonl")
RUN_FOLDERS = (CHECKPOINTS, ROWS_FOLDER)


def run_outputs(out_dir: Path) -> list[Path]:
    """The outputs of an earlier run in ``out_dir``, in a fixed order."""
    return [out_dir / name for name in (*RUN_FILES, *RUN_FOLDERS) if (out_dir / name).exists()]


def claim_out_dir(out_dir: Path, force: bool) -> None:
    """Make sure a new run may write into ``out_dir`` (see the module's docstring)."""
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"--out {out_dir}: is a file, not a folder")
    found = run_outputs(out_dir) if out_dir.is_dir() else []
    if not found:
        return
    if not force:
        names = ", ".join(path.name for path in found)
        raise UserError(
            f"--out {out_dir}: holds a run already ({names}); continue it with --resume {out_dir}, "
            f"or pass --force to replace it"
        )
    for path in found:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
