"""Our OVIBench row format and its loader.

Nothing of OVIBench is released (no data, no code), so this schema is **ours**, built from the paper:
one JSON object per line in ``<root>/ovibench.jsonl``, videos under ``<root>/videos/``::

    id                  unique string
    video_path          relative to root, e.g. "videos/v_abc.mp4"
    duration            video length in seconds
    source, source_id   provenance: source dataset and the video's id there
    segment             [start, end] seconds of the source segment the item was built from
    question_time       t_q: the question arrives; the video is visible on [0, t_q]
    question            the user's question
    answer              the full original answer
    interruption_time   t_i >= t_q: the user interrupts; frames (t_q, t_i] arrive with the interruption.
                        t_i may pass the video's end (an answer can be interrupted after the last
                        frame): the frames then stop at the duration
    partial_answer      the answer as spoken up to t_i
    interruption_type   "Cancellation" | "False Trigger" | "Correction"
    interruption        the user's interrupting utterance
    reference_reaction  the right reaction after the interruption
    format              "mcq" | "open" (core.vocab.ItemForm; a sample carries it as meta["format"])
    options             mcq only: 4 candidate continuations
    answer_letter       mcq only: the letter of the right continuation
    visual_evidence     optional: a text description of the video up to t_i (shown to the LLM judge)
    phrasing            optional: the phrase bank the interruption's words came from, "train" | "eval"
                        | "paraphrased" (core.vocab.Phrasing; the banks: data_builders/phrasings.py)
    question_kind       optional: how the question was made ("window", "after", "source", "generated", ...;
                        data_builders/questions/)
    source_annotations  optional: the source's own ids of the annotations the question rests on, e.g.
                        [{"qid": 2579, "window": 0}] (QVHighlights), [{"caption": 2}] (ActivityNet)

A row becomes a four-turn :class:`~core.sample.Sample`: question over video [0, t_q],
partial answer (no loss: it is given, not predicted), interruption with video (t_q, min(t_i,
duration)] (none when no frame is new), reaction (the target: ``"B (Correction)"`` for mcq, the
reference reaction for open).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from core.checks import duplicate_ids, is_list_of, is_number, is_string
from core.errors import DataErrors
from core.files import read_jsonl, write_jsonl_atomic
from core.sample import Part, Sample, Turn
from core.vocab import INTERRUPTION_TYPES, ITEM_FORMS, PHRASINGS

OVI_FILE = "ovibench.jsonl"
MCQ_INSTRUCTION = (
    "Choose the best continuation of your answer and name the interruption type (Cancellation, False "
    'Trigger or Correction). Reply with the letter, then the type in parentheses, e.g. "A (Correction)".'
)
LETTERS = "ABCD"
_STRINGS = (
    "id",
    "video_path",
    "source",
    "source_id",
    "question",
    "answer",
    "partial_answer",
    "interruption_type",
    "interruption",
    "reference_reaction",
    "format",
)
_NUMBERS = ("duration", "question_time", "interruption_time")
# Times are rounded to milliseconds when written; allow that much slack against the duration.
_EPS = 1e-3


def mcq_options_text(options: list[str]) -> str:
    """``A: ...`` lines, one per option."""
    return "\n".join(f"{LETTERS[i]}: {text}" for i, text in enumerate(options))


def ovi_target(row: dict[str, Any]) -> str:
    """The assistant's final turn: ``"B (Correction)"`` for mcq, the reference reaction for open."""
    if row["format"] == "mcq":
        return f"{row['answer_letter']} ({row['interruption_type']})"
    return row["reference_reaction"]


def ovi_row_to_sample(row: dict[str, Any], root: str | Path) -> Sample:
    """Turn one (valid) OVIBench row into a sample; video paths are joined onto ``root``."""
    video = str(Path(root) / row["video_path"])
    t_q, t_i = float(row["question_time"]), float(row["interruption_time"])
    interruption = row["interruption"]
    if row["format"] == "mcq":
        interruption += "\n" + MCQ_INSTRUCTION + "\n" + mcq_options_text(row["options"])
    # Frames stop at the video's end: an interruption after it (or at t_q) brings no new frames, and
    # its turn then has no video part rather than an empty span.
    last_frame = min(t_i, float(row["duration"]))
    new_frames = [Part.video(video, t_q, last_frame)] if last_frame > t_q else []
    turns = [
        Turn("user", [Part.video(video, 0.0, t_q), Part.txt(row["question"])]),
        Turn("assistant", [Part.txt(row["partial_answer"])], loss=False),
        Turn("user", [*new_frames, Part.txt(interruption)]),
        Turn("assistant", [Part.txt(ovi_target(row))], loss=True),
    ]
    meta = {
        "format": row["format"],
        "interruption_type": row["interruption_type"],
        "options": row.get("options"),
        "question": row["question"],
        "reference_reaction": row["reference_reaction"],
        # The LLM judge's prompt needs the conversation so far (eval.judge.item_from_record).
        "answer": row["answer"],
        "partial_answer": row["partial_answer"],
        "interruption": row["interruption"],
        "duration": float(row["duration"]),
        "question_time": t_q,
        "interruption_time": t_i,
    }
    for optional in ("visual_evidence", "phrasing", "question_kind", "source_annotations"):
        if row.get(optional):
            meta[optional] = row[optional]
    if row["format"] == "mcq":
        meta["answer_letter"] = row["answer_letter"]
    start, end = row["segment"]
    return Sample(
        id=row["id"],
        task="ovi",
        turns=turns,
        source=row["source"],
        source_id=row["source_id"],
        segment=(float(start), float(end)),
        meta=meta,
    )


def check_ovi_row(row: dict[str, Any], number: int) -> list[str]:
    """Schema and consistency problems of one row, each naming the row and the field."""
    where = f"row {number}, field"
    problems = [f"{where} '{k}': expected a string" for k in _STRINGS if not is_string(row.get(k))]
    problems += [f"{where} '{k}': expected a number" for k in _NUMBERS if not is_number(row.get(k))]
    if not is_list_of(row.get("segment"), is_number, 2):
        problems.append(f"{where} 'segment': expected [start, end] seconds")
    if problems:
        return problems
    if row["interruption_type"] not in INTERRUPTION_TYPES:
        kind = row["interruption_type"]
        problems.append(f"{where} 'interruption_type': {kind!r} not in {INTERRUPTION_TYPES}")
    problems += _check_times(row, where)
    problems += _check_optional(row, where)
    if row["format"] not in ITEM_FORMS:
        problems.append(f"{where} 'format': {row['format']!r} not in {ITEM_FORMS}")
    elif row["format"] == "mcq":
        problems += _check_mcq(row, where)
    return problems


def _check_times(row: dict[str, Any], where: str) -> list[str]:
    duration, t_q, t_i = row["duration"], row["question_time"], row["interruption_time"]
    (start, end), problems = row["segment"], []
    if duration <= 0:
        problems.append(f"{where} 'duration': must be positive, got {duration}")
    if t_q < 0 or t_q > duration + _EPS:
        problems.append(f"{where} 'question_time': {t_q} outside the video [0, {duration}]")
    # No upper bound: an answer may be interrupted after the video's last frame.
    if not math.isfinite(t_i):
        problems.append(f"{where} 'interruption_time': {t_i} is not a finite time")
    elif t_i < 0:
        problems.append(f"{where} 'interruption_time': {t_i} is before the video's start")
    elif t_i < t_q:
        problems.append(f"{where} 'interruption_time': {t_i} is before question_time {t_q}")
    if not 0 <= start <= end <= duration + _EPS:
        problems.append(f"{where} 'segment': [{start}, {end}] is negative, reversed or beyond {duration}")
    return problems


def _check_optional(row: dict[str, Any], where: str) -> list[str]:
    problems = []
    if "visual_evidence" in row and not is_string(row["visual_evidence"]):
        problems.append(f"{where} 'visual_evidence': expected a string")
    if "phrasing" in row and row["phrasing"] not in PHRASINGS:
        problems.append(f"{where} 'phrasing': {row['phrasing']!r} not in {PHRASINGS}")
    return problems


def _check_mcq(row: dict[str, Any], where: str) -> list[str]:
    options = row.get("options")
    if not is_list_of(options, is_string, len(LETTERS)):
        return [f"{where} 'options': mcq needs a list of 4 strings"]
    if len(set(options)) != 4:
        return [f"{where} 'options': options must be distinct"]
    letter = row.get("answer_letter")
    if letter not in tuple(LETTERS):  # a tuple: "AB" and "" are substrings of "ABCD", not letters
        return [f"{where} 'answer_letter': {letter!r} is not among options A, B, C, D"]
    if options[LETTERS.index(letter)] != row["reference_reaction"]:
        return [f"{where} 'answer_letter': option {letter} differs from reference_reaction"]
    return []


def _check_rows(rows: list[tuple[int, dict[str, Any]]], root: Path | None) -> list[str]:
    problems = []
    for number, row in rows:
        row_problems = check_ovi_row(row, number)
        if not row_problems and root is not None and not (root / row["video_path"]).is_file():
            row_problems.append(f"row {number}, field 'video_path': file not found: {row['video_path']}")
        problems += row_problems
    # A non-string id is already reported above; only strings are compared.
    ids = ((number, row.get("id") if is_string(row.get("id")) else None) for number, row in rows)
    return problems + duplicate_ids(ids)


def load_ovibench(root: str | Path, *, require_files: bool = True) -> list[Sample]:
    """Load ``<root>/ovibench.jsonl`` as samples after validating every row.

    Raises:
        DataErrors: listing every bad row (line number and field) before any sample is built.
    """
    root = Path(root)
    path = root / OVI_FILE
    problems: list[str] = []
    rows = read_jsonl(path, problems)
    problems += _check_rows(rows, root if require_files else None)
    if problems:
        raise DataErrors(path, problems)
    return [ovi_row_to_sample(row, root) for _, row in rows]


def write_ovibench(rows: Iterable[dict[str, Any]], root: str | Path) -> Path:
    """Validate ``rows`` (schema only) and write ``<root>/ovibench.jsonl`` atomically.

    Raises:
        DataErrors: when a row breaks the schema; "row N" is then the 1-based position in ``rows``.
    """
    path = Path(root) / OVI_FILE
    rows = list(rows)
    problems = _check_rows(list(enumerate(rows, start=1)), None)
    if problems:
        raise DataErrors(path, problems)
    write_jsonl_atomic(path, rows)
    return path


def release_ovibench(rows: Iterable[dict[str, Any]], root: str | Path) -> list[Sample]:
    """Write ``rows`` as ``<root>/ovibench.jsonl`` and return what :func:`load_ovibench` makes of the
    written file: a builder saves these as its training set, so training sees what the benchmark loader sees.

    Raises:
        DataErrors: a row breaks the schema, or names a video that is not under ``root``.
    """
    write_ovibench(rows, root)
    return load_ovibench(root)
