"""The folders show the parts: the simulator's analyses and the emulated WAN import no torch."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def modules(folder: str) -> list[str]:
    return sorted(f"islands.{folder}.{m.name}" for m in pkgutil.iter_modules([str(ROOT / folder)])
                  if m.name != "__main__")


@pytest.mark.parametrize("folder", ["analysis", "emulation", "schedules"])
def test_folder_imports_no_torch(folder):
    names = modules(folder)
    assert len(names) >= 5  # the folder was found and listed
    script = (f"import importlib, sys\nfor name in {names!r}:\n    importlib.import_module(name)\n"
              "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
