"""Rows in the benchmarks' file formats, for tests: a V2P-Bench release row, an OVIBench row (open-ended
and multiple choice). The directories they live in are the ``v2p_release`` and ``ovi_root`` fixtures
(conftest.py)."""

from __future__ import annotations

import json
from pathlib import Path

from core.formats.v2p import INSTRUCTION


def v2p_question(stem: str, options: list[str], gap: str = " ") -> str:
    lines = [f"{chr(ord('A') + i)}:{gap}{text}" for i, text in enumerate(options)]
    return "\n".join([stem, *lines, INSTRUCTION])


def v2p_row(**overrides) -> dict:
    row = {
        "video_id": "vid1",
        "video_path": "NExTVideo/vid1.mp4",
        "duration": 12,
        "question": v2p_question(
            "What is the object in the box doing?", ["running", "sitting", "eating", "sleeping"]
        ),
        "answer": "B",
        "source": "NExT-QA",
        "frame_path": "NExTVideo/vid1_0.jpg",
        "dimension": 1,
        "category": 7,
    }
    row.update(overrides)
    return row


def write_v2p_rows(root: Path, lines: list) -> None:
    """``dataset_info.jsonl`` of ``lines`` (dicts, or raw text for malformed lines)."""
    text = "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines)
    (root / "dataset_info.jsonl").write_text(text + "\n")


def touch(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x")  # the loaders check presence only; decoding is the media layer's job


def ovi_row(**overrides) -> dict:
    row = {
        "id": "x-1-open",
        "video_path": "videos/v_a.mp4",
        "duration": 10.0,
        "source": "activitynet",
        "source_id": "v_a",
        "segment": [1.0, 4.0],
        "question_time": 4.0,
        "question": "What happens in the video between 1.0 s and 4.0 s?",
        "answer": "Between 1.0 s and 4.0 s, a red circle moves up.",
        "interruption_time": 5.2,
        "partial_answer": "Between 1.0 s and",
        "interruption_type": "False Trigger",
        "interruption": "Uh-huh.",
        "reference_reaction": "4.0 s, a red circle moves up.",
        "format": "open",
    }
    row.update(overrides)
    return row


def ovi_mcq(**overrides) -> dict:
    options = ["Okay, I'll stop here.", "4.0 s, a red circle moves up.", "Between 0.0 s and 9.0 s, x.", "Hm."]
    return ovi_row(
        **{"id": "x-1-mcq", "format": "mcq", "options": options, "answer_letter": "B", **overrides}
    )
