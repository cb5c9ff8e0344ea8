"""The folders show the parts: the simulator's analyses and the emulated WAN import no torch, only the
schedule registry spells a schedule's name, no folder holds more modules than a reader takes in, and an
analysis module's name means one thing in the whole codebase."""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def modules(folder: str) -> list[str]:
    """Every module of a top folder, its sub-packages' included, by installed name."""
    return sorted(
        m.name
        for m in pkgutil.walk_packages([str(ROOT / folder)], prefix=f"islands.{folder}.")
        if not m.name.endswith(".__main__")
    )


@pytest.mark.parametrize("folder", ["analysis", "emulation", "schedules"])
def test_folder_imports_no_torch(folder):
    names = modules(folder)
    assert len(names) >= 5  # the folder was found and listed
    script = (
        f"import importlib, sys\nfor name in {names!r}:\n    importlib.import_module(name)\n"
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


SKIPPED_FOLDERS = {"tests", "docs", "schedules", "build", "dist"}
MOST_NAME_LITERALS_OUTSIDE = (
    6  # what stays: checkpoint and store keys that old runs and the syncer share
)


def schedule_name_literals(files: list[Path]) -> list[str]:
    """Every string constant in ``files`` that is a registered schedule's name, as 'path:line: name'."""
    from islands.schedules import SCHEDULES

    found = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and node.value in SCHEDULES
            ):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value}")
    return found


def source_files() -> dict[str, list[Path]]:
    """The project's Python files by top folder (hidden and egg-info folders left out)."""
    folders: dict[str, list[Path]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT).parts
        if not any(part.startswith(".") or part.endswith(".egg-info") for part in parts):
            folders.setdefault(parts[0], []).append(path)
    return folders


def test_schedule_names_are_spelled_in_the_registry():
    folders = source_files()
    assert (
        len(schedule_name_literals(folders["schedules"])) >= 5
    )  # the count finds each declaration's name
    outside = schedule_name_literals(
        [
            path
            for folder, files in folders.items()
            if folder not in SKIPPED_FOLDERS
            for path in files
        ]
    )
    assert len(outside) <= MOST_NAME_LITERALS_OUTSIDE, "\n".join(outside)


MOST_MODULES_PER_FOLDER = 15  # torchtitan keeps at most 18 modules in a folder, torchft 20


def crowded_folders(top: Path) -> list[str]:
    """The folders under ``top`` (itself included) that hold more than the most modules, with their counts."""
    counts: dict[Path, int] = {}
    for path in top.rglob("*.py"):
        counts[path.parent] = counts.get(path.parent, 0) + 1
    return [
        f"{folder.relative_to(top.parent)}: {count}"
        for folder, count in sorted(counts.items())
        if count > MOST_MODULES_PER_FOLDER
    ]


@pytest.mark.parametrize("top", ["analysis", "simulator", "validation", "trainer"])
def test_no_folder_holds_more_than_fifteen_modules(top):
    assert crowded_folders(ROOT / top) == []


def test_a_crowded_folder_is_found(tmp_path):
    inner = tmp_path / "flat" / "inner"
    inner.mkdir(parents=True)
    for name in range(MOST_MODULES_PER_FOLDER + 1):
        (inner / f"m{name}.py").write_text("")
    (tmp_path / "flat" / "one.py").write_text("")  # a folder of one module is not crowded
    assert crowded_folders(tmp_path / "flat") == [f"flat/inner: {MOST_MODULES_PER_FOLDER + 1}"]


def shared_analysis_names(folders: dict[str, list[Path]]) -> list[str]:
    """Each file name that an analysis module shares with another module of the codebase, analysis or not,
    as 'name: every path that has it'. The commands in islands/commands/ are left out: each is
    named after its command, which an analysis module may mirror."""

    def named(paths: list[Path]) -> dict[str, list[str]]:
        names: dict[str, list[str]] = {}
        for path in paths:
            if path.stem not in ("__init__", "__main__"):
                names.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
        return names

    analysis = named(folders.get("analysis", []))
    rest = named(
        [
            path
            for folder, files in folders.items()
            if folder not in ("analysis", "tests")
            for path in files
            if path.parent != ROOT / "islands" / "commands"
        ]
    )
    return [
        f"{name}: {', '.join(paths + rest.get(name, []))}"
        for name, paths in sorted(analysis.items())
        if len(paths) > 1 or name in rest
    ]


def test_an_analysis_module_name_means_one_thing():
    folders = source_files()
    assert len(folders["analysis"]) >= 25  # the folder and its sub-folders were found
    assert shared_analysis_names(folders) == []


def test_a_shared_module_name_is_found():
    folders = {
        "analysis": [
            ROOT / "analysis" / "progress.py",
            ROOT / "analysis" / "a" / "plan.py",
            ROOT / "analysis" / "b" / "plan.py",
            ROOT / "analysis" / "demo.py",
        ],
        "simulator": [ROOT / "simulator" / "progress.py"],
        "islands": [ROOT / "islands" / "commands" / "demo.py"],
        "tests": [ROOT / "tests" / "demo.py"],
    }
    assert shared_analysis_names(folders) == [
        "plan.py: analysis/a/plan.py, analysis/b/plan.py",
        "progress.py: analysis/progress.py, simulator/progress.py",
    ]


PACKAGE_FOLDERS = (
    "islands",
    "scenarios",
    "schedules",
    "trainer",
    "analysis",
    "emulation",
    "validation",
)


def test_no_module_shares_a_name_with_a_simulator_module():
    """A name means one thing: outside the simulator a module is not named as one of the simulator's
    (``validation/churn.py`` beside ``simulator/churn.py`` read as the same churn). A command's module
    in ``islands/commands/`` is named for the command."""
    folders = source_files()
    simulator = {path.stem for path in folders["simulator"]} - {"__init__", "__main__"}
    assert {"churn", "links", "fleet", "syncer"} <= simulator  # the simulator's modules were found
    shared = {
        str(path.relative_to(ROOT))
        for folder in PACKAGE_FOLDERS
        for path in folders[folder]
        if path.stem in simulator and path.parent.name != "commands"
    }
    assert shared == set(), sorted(shared)


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every absolute import in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def test_no_test_file_imports_another_and_shared_fixtures_live_in_helpers():
    """What test files share is in tests/helpers/ (``from helpers.scenarios import make_scenario``): a
    test file imports neither another test file nor conftest.py, whose fixtures pytest hands over."""
    tests = ROOT / "tests"
    test_modules = {path.stem for path in tests.glob("test_*.py")} | {"conftest"}
    assert len(test_modules) > 50 and len(list((tests / "helpers").glob("*.py"))) >= 5
    imports = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path in sorted(tests.rglob("*.py"))
        for line, module in imported_modules(path)
        if module.split(".")[0] in test_modules
    ]
    assert imports == [], "\n".join(imports)
    loose = sorted(path.name for path in tests.glob("*.py") if not path.name.startswith("test_"))
    assert loose == ["conftest.py"], "a module test files share goes in tests/helpers/"
