"""The packages' import rules (README "Architecture"), read from every import statement of the code, the
ones inside functions included:

- core is the ground floor (the sample shape, media and decoding, files, errors, text models, the vocabulary,
  the benchmarks' release formats, preference pairs, the run config and directory, rank helpers, metric
  logging): it imports no other package of the project;
- data_builders (the builders) imports core only, and the packages above reach into it only at the sites
  listed in INTO_BUILDERS, where a builder is called or its phrase banks are read;
- models (loading, the chat adapter, towers, a model behind a server) imports core only: it stands beside
  data_builders, not on it;
- eval imports data_builders, core and models, never train;
- train reaches eval through its public entries only: eval.evaluation, eval.run_models, eval.benchmarks
  (with the OVI benchmark's item predicate, eval.benchmarks.ovi), eval.judging and eval.summary_schema;
  serving stands below both, in models;
- launch composes commands: it imports core only (the config schema, file helpers), never torch;
- no module imports a private name (``_name``) from another package;
- no package holds an import circle: no module imports, however indirectly, a module of its own
  package that imports it back.
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
    "models": {"core"},
    "eval": {"data_builders", "core", "models"},
    "train": {"data_builders", "core", "models", "eval"},
    "launch": {"core"},
    "demo": {"data_builders", "core", "models", "eval"},  # the live demo: a model as `python -m eval` has it
}
# Where a package may reach into another only through given modules.
# train: the evaluation, the run's models (assembled once for training and evaluation alike), the benchmark
# registry (whose settings dataclasses type the config) and the OVI benchmark's "open item" (GRPO rolls
# out and rewards the items the benchmark judges), the judge (GRPO's judge reward is the evaluation's
# judge) and the summary's JSON form (the model card reads summary.json). A served model and its launcher
# are no longer here: they stand in models, below both.
ONLY_THROUGH = {
    ("train", "eval"): {
        "eval.evaluation", "eval.run_models", "eval.benchmarks", "eval.benchmarks.ovi", "eval.judging",
        "eval.summary_schema",
    }
}  # fmt: skip
# Every import into data_builders from another package: file -> the builder modules it may import. Only where
# a builder is called or its banks read; a format or a type that readers share belongs in core instead.
INTO_BUILDERS = {
    "eval/run.py": {"data_builders.build"},  # the synthetic twins, built when asked (data=synthetic)
    "eval/benchmarks/ovi_pairs.py": {"data_builders.preferences"},  # held-out pairs made from OVIBench
    "eval/benchmarks/diagnostics/text_prompts.py": {"data_builders.vp_variants"},  # the target in words
    "train/recipe.py": {"data_builders.build"},  # the synthetic training data, built by default
    "train/plan.py": {"data_builders.build"},  # the synthetic build found on disk, never built
    "train/preference.py": {"data_builders.preferences"},  # DPO's and KTO's pairs made from OVI-Train
    "train/rewards/ovi.py": {"data_builders.phrasings"},  # the banks' acknowledgements and stock options
    "demo/video.py": {"data_builders.visual_prompts"},  # the user's drawing, drawn as the builders draw
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


def test_packages_reach_into_data_builders_only_where_a_builder_is_called():
    sites = {
        (str(path.relative_to(REPO)), module)
        for package in PACKAGES
        if package != "data_builders"
        for path, _, module, _ in imports(package)
        if module.split(".")[0] == "data_builders"
    }
    allowed = {(path, module) for path, modules in INTO_BUILDERS.items() for module in modules}
    assert not sites - allowed, f"imports into data_builders not in INTO_BUILDERS: {sorted(sites - allowed)}"
    assert not allowed - sites, f"INTO_BUILDERS lists sites no longer there: {sorted(allowed - sites)}"


def test_the_release_formats_stand_on_the_ground_floor():
    """The benchmarks' formats are read by every floor above core, so they import core and nothing else."""
    formats = [found for found in imports("core") if found[0].is_relative_to(REPO / "core" / "formats")]
    assert formats, "core/formats/ imports nothing: moved?"
    wrong = [
        f"{_where(path, line)} imports {module}"
        for path, line, module, _ in formats
        if module.split(".")[0] in PACKAGES and module.split(".")[0] != "core"
    ]
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


def _modules(package: str) -> dict[str, Path]:
    """Each module of the package by its dotted name (a package's ``__init__.py`` by the package's)."""
    found = {}
    for path in sorted((REPO / package).rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imported(node: ast.AST, name: str, path: Path, known: dict[str, Path]) -> list[str]:
    """The modules an import statement of module ``name`` (at ``path``) names: ``from a.b import c`` names
    the module ``a.b.c`` where there is one, else ``a.b``; relative imports resolved."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        base = ".".join([*here[: len(here) - node.level + 1], *([base] if base else [])])
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]


def import_graph(package: str) -> dict[str, dict[str, int]]:
    """Module -> the modules of its own package it imports, each with the line of its first import there
    (imports inside functions and under ``TYPE_CHECKING`` included)."""
    known = _modules(package)
    graph: dict[str, dict[str, int]] = {}
    for name, path in known.items():
        graph[name] = {}
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for target in _imported(node, name, path, known):
                if target in known and target != name:
                    graph[name].setdefault(target, node.lineno)
    return graph


def circles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The import circles: groups of modules each of which imports every other one, however indirectly."""
    reached = {}
    for start in graph:
        seen, todo = set(), [start]
        while todo:
            for target in graph[todo.pop()]:
                if target not in seen:
                    seen.add(target)
                    todo.append(target)
        reached[start] = seen
    groups = {
        frozenset(m for m in reached[start] if start in reached[m])
        for start in graph
        if start in reached[start]
    }
    return sorted(sorted(group) for group in groups)


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_circle_inside_any_package(package):
    """A circle makes its modules one: none can be read, tested or moved without the others (and the order
    they are first imported in decides whether a name is there yet)."""
    graph = import_graph(package)
    found = [
        "circle: "
        + ", ".join(
            f"{module} imports {target} ({_where(_modules(package)[module], line)})"
            for module in group
            for target, line in graph[module].items()
            if target in group
        )
        for group in circles(graph)
    ]
    assert not found, "\n".join(found)


def test_the_circle_finder_sees_a_circle_through_a_function_level_import():
    """The finder itself: a circle closed by an import inside a function is still a circle."""
    graph = {"p.a": {"p.b": 1}, "p.b": {"p.c": 1}, "p.c": {"p.a": 9}, "p.d": {"p.a": 1}}
    assert circles(graph) == [["p.a", "p.b", "p.c"]]
    assert circles({"p.a": {"p.b": 1}, "p.b": {}}) == []


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
