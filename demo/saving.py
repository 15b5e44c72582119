"""A demo exchange saved as a benchmark item, through the project's own release writers, so that
``python -m eval`` replays it (``eval.settings.ovi.root=<out_dir>/ovibench`` or
``eval.settings.v2p.root=<out_dir>/v2p``).

- OVIBench (``core.formats.ovi``): an open-ended item; the question over the whole video, the
  model's own answer as the partial answer, the interruption at ``t_q + (tokens + ½) / rate`` so that the
  simulation (``interruption_cut``, at the same rate) cuts the replayed answer after the same token; the
  reaction the model gave as the reference unless one is given. OVIBench rows have no visual-prompt frame:
  a drawing is not part of this item (the reply says so).
- V2P-Bench (``core.formats.v2p``): the question with its options and the right letter, the video,
  and the drawn frame (PNG: the same pixels), its shape, style and box recorded as the synthetic twin
  records them.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import DataError
from core.files import read_jsonl
from core.formats.ovi import OVI_FILE, release_ovibench
from core.formats.v2p import DIMENSIONS, RELEASE_FILE, parse_options, release_v2p
from demo.session import Exchange
from demo.video import Drawing

OVI_DIR, V2P_DIR = "ovibench", "v2p"
SOURCE = "demo"


@dataclass(frozen=True)
class Saved:
    format: str
    root: Path
    id: str
    note: str = ""

    def reply(self) -> dict[str, Any]:
        return {"format": self.format, "root": str(self.root), "id": self.id, "note": self.note}


def save_ovi(
    exchange: Exchange, out_dir: Path, tokens_per_second: float, reference: str | None = None
) -> Saved:
    """Append the exchange to ``<out_dir>/ovibench/ovibench.jsonl`` (the video copied beside).

    Raises:
        DataError: the exchange was not interrupted, or the row breaks the schema (naming the field).
    """
    if exchange.interruption is None or not exchange.done:
        raise DataError(
            "save", "an OVIBench item needs an interrupted answer and its reaction: interrupt first"
        )
    root = out_dir / OVI_DIR
    question = exchange.question
    rows = _rows(root / OVI_FILE)
    item_id = f"{SOURCE}-ovi-{Path(question.video).stem}-{len(rows):03d}"
    # An answer that ended before the interruption is cut one token past its end: replayed, it ends too.
    tokens = len(exchange.answer_ids) + (1 if exchange.answer_finished else 0)
    t_q = round(question.until_s, 3)
    row = {
        "id": item_id,
        "video_path": str(_copy_video(question.video, root / "videos").relative_to(root)),
        "duration": t_q,
        "source": SOURCE,
        "source_id": Path(question.video).stem,
        "segment": [0.0, t_q],
        "question_time": t_q,
        "question": question.text,
        "answer": exchange.answer,
        "interruption_time": round(t_q + (tokens + 0.5) / tokens_per_second, 3),
        "partial_answer": exchange.answer,
        "interruption_type": exchange.interruption.kind.value,
        "interruption": exchange.interruption.words,
        "reference_reaction": (reference or "").strip() or exchange.reaction,
        "format": "open",
    }
    release_ovibench([*rows, row], root)
    note = (
        "the drawing is not kept: OVIBench items have no visual-prompt frame" if question.prompt_frame else ""
    )
    return Saved("ovi", root, item_id, note)


def save_v2p(
    exchange: Exchange, drawing: Drawing | None, out_dir: Path, answer: str, dimension: int = 1
) -> Saved:
    """Append the exchange's question to ``<out_dir>/v2p/dataset_info.jsonl``, with its video and drawn frame.

    Raises:
        DataError: no drawing, no options, a letter not among them, an unknown dimension, or a row the
            loader rejects (naming the field).
    """
    question = exchange.question
    if drawing is None or not question.prompt_frame:
        raise DataError("save", "a V2P-Bench item needs a visual prompt: draw on a frame, then ask")
    try:
        _, options = parse_options(question.text)
    except ValueError as err:
        raise DataError("save", f"a V2P-Bench item is multiple choice: ask with options ({err})") from None
    letters = [chr(ord("A") + i) for i in range(len(options))]
    if answer not in letters:
        raise DataError("save", f"answer {answer!r} is not among the options {', '.join(letters)}")
    if dimension not in DIMENSIONS:
        raise DataError("save", f"dimension {dimension} not in {sorted(DIMENSIONS)}")
    root = out_dir / V2P_DIR
    rows = _rows(root / RELEASE_FILE)
    stem = Path(question.video).stem
    item_id = f"{SOURCE}-v2p-{stem}-{len(rows):03d}"
    frame = Path(SOURCE) / f"{item_id}.png"
    (root / "frames" / frame).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(question.prompt_frame, root / "frames" / frame)
    video = _copy_video(question.video, root / "videos" / SOURCE).relative_to(root / "videos")
    row = {
        "id": item_id,
        "video_id": stem,
        "video_path": str(video),
        "duration": round(question.until_s, 3),
        "question": question.text,
        "answer": answer,
        "source": SOURCE,
        "frame_path": str(frame),
        "dimension": dimension,
        "category": dimension,
        "prompt_shape": drawing.shape,
        "prompt_style": drawing.style,
        "prompt_box": [round(v, 1) for v in drawing.box],
        "keyframe": drawing.frame,
    }
    release_v2p([*rows, row], root)
    return Saved("v2p", root, item_id)


def _rows(path: Path) -> list[dict[str, Any]]:
    """The rows saved before (none when the file is new)."""
    if not path.exists():
        return []
    problems: list[str] = []
    rows = [row for _, row in read_jsonl(path, problems)]
    if problems:
        raise DataError(str(path), "; ".join(problems))
    return rows


def _copy_video(video: str, folder: Path) -> Path:
    """The video copied into ``folder`` (once: the file is the same for every item on it)."""
    target = folder / Path(video).name
    if Path(video).resolve() != target.resolve() and not target.exists():
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(video, target)
    return target
