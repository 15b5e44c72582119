"""A source dataset for the OVI-Train builder tests: ActivityNet-format captions of object videos (a closed
vocabulary of coloured shapes that enter, move and leave) plus one plain-caption video, with tiny mp4s."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from data_builders.cli_config import OviTrainBuild
from data_builders.video_io import write_mp4

DURATION = 12.0
COLOURS = ("red", "green", "blue", "yellow")
SHAPES = ("circle", "square", "triangle")
MOVES = ("to the left", "to the right", "up", "down")


def object_captions(rng: np.random.Generator) -> dict:
    stamps, sentences = [], []
    for colour in rng.permutation(COLOURS)[: int(rng.integers(2, 4))]:
        name, move = f"{colour} {rng.choice(SHAPES)}", str(rng.choice(MOVES))
        appear, leave = float(rng.choice([0.0, 2.0, 4.0])), float(rng.choice([8.0, DURATION]))
        stamps.append([appear, leave])
        sentences.append(f"a {name} moves {move}")
        if appear > 0:
            stamps.append([appear, appear + 1.0])
            sentences.append(f"a {name} enters the scene moving {move}")
        if leave < DURATION:
            stamps.append([leave - 1.0, leave])
            sentences.append(f"the {name} leaves the scene moving {move}")
    return {"duration": DURATION, "timestamps": stamps, "sentences": sentences}


def make_source(root: Path, n_videos: int, seed: int = 0, extra: dict | None = None) -> tuple[Path, Path]:
    """Captions for ``n_videos`` object videos plus one plain-caption video, and tiny mp4s for them."""
    rng = np.random.default_rng(seed)
    captions = {f"v_obj{i:03d}": object_captions(rng) for i in range(n_videos)}
    captions["v_plain"] = {
        "duration": 20.0,
        "timestamps": [[0, 6.5], [5.0, 12.0], [12.0, 19.5]],
        "sentences": [" A man is seen speaking to the camera.", "He picks up a guitar", "He plays a song."],
    }
    captions.update(extra or {})
    frames = np.zeros((4, 32, 32, 3), dtype=np.uint8)
    for key in captions:
        if key != "v_novideo":
            write_mp4(root / "videos" / f"{key}.mp4", frames, fps=1.0)
    path = root / "captions.json"
    path.write_text(json.dumps(captions))
    return path, root / "videos"


def ovi_build(captions: Path, videos: Path, **settings: Any) -> OviTrainBuild:
    """An OVI-Train config for ``captions`` and ``videos``; ``out`` (unless set) beside the captions."""
    return OviTrainBuild(
        **{"captions": str(captions), "videos": str(videos), "out": str(captions.parent / "out"), **settings}
    )
