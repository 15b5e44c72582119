"""The one sample shape shared by every dataset, trainer and benchmark.

A sample is a conversation over one video: a time-ordered list of turns. User turns carry
content parts (video spans, images such as a visual-prompt frame, text); assistant turns carry
text and a flag saying whether they are trained on. Dataset-specific code produces this shape;
the model-family adapter in ``models.chat`` turns it into processor inputs, label masks and
generation prompts, so the prompt a model is trained on is the prompt it is scored on.

Stored rows (HF datasets and JSONL) keep ``messages`` as a JSON string: Arrow needs one fixed
schema per column and content parts are heterogeneous.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

Role = Literal["user", "assistant"]


@dataclass
class Part:
    """One content part of a turn.

    Attributes:
        type: ``"video"`` (a span ``[start, end]`` seconds of ``path``), ``"image"`` (a still such as
            a visual-prompt frame at ``path``) or ``"text"``.
    """

    type: Literal["video", "image", "text"]
    text: str | None = None
    path: str | None = None
    start: float | None = None
    end: float | None = None

    @staticmethod
    def video(path: str, start: float, end: float) -> Part:
        return Part("video", path=path, start=float(start), end=float(end))

    @staticmethod
    def image(path: str) -> Part:
        return Part("image", path=path)

    @staticmethod
    def txt(text: str) -> Part:
        return Part("text", text=text)


@dataclass
class Turn:
    """A user or assistant turn. ``loss`` marks assistant text that carries training loss."""

    role: Role
    parts: list[Part]
    loss: bool = False

    @property
    def text(self) -> str:
        return "".join(p.text or "" for p in self.parts if p.type == "text")


@dataclass
class Sample:
    """A conversation plus where it came from.

    Attributes:
        id: unique within its dataset.
        task: ``"v2p"`` or ``"ovi"``.
        turns: the conversation. For evaluation the final assistant turn is the reference.
        source: source dataset name, ``source_id``: the id of the video/item there, ``segment``:
            the source segment in seconds that the item was built from.
        meta: task-specific fields (answer letter, dimension, interruption type, ...).
    """

    id: str
    task: str
    turns: list[Turn]
    source: str
    source_id: str
    segment: tuple[float, float]
    meta: dict[str, Any] = field(default_factory=dict)

    def to_row(self) -> dict[str, Any]:
        """A flat row for HF datasets / JSONL (``messages`` and ``meta`` as JSON strings)."""
        return {
            "id": self.id,
            "task": self.task,
            "messages": json.dumps([_turn_dict(t) for t in self.turns]),
            "source": self.source,
            "source_id": self.source_id,
            "segment_start": float(self.segment[0]),
            "segment_end": float(self.segment[1]),
            "meta": json.dumps(self.meta, sort_keys=True),
        }

    @staticmethod
    def from_row(row: dict[str, Any]) -> Sample:
        turns = [
            Turn(t["role"], [Part(**p) for p in t["parts"]], bool(t.get("loss", False)))
            for t in json.loads(row["messages"])
        ]
        return Sample(
            id=row["id"],
            task=row["task"],
            turns=turns,
            source=row["source"],
            source_id=row["source_id"],
            segment=(row["segment_start"], row["segment_end"]),
            meta=json.loads(row["meta"]),
        )


def _turn_dict(turn: Turn) -> dict[str, Any]:
    # vars, not dataclasses.asdict: a Part is flat, and asdict's deep copy was a third of a large build
    parts = [{k: v for k, v in vars(p).items() if v is not None} for p in turn.parts]
    return {"role": turn.role, "parts": parts, "loss": turn.loss}
