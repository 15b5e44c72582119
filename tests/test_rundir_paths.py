"""The run directory names every file in it (core/rundir.py, ``RunDir``), and only there: no product module
composes a run-directory path by hand. Read from the code (every package but tests/ and bench/):

- no path is built from a run directory: ``<run dir> / ...`` where the left side is a ``RunDir``'s
  ``.path`` (``run.dir.path``, ``run_dir.path``, ``directory.path``) or a run directory held as a path (a
  name or attribute ``run_dir``, ``Path(run_dir)``);
- no string spells a name that only a run directory has (``"rollout_weights"``, ``"viewer.html"``): each is
  spelt once, in ``RunDir``;
- a default that points into the run directory (``"${run_dir}/..."``, in the code or in conf/) points at a
  path ``RunDir`` names.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from paths import CONF, REPO

from core.rundir import RunDir

# The product packages: every package of the repository but the tests and the benchmarks.
PACKAGES = sorted({p.parent.name for p in REPO.glob("*/__init__.py")} - {"tests", "bench"})
RUNDIR_MODULE = REPO / "core" / "rundir.py"
ROOT = Path("${run_dir}")  # a run directory as a config names it
# Names other directories have too (an export's README.md, eval compare's summary.json and report.md, Hydra's
# config.yaml, the OVI split "eval"), or words the summary uses as keys ("checkpoints"): on their own they
# say nothing of a run directory.
SHARED_NAMES = {
    "eval", "checkpoints", "final", "README.md", "report.md", "summary.json", "config.yaml", "run_id"
}  # fmt: skip
# What the code calls a run directory: run.dir is a RunDir, run_dir a RunDir or its path.
RUN_DIR_NAMES = {"run_dir", "dir", "directory"}


def named_paths() -> list[Path]:
    """Every path a ``RunDir`` property names, in the run directory ``${run_dir}``."""
    run_dir = RunDir(ROOT)
    return [getattr(run_dir, name) for name, value in vars(RunDir).items() if isinstance(value, property)]


def run_dir_only_names() -> set[str]:
    """The file and directory names that only a run directory has."""
    return {part for path in named_paths() for part in path.relative_to(ROOT).parts} - SHARED_NAMES


def product_modules(package: str) -> list[Path]:
    return [path for path in sorted((REPO / package).rglob("*.py")) if path != RUNDIR_MODULE]


def _name(node: ast.AST) -> str | None:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


def is_run_dir_path(node: ast.AST) -> bool:
    """Whether ``node`` is a run directory as a path: ``<RunDir>.path``, ``run_dir``, ``Path(run_dir)``."""
    if isinstance(node, ast.Call) and _name(node.func) == "Path" and node.args:
        return is_run_dir_path(node.args[0])
    if isinstance(node, ast.Attribute) and node.attr == "path":
        made = isinstance(node.value, ast.Call) and _name(node.value.func) == "RunDir"
        return made or _name(node.value) in RUN_DIR_NAMES
    return _name(node) == "run_dir"


def hand_made(source: str, where: str) -> list[str]:
    """Where a module's code (``source``, reported as ``where``) composes a run-directory path by hand, and
    how, in line order."""
    names, named = run_dir_only_names(), {str(p) for p in named_paths()}
    found = []
    for node in ast.walk(ast.parse(source, where)):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and is_run_dir_path(node.left):
            found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value in names:
                found.append((node.lineno, f"{node.value!r}, a run directory's name"))
            elif node.value.startswith(f"{ROOT}/") and node.value not in named:
                found.append((node.lineno, f"{node.value!r}, a path RunDir does not name"))
    return [f"{where}:{line}: {what}" for line, what in sorted(found)]


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_composes_a_run_directory_path_by_hand(package):
    found = [
        line
        for path in product_modules(package)
        for line in hand_made(path.read_text(), str(path.relative_to(REPO)))
    ]
    assert not found, "compose these with core.rundir.RunDir:\n" + "\n".join(found)


def test_the_configs_point_into_the_run_directory_only_at_named_paths():
    named = {str(p) for p in named_paths()}
    found = [
        f"{path.relative_to(REPO)}: {value}"
        for path in sorted(CONF.rglob("*.yaml"))
        for value in re.findall(r"\$\{run_dir\}/[^\s'\"}]+", path.read_text())
        if value not in named
    ]
    assert not found, "\n".join(found)


def test_the_rules_catch_a_path_built_by_hand():
    """The rules themselves, on a module that builds run-directory paths by hand, and one that does not."""
    source = (
        "def weights(run, run_dir, other):\n"
        "    a = run.dir.path / 'anything'\n"
        "    b = Path(run_dir) / NAME\n"
        "    c = other.parent / 'rollout_weights'\n"
        "    d = '${run_dir}/unnamed.json'\n"
        "    e = other.path / 'x' / 'report.md'\n"  # not a run directory's path, a name others have too
        "    f = '${run_dir}/eval/judge_cache.jsonl'\n"  # a path RunDir names
    )
    assert hand_made(source, "m.py") == [
        "m.py:2: run.dir.path / 'anything'",
        "m.py:3: Path(run_dir) / NAME",
        "m.py:4: 'rollout_weights', a run directory's name",
        "m.py:5: '${run_dir}/unnamed.json', a path RunDir does not name",
    ]
