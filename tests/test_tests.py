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


def test_a_process_held_for_a_test_is_held_outside_its_file_locks(tmp_path):
    """The watcher's test holds the training with SIGSTOP; stopped inside the metrics file's lock it would
    block the watcher's next append for good. A child that holds a shared store's lock 95% of the time is
    held outside it, and an append here goes through (a plain SIGSTOP leaves it waiting nearly always)."""
    import subprocess
    import sys
    import threading
    import time

    from processes import holds_file_lock, stop_outside_locks

    from core.files import JsonlStore

    path = tmp_path / "metrics.jsonl"
    script = (
        f"import time\nfrom filelock import FileLock\nlock = FileLock({str(path) + '.lock'!r})\n"
        "while True:\n    with lock:\n        time.sleep(0.2)\n    time.sleep(0.01)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 30
        while not holds_file_lock(holder.pid):
            assert time.monotonic() < deadline, "the child never took its lock"
            time.sleep(0.01)
        stop_outside_locks(holder.pid)
        assert not holds_file_lock(holder.pid)
        append = threading.Thread(target=JsonlStore(path, shared=True).append, args=([{"step": 1}],))
        append.start()
        append.join(timeout=20)
        assert not append.is_alive(), "the append waits on the lock of the stopped process"
    finally:
        holder.kill()
        holder.wait()
