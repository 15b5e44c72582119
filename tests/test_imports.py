"""The packages' import rules (README "Architecture"), read from every import statement of the code, the
ones inside functions included:

- core is the ground floor (the sample shape, media and decoding, files, errors, text models, the vocabulary,
  the run config and directory, rank helpers, metric logging): it imports no other package of the project;
- data_builders (the builders) imports core only;
- models (loading, the chat adapter, towers) imports core and data_builders;
- eval imports data_builders, core and models, never train;
- train reaches eval through its public entries only: eval.evaluation, eval.run_models, eval.benchmarks,
  eval.judging, eval.served and eval.server_process;
- launch composes commands: it imports core only (the config schema, file helpers), never torch;
- no module imports a private name (``_name``) from another package.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from paths import REPO

PACKAGES = ("core", "data_builders", "models", "eval", "train", "launch", "demo")
# package -> the project packages it may import (its own is always allowed).
MAY_IMPORT = {
    "core": set(),
    "data_builders": {"core"},
    "models": {"data_builders", "core"},
    "eval": {"data_builders", "core", "models"},
    "train": {"data_builders", "core", "models", "eval"},
    "launch": {"core"},
    "demo": {"data_builders", "core", "models", "eval"},  # the live demo: a model as `python -m eval` has it
}
# Where a package may reach into another only through given modules.
# train: the evaluation, the run's models (assembled once for training and evaluation alike), the benchmark
# registry (whose settings dataclasses type the config), the judge (GRPO's judge reward is the
# evaluation's judge) and the served model with its launcher (GRPO's served rollouts ask a server what
# served evaluation asks it).
ONLY_THROUGH = {
    ("train", "eval"): {
        "eval.evaluation", "eval.run_models", "eval.benchmarks", "eval.judging", "eval.served",
        "eval.server_process",
    }
}  # fmt: skip


def imports(package: str) -> list[tuple[Path, int, str, list[str]]]:
    """``(file, line, module, names)`` of every import in the package (``from m import a, b``: names)."""
    found = []
    for path in sorted((REPO / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found += [(path, node.lineno, alias.name, []) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.append((path, node.lineno, node.module, [alias.name for alias in node.names]))
    return found


def _where(path: Path, line: int) -> str:
    return f"{path.relative_to(REPO)}:{line}"


@pytest.mark.parametrize("package", PACKAGES)
def test_each_package_imports_only_what_its_floor_allows(package):
    wrong = []
    for path, line, module, _ in imports(package):
        target = module.split(".")[0]
        if target in PACKAGES and target != package and target not in MAY_IMPORT[package]:
            wrong.append(f"{_where(path, line)} imports {module}")
        allowed = ONLY_THROUGH.get((package, target))
        if allowed and module not in allowed:
            wrong.append(
                f"{_where(path, line)} imports {module}; {package} reaches {target} only via {allowed}"
            )
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("package", PACKAGES)
def test_no_package_imports_a_private_name_of_another(package):
    wrong = [
        f"{_where(path, line)} imports {name} from {module}"
        for path, line, module, names in imports(package)
        if module.split(".")[0] in PACKAGES and module.split(".")[0] != package
        for name in names
        if name.startswith("_")
    ]
    assert not wrong, "\n".join(wrong)


def test_launch_never_imports_torch_or_transformers():
    wrong = [
        f"{_where(path, line)} imports {module}"
        for path, line, module, _ in imports("launch")
        if module.split(".")[0] in ("torch", "transformers", "deepspeed")
    ]
    assert not wrong, "\n".join(wrong)


def test_the_rules_see_every_package():
    """A new top-level package must be given a floor here before it can be imported by the others."""
    found = {p.parent.name for p in REPO.glob("*/__init__.py") if p.parent.name not in ("tests", "bench")}
    assert found == set(PACKAGES)


def _assigned_attributes(package: str) -> list[tuple[Path, int, str]]:
    """``(file, line, 'cfg.a.b')`` of every assignment into an attribute of a name called cfg, config or
    run, the ones inside functions included."""
    found = []
    for path in sorted((REPO / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = node.targets if isinstance(node, ast.Assign) else []
            if isinstance(node, ast.AugAssign | ast.AnnAssign):
                targets = [node.target]
            for target in (t for tgt in targets for t in getattr(tgt, "elts", [tgt])):
                chain = []
                while isinstance(target, ast.Attribute):
                    chain.append(target.attr)
                    target = target.value
                if chain and isinstance(target, ast.Name) and target.id in ("cfg", "config", "run"):
                    found.append((path, node.lineno, ".".join([target.id, *reversed(chain)])))
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_rewrites_a_config_in_place(package):
    """A run is resolved once (``resolve(cfg) -> Run`` per entry point, returning new configs); nothing
    assigns into a config afterwards, so every function sees the config its entry point resolved."""
    wrong = [f"{_where(path, line)} assigns {target}" for path, line, target in _assigned_attributes(package)]
    assert not wrong, "\n".join(wrong)
