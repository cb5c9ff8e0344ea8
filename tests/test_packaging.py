"""The installed layout: one ``islands`` namespace, bundled scenarios inside the wheel."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


SKIPPED = shutil.ignore_patterns(
    ".git", ".venv", "build", "runs", "out", "*.egg-info", "__pycache__"
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """Build from a copy of the sources, so setuptools' build/ folder never lands in the checkout."""
    source = tmp_path_factory.mktemp("source") / "islands"
    shutil.copytree(ROOT, source, ignore=SKIPPED)
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    (built,) = out.glob("islands-*.whl")
    return built


def test_wheel_maps_folders_under_one_namespace(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert "islands/simulator/events/engine.py" in names
    assert "islands/scenarios/library/worked-example.toml" in names
    assert "islands/__main__.py" in names and "islands/commands/list.py" in names
    assert "islands/emulation/wan.py" in names and "islands/emulation/__main__.py" in names
    assert (
        "islands/validation/case.py" in names and "islands/validation/cases/churn_m4.toml" in names
    )
    # islands serve's page, inlined from its files
    assert "islands/analysis/live/static/page.js" in names
    tops = {name.split("/")[0] for name in names if not name.startswith("islands-")}
    assert tops == {"islands"}  # no generic top-level `simulator` or `scenarios` package


def test_wheel_runs_the_simulator_from_the_archive(wheel, tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "islands.cli", "simulate", "worked-example", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={"PYTHONPATH": str(wheel), "PATH": "/usr/bin:/bin", "PYTHONNOUSERSITE": "1"},
    )
    assert done.returncode == 0, done.stderr
    assert '"compute_utilisation": 0.728155' in done.stdout
