"""File helpers every package shares: atomic writes, the append-only JSONL store, JSON/JSONL reading,
linking media, count tables.

Every file the project writes whole goes through :func:`atomic_path`: it is written under a temporary name
beside its destination, with the usual permissions, and renamed into place, so a reader (or a run resumed
after a crash) never sees half a file. Directories (HF datasets, checkpoints) go through
:func:`atomic_dir` alike. Files that grow line by line go through :class:`JsonlStore`.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from filelock import FileLock

from core.errors import DataError

if TYPE_CHECKING:
    from core.sample import Sample

STATS_FILE = "stats.md"
BUILD_INFO_FILE = "build_info.json"


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path``, on error it is removed.

    The temporary file is not created here, so whatever writes it creates it with the usual
    permissions (``mkstemp`` would make it private to the user). Parent directories are created.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _hidden_beside(path, "tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield a temporary directory path beside ``path`` (not created); on success the directory written
    there takes ``path``'s place, on error it is removed and ``path`` is left as it was.

    A directory cannot replace a non-empty one in one rename, so an old ``path`` is renamed aside first
    and deleted after: a kill between the two renames leaves no ``path`` (the old one under a hidden
    name), never a half-written one or a mix of old and new files.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _hidden_beside(path, "tmp")
    try:
        yield tmp
        if path.exists():
            old = _hidden_beside(path, "old")
            path.rename(old)
            tmp.rename(path)
            shutil.rmtree(old)
        else:
            tmp.rename(path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _hidden_beside(path: Path, kind: str) -> Path:
    """A unique hidden name in ``path``'s directory, telling whose it is."""
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.{kind}")


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write UTF-8 text to ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json_atomic(
    path: str | Path, obj: Any, indent: int | None = None, *, sort_keys: bool = False
) -> None:
    """Write ``obj`` as JSON plus a final newline to ``path`` atomically."""
    write_text_atomic(path, json.dumps(obj, indent=indent, sort_keys=sort_keys) + "\n")


def write_jsonl_atomic(path: str | Path, rows: Iterable[dict[str, Any]]) -> None:
    """Write rows as JSONL (one object a line, non-ASCII kept) to ``path`` atomically."""
    with atomic_path(path) as tmp, tmp.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")


class JsonlStore:
    """An append-only JSONL file of objects: per-item results, the shared results cache, judgements,
    generated questions, logged metrics.

    Each append is whole lines, flushed and synced. A kill can still cut the last line short: reading
    skips it (its object is simply made again) and the next append ends it first, so what follows is
    never glued onto the fragment and lost.

    Args:
        path: the file (created, with its directory, on the first append).
        key: the field :meth:`read` keys objects by (the last line per key wins).
        shared: other processes append too (a file lock around each append).
    """

    def __init__(self, path: str | Path, *, key: str = "id", shared: bool = False):
        self.path = Path(path)
        self.key = key
        self.dropped = 0  # lines skipped by the last read: cut short by a kill, or not an object
        self._file_lock = FileLock(f"{self.path}.lock") if shared else nullcontext()
        self._thread_lock = threading.Lock()  # callers may append from a thread pool

    def lines(self) -> Iterator[dict[str, Any]]:
        """Every whole object in file order."""
        self.dropped = 0
        if not self.path.exists():
            return
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                obj = None
            if isinstance(obj, dict):
                yield obj
            elif line.strip():
                self.dropped += 1

    def read(self) -> dict[Any, dict[str, Any]]:
        """The objects by ``key`` (those without it are skipped); the last line per key wins."""
        return {obj[self.key]: obj for obj in self.lines() if self.key in obj}

    def append(self, objects: Iterable[dict[str, Any]]) -> None:
        """Append objects, one line each, after ending a line a kill cut short."""
        data = "".join(json.dumps(obj, ensure_ascii=False) + "\n" for obj in objects).encode("utf-8")
        if not data:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._thread_lock, self._file_lock, self.path.open("ab+") as out:
            if out.seek(0, os.SEEK_END):
                out.seek(-1, os.SEEK_END)
                if out.read(1) != b"\n":
                    out.write(b"\n")
            out.write(data)
            out.flush()
            os.fsync(out.fileno())


def read_json_object(path: str | Path, what: str) -> dict[str, Any]:
    """Read a JSON file whose top level must be an object.

    Args:
        path: the file.
        what: what the file holds, for the message ("captions", "track").

    Raises:
        DataError: the file is unreadable, not JSON, or not a JSON object.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise DataError(str(path), f"cannot read {what} JSON: {err}") from None
    if not isinstance(data, dict):
        raise DataError(str(path), f"expected a JSON object, got {type(data).__name__}")
    return data


def read_jsonl(path: Path, problems: list[str]) -> list[tuple[int, dict[str, Any]]]:
    """Parse a JSONL file into ``(line number, object)`` pairs; record malformed lines in ``problems``.

    Blank lines carry no row and are skipped; every other line must be one JSON object.

    Raises:
        DataError: the file does not exist.
    """
    if not path.is_file():
        raise DataError(str(path), "file not found")
    rows = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as err:
                problems.append(f"row {number}: malformed JSON ({err.msg} at column {err.colno})")
                continue
            if not isinstance(obj, dict):
                problems.append(f"row {number}: expected a JSON object, got {type(obj).__name__}")
                continue
            rows.append((number, obj))
    return rows


def link_or_copy(src: Path, dst: Path) -> None:
    """Hardlink ``src`` to ``dst`` (copy across filesystems); an existing ``dst`` is kept."""
    if dst.exists():
        return
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:  # another filesystem. Copied atomically: a dst cut short would be kept as it is
        with atomic_path(dst) as tmp:
            shutil.copy2(src, tmp)


def markdown_table(header: list[str], rows: Iterable[list[Any]]) -> list[str]:
    """The lines of a markdown table: the header, its rule, one line per row (a ``|`` in a cell escaped)."""

    def line(cells: list[Any]) -> str:
        return "| " + " | ".join(str(cell).replace("|", "\\|") for cell in cells) + " |"

    return [line(header), "|" + "|".join("---" for _ in header) + "|", *map(line, rows)]


def crosstab_markdown(pairs: Iterable[tuple[str, str]], row_title: str) -> str:
    """A markdown table counting ``(row, column)`` pairs, with totals."""
    counts = Counter(pairs)
    rows = sorted({r for r, _ in counts}, key=_natural)
    cols = sorted({c for _, c in counts}, key=_natural)
    body = []
    for r in rows:
        cells = [counts[(r, c)] for c in cols]
        body.append([r, *cells, sum(cells)])
    totals = [sum(counts[(r, c)] for r in rows) for c in cols]
    body.append(["total", *totals, sum(totals)])
    return "\n".join(markdown_table([row_title, *cols, "total"], body)) + "\n"


def _natural(label: str) -> list:
    """Sort key putting "3 OD" before "10 GC"."""
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", label) if t]


def save_samples(samples: Iterable[Sample], path: Path) -> None:
    """Save samples as the HF dataset training reads (``datasets.load_from_disk`` + ``Sample.from_row``)."""
    import datasets  # imported here: heavy, and only this final save needs it

    dataset = datasets.Dataset.from_list([s.to_row() for s in samples])
    with atomic_dir(path) as tmp:
        dataset.save_to_disk(str(tmp))


def write_reports(out_dir: Path, stats: str, info: dict[str, Any]) -> None:
    """Write a build's human summary (``stats.md``) and its machine summary (``build_info.json``)."""
    write_text_atomic(out_dir / STATS_FILE, stats)
    write_json_atomic(out_dir / BUILD_INFO_FILE, info, indent=2, sort_keys=True)
