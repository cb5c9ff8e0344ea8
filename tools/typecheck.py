"""Type-check the package ``islands`` with mypy, laid out as it is installed.

pyproject.toml maps the repository's top folders to ``islands.<folder>`` (setuptools' package-dir:
``simulator/`` is ``islands.simulator``). mypy reads neither that mapping nor the editable install's
import hook, so this script lays the package out as installed, in build/typecheck/islands (links to
the folders), runs mypy there (settings in pyproject.toml's [tool.mypy]) and names every finding by
the repository's own path (``simulator/engine.py``, not ``islands/simulator/engine.py``).

    python tools/typecheck.py [MYPY_ARGUMENTS]     # `make lint` runs it
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREE = ROOT / "build" / "typecheck"
PACKAGE = "islands"


def mapped_folders() -> dict[str, str]:
    """The subpackages of ``islands`` that live in a top folder of their own: {name: folder}."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    package_dir = pyproject["tool"]["setuptools"]["package-dir"]
    folders = {}
    for package, folder in package_dir.items():
        parts = package.split(".")
        if parts[0] == PACKAGE and len(parts) == 2 and folder != f"{PACKAGE}/{parts[1]}":
            folders[parts[1]] = folder
    return folders


def lay_out(folders: dict[str, str]) -> None:
    """Build TREE/islands: a link to each entry of islands/ and to each mapped folder."""
    shutil.rmtree(TREE, ignore_errors=True)
    package = TREE / PACKAGE
    package.mkdir(parents=True)
    for entry in (ROOT / PACKAGE).iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for name, folder in folders.items():
        (package / name).symlink_to(ROOT / folder, target_is_directory=True)


def repository_path(line: str, folders: dict[str, str]) -> str:
    """A mypy line with the installed path ``islands/<name>/...`` given as the folder's own."""
    for name, folder in folders.items():
        prefix = f"{PACKAGE}/{name}/"
        if line.startswith(prefix):
            return folder + "/" + line[len(prefix) :]
    return line


def main(arguments: list[str]) -> int:
    folders = mapped_folders()
    lay_out(folders)
    command = [
        sys.executable,
        "-m",
        "mypy",
        "--config-file",
        str(ROOT / "pyproject.toml"),
        "--cache-dir",
        str(ROOT / ".mypy_cache"),
        "-p",
        PACKAGE,
        *arguments,
    ]
    done = subprocess.run(command, cwd=TREE, capture_output=True, text=True)
    for line in done.stdout.splitlines():
        print(repository_path(line, folders))
    sys.stderr.write(done.stderr)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
