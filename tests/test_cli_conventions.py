"""What a command-line tool is expected to have: --version, python -m, a list of what it ships,
progress in logs, and a wrapper that runs it from a fresh shell."""

from __future__ import annotations

import io
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from islands.analysis.progress_bar import ProgressBar
from islands.cli import main
from islands.scenarios import bundled_names

ROOT = Path(__file__).resolve().parents[1]


def test_version_is_the_package_metadata(capsys):
    try:
        main(["--version"])
    except SystemExit as done:
        assert done.code == 0
    assert capsys.readouterr().out.strip() == f"islands {metadata.version('islands')}"


def test_python_dash_m_islands_is_the_command():
    done = subprocess.run(
        [sys.executable, "-m", "islands", "--version"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stdout.startswith("islands ")


def test_list_shows_every_bundled_scenario_with_the_description_in_its_file(capsys):
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for name in bundled_names():
        document = tomllib.loads((ROOT / "scenarios" / "library" / f"{name}.toml").read_text())
        assert any(line.split(None, 1) == [name, document["description"]] for line in lines), name


def test_progress_in_a_log_is_a_few_plain_lines_with_the_count():
    log = io.StringIO()
    bar = ProgressBar("sweep", stream=log, interactive=False)
    for done in range(0, 40001, 100):
        bar(done, 40000)
    bar.close()
    lines = log.getvalue().splitlines()
    assert lines[0].startswith("sweep: 0 of 40000 done")
    assert [line.split(" of ")[0] for line in lines] == [f"sweep: {4000 * i}" for i in range(11)]


def test_progress_on_a_terminal_redraws_one_line():
    screen = io.StringIO()
    bar = ProgressBar("plan", stream=screen, interactive=True)
    bar(1, 2)
    bar(2, 2)
    bar.close()
    drawn = screen.getvalue()
    assert drawn.count("\r") == 2 and drawn.endswith("\n") and "\n" not in drawn[:-1]
    assert f"plan [{'#' * 15}{'.' * 15}] 1/2" in drawn and f"plan [{'#' * 30}] 2/2" in drawn


def test_make_leaves_a_wrapper_that_runs_from_any_folder(tmp_path):
    makefile = (ROOT / "Makefile").read_text()
    assert (
        "WRAPPER := bin/islands" in makefile
        and "/bin/" in (ROOT / ".gitignore").read_text().split()
    )
    wrapper = ROOT / "bin" / "islands"
    if not wrapper.exists():
        subprocess.run(
            ["make", "-C", str(ROOT), "bin/islands"], check=True, capture_output=True, timeout=600
        )
    done = subprocess.run(
        [str(wrapper), "--version"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0 and done.stdout.startswith("islands ")
