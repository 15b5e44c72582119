"""The V2P-Bench release format: ``<root>/dataset_info.jsonl`` plus ``videos/`` and ``frames/``.

One question per line. ``question`` holds the question, the option lines ``A: ...`` (sometimes two
spaces after the colon) and a fixed instruction line; ``frame_path`` is a string or a list of
visual-prompt frames. The loader validates every row first and reports all bad rows at once, then
turns each row into a :class:`~core.sample.Sample`.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from core.checks import duplicate_ids, is_list_of, is_string
from core.choice import Choice
from core.errors import DataErrors
from core.files import read_jsonl, write_jsonl_atomic
from core.sample import Part, Sample, Turn

RELEASE_FILE = "dataset_info.jsonl"
INSTRUCTION = (
    "Select the best option that accurately addresses the question. "
    "Give only your option letter, no other words."
)
# id -> (label, name). The official scoring script mislabels 8 of these; this map reproduces the
# paper's per-dimension table. Ids 8, 11, 15, 16 are unused.
DIMENSIONS: dict[int, tuple[str, str]] = {
    1: ("OA", "Object Attribute"),
    2: ("HA", "Human Attribute"),
    3: ("OD", "Object Direction"),
    4: ("FM", "Feature Mapping"),
    5: ("FT", "Forward Temporal"),
    6: ("RT", "Reverse Temporal"),
    7: ("AS", "Action Sequence"),
    9: ("SR", "Spatial Relationship"),
    10: ("GC", "General Counting"),
    12: ("CR", "Causal Relationship"),
    13: ("PU", "Plot Understanding"),
    14: ("CI", "Counterfactual Inference"),
}
_OPTION_LINE = re.compile(r"^([A-Z]):[ \t]+(\S.*?)\s*$")
_FIELDS: dict[str, tuple[type, ...]] = {
    "video_id": (str, int),
    "video_path": (str,),
    "duration": (int, float),
    "question": (str,),
    "answer": (str,),
    "source": (str,),
    "frame_path": (str, list),
    "dimension": (int,),
    "category": (int,),
}


class InputOrder(Choice):
    """Where a V2P item's visual-prompt frame goes in its user turn (``eval.settings.v2p.input_order``)."""

    official = "official"  # video, question, VP frame (the official V2P-Bench inference script)
    vp_first = "vp_first"  # video, VP frame, question


def parse_options(question: str) -> tuple[str, list[str]]:
    """Split a V2P question into the stem and its options.

    Option lines are ``A: text`` with one or more spaces after the colon; letters must run A, B, ...

    Returns:
        ``(stem, options)``; the stem is the text before the first option line, stripped.

    Raises:
        ValueError: on letters out of order or fewer than 2 / more than 4 options.
    """
    lines = question.splitlines()
    options: list[str] = []
    first = None
    for i, line in enumerate(lines):
        match = _OPTION_LINE.match(line.strip())
        if not match:
            continue
        letter, text = match.groups()
        if letter != chr(ord("A") + len(options)):
            raise ValueError(f"option {letter} out of order (expected {chr(ord('A') + len(options))})")
        first = i if first is None else first
        options.append(text)
    if not 2 <= len(options) <= 4:
        raise ValueError(f"expected 2-4 option lines 'A: ...', found {len(options)}")
    return "\n".join(lines[:first]).strip(), options


def render_question(stem: str, options: list[str]) -> str:
    """The release's question text: stem, option lines, then the fixed instruction line."""
    letters = [f"{chr(ord('A') + i)}: {text}" for i, text in enumerate(options)]
    return "\n".join([stem, *letters, INSTRUCTION])


def resolve_path(base: Path, relative: str, cache: dict[Path, Path] | None = None) -> Path | None:
    """Find ``base/relative``, matching each missing component case-insensitively.

    The release spells the same folder differently in ``video_path`` and ``frame_path``
    (``NExTVideo`` vs ``NEXTVideo``). Each substitution is announced by one warning; pass the
    same ``cache`` for a whole file so a folder is looked up and reported once, not per row.

    Returns:
        The existing path, or ``None`` when nothing (or more than one candidate) matches.
    """
    cache = {} if cache is None else cache
    exact = base / relative
    if exact.exists():
        return exact
    current = base
    for part in Path(relative).parts:
        wanted = current / part
        if wanted in cache:
            current = cache[wanted]
        elif wanted.exists():
            current = wanted
        else:
            siblings = current.iterdir() if current.is_dir() else []
            matches = [c for c in siblings if c.name.lower() == part.lower()]
            if len(matches) != 1:
                return None
            warnings.warn(f"{wanted} not found; using {matches[0]} (case-insensitive match)", stacklevel=2)
            current = cache[wanted] = matches[0]
    return current


def _frame_paths(row: dict[str, Any]) -> list[str]:
    frames = row["frame_path"]
    return [frames] if isinstance(frames, str) else list(frames)


def _check_row(row: dict[str, Any], number: int) -> list[str]:
    """Type and content problems of one row (no file system access)."""
    where = f"row {number}"
    problems = []
    for name, types in _FIELDS.items():
        value = row.get(name)
        if name not in row:
            problems.append(f"{where}, field '{name}': missing")
        elif isinstance(value, bool) or not isinstance(value, types):
            wanted = " or ".join(t.__name__ for t in types)
            problems.append(f"{where}, field '{name}': expected {wanted}, got {type(value).__name__}")
    if problems:
        return problems
    if row["duration"] <= 0:
        problems.append(f"{where}, field 'duration': must be positive, got {row['duration']}")
    if row["dimension"] not in DIMENSIONS:
        problems.append(f"{where}, field 'dimension': unknown dimension id {row['dimension']}")
    frames = row["frame_path"]
    if isinstance(frames, list) and not (frames and is_list_of(frames, is_string)):
        problems.append(f"{where}, field 'frame_path': expected a string or a non-empty list of strings")
    try:
        _, options = parse_options(row["question"])
    except ValueError as err:
        return [*problems, f"{where}, field 'question': {err}"]
    letters = [chr(ord("A") + i) for i in range(len(options))]
    if row["answer"] not in letters:
        listed = ", ".join(letters)
        problems.append(f"{where}, field 'answer': {row['answer']!r} is not among options {listed}")
    return problems


def _check_files(root: Path, row: dict[str, Any], number: int, cache: dict[Path, Path]) -> list[str]:
    problems = []
    targets = [("video_path", "videos", row["video_path"])]
    targets += [("frame_path", "frames", frame) for frame in _frame_paths(row)]
    for name, folder, relative in targets:
        if Path(relative).is_absolute() or ".." in Path(relative).parts:
            problems.append(f"row {number}, field '{name}': must be relative to {folder}/, got {relative!r}")
        elif resolve_path(root / folder, relative, cache) is None:
            problems.append(f"row {number}, field '{name}': file not found: {folder}/{relative}")
    return problems


def load_v2p_release(
    root: str | Path, *, input_order: str = InputOrder.official, require_files: bool = True
) -> list[Sample]:
    """Load a V2P-Bench release (or a synthetic twin) as samples.

    Args:
        root: folder holding ``dataset_info.jsonl``, ``videos/`` and ``frames/``.
        input_order: ``"official"`` (video, question, VP frames) or ``"vp_first"`` (video, VP
            frames, question).
        require_files: check that every video and frame exists.

    Raises:
        DataErrors: listing every bad row (line number and field) before any sample is built.
        ValueError: on an unknown ``input_order``.
    """
    if input_order not in tuple(InputOrder):
        orders = tuple(order.value for order in InputOrder)
        raise ValueError(f"input_order must be one of {orders}, got {input_order!r}")
    root = Path(root)
    path = root / RELEASE_FILE
    problems: list[str] = []
    rows = read_jsonl(path, problems)
    cache: dict[Path, Path] = {}
    for number, row in rows:
        row_problems = _check_row(row, number)
        if not row_problems and require_files:
            row_problems = _check_files(root, row, number, cache)
        problems += row_problems
    problems += duplicate_ids((number, _row_id(row, number)) for number, row in rows)
    if problems:
        raise DataErrors(path, problems)
    return [_to_sample(root, row, number, input_order, cache) for number, row in rows]


def _row_id(row: dict[str, Any], number: int) -> str:
    for key in ("id", "qid"):
        if row.get(key) is not None:
            return str(row[key])
    return f"{number:06d}"


def _media(root: Path, folder: str, relative: str, cache: dict[Path, Path]) -> str:
    # A missing file only gets here with require_files=False: keep the joined path then.
    return str(resolve_path(root / folder, relative, cache) or root / folder / relative)


def _to_sample(
    root: Path, row: dict[str, Any], number: int, input_order: str, cache: dict[Path, Path]
) -> Sample:
    duration = float(row["duration"])
    video = Part.video(_media(root, "videos", row["video_path"], cache), 0.0, duration)
    images = [Part.image(_media(root, "frames", f, cache)) for f in _frame_paths(row)]
    question = Part.txt(row["question"])
    parts = [video, question, *images] if input_order == InputOrder.official else [video, *images, question]
    _, options = parse_options(row["question"])
    meta = {
        "answer": row["answer"],
        "options": options,
        "dimension": row["dimension"],
        "category": row["category"],
        "duration": duration,
        "source": row["source"],
        "question": row["question"],
        "video_id": str(row["video_id"]),
    }
    if "prompt_shape" in row:  # our synthetic rows know the drawn shape; the release does not
        meta["prompt_shape"] = row["prompt_shape"]
    return Sample(
        id=_row_id(row, number),
        task="v2p",
        turns=[Turn("user", parts), Turn("assistant", [Part.txt(row["answer"])], loss=True)],
        source=row["source"],
        source_id=str(row["video_id"]),
        segment=(0.0, duration),
        meta=meta,
    )


def write_v2p_release(rows: Iterable[dict[str, Any]], root: str | Path) -> Path:
    """Write ``rows`` as ``<root>/dataset_info.jsonl`` atomically; returns the file path."""
    path = Path(root) / RELEASE_FILE
    write_jsonl_atomic(path, rows)
    return path


def release_v2p(rows: Iterable[dict[str, Any]], root: str | Path) -> list[Sample]:
    """Write ``rows`` as ``<root>/dataset_info.jsonl`` and return what :func:`load_v2p_release` makes of the
    release (its videos and frames already under ``root``): a builder saves these as its training set, so
    training sees what the benchmark loader sees.

    Raises:
        DataErrors: a row is malformed or names a video or frame that is not there.
    """
    write_v2p_release(rows, root)
    return load_v2p_release(root)
