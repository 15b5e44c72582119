"""The tests themselves: no test module imports another one. Tests share helpers through helper modules
(tests/ modules not named ``test_*``, importable by pytest's ``pythonpath``), never through a test file."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _imported_modules(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, module) of every import in ``tree``: ``import a.b`` and ``from a.b import c`` give ``a.b``,
    ``from . import c`` gives ``c``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.module:
                found.append((node.lineno, node.module))
            if node.level or not node.module:  # relative: the names may be modules of tests/
                found += [(node.lineno, alias.name) for alias in node.names]
    return found


def test_no_test_module_imports_another():
    offending = [
        f"{path.name}:{line}: imports {module}"
        for path in sorted(TESTS.glob("test_*.py"))
        for line, module in _imported_modules(ast.parse(path.read_text(), filename=str(path)))
        if module.rsplit(".", 1)[-1].startswith("test_")
    ]
    assert offending == [], "move what they share into a helper module (not named test_*):\n" + "\n".join(
        offending
    )
