"""Every prompt shape, drawn by a default visual-prompt build on each kind of source, shows at its target."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from core.video_io import read_all_frames
from data_builders.cli_config import SyntheticDataConfig, VpSftBuild
from data_builders.sources.tracks import read_tracks
from data_builders.synthetic_world import build_world
from data_builders.visual_prompts import DEFAULT_SHAPES, SHAPES, colours_alike
from data_builders.vp_sft import build_vp_sft

W, H, N = 64, 48, 30
_MARGIN = 3  # px around the box where a prompt may sit (a tag above it, an arrow's tip beside it)


def _sequence(folder: Path, step: tuple[int, int], frames_dir: str = "") -> None:
    """``N`` frames of a 10x8 red block moving ``step`` px per frame, with ``groundtruth.txt`` boxes."""
    (folder / frames_dir).mkdir(parents=True)
    lines = []
    for f in range(N):
        x, y = 4 + step[0] * f, 4 + step[1] * f
        image = np.full((H, W, 3), 40, dtype=np.uint8)
        image[y : y + 8, x : x + 10] = (230, 60, 60)
        Image.fromarray(image).save(folder / frames_dir / f"{f + 1:08d}.jpg")
        lines.append(f"{x},{y},10,8\n")
    (folder / "groundtruth.txt").write_text("".join(lines))


def _got10k(root: Path) -> Path:
    for i, category in enumerate(("car", "zebra", "person", "dog", "cat", "bird")):
        folder = root / f"GOT-10k_Train_{i:06d}"
        _sequence(folder, step=(1, 0) if i % 2 else (0, 1))
        (folder / "absence.label").write_text("0\n" * N)
        (folder / "meta_info.ini").write_text(f"[METAINFO]\nobject_class: {category}\n")
    return root


def _lasot(root: Path) -> Path:
    for i in range(6):
        _sequence(root / "air_plane" / f"air_plane-{i}", step=(1, 0) if i % 2 else (0, 1), frames_dir="img")
    return root


def _synthetic(root: Path) -> Path:
    build_world(root, 8, seed=0)
    return root


@pytest.mark.parametrize(
    ("source", "make"), [("generic", _synthetic), ("got10k", _got10k), ("lasot", _lasot)]
)
def test_every_shape_is_drawn_visibly_at_its_target(tmp_path: Path, source: str, make):
    world = make(tmp_path / "world")
    cfg = VpSftBuild(
        world=str(world), out=str(tmp_path / "out"), format=source, questions_per_video=8, seed=1
    )
    release = build_vp_sft(cfg) / "v2p"
    tracks = {t["video_id"]: t for t in read_tracks(source, world, tmp_path / "videos")[0]}
    changed_pixels = defaultdict(list)
    for row in map(json.loads, (release / "dataset_info.jsonl").read_text().splitlines()):
        raw = read_all_frames(release / "videos" / row["video_path"])[row["keyframe"]].astype(int)
        drawn = np.asarray(Image.open(release / "frames" / row["frame_path"])).astype(int)
        changed = np.abs(drawn - raw).max(axis=2) > 80  # well beyond JPEG and H.264 noise
        changed_pixels[row["prompt_shape"]].append(changed.sum())
        target = tracks[row["video_id"]]["objects"][row["target_id"]]
        x0, y0, x1, y1 = (round(v) for v in target["boxes"][str(row["keyframe"])])
        near = changed[max(0, y0 - _MARGIN) : y1 + _MARGIN, max(0, x0 - _MARGIN) : x1 + _MARGIN]
        assert near.any(), (row["prompt_shape"], row["id"])
    assert {shape: min(counts) >= 20 for shape, counts in changed_pixels.items()} == dict.fromkeys(
        SHAPES, True
    )


def test_all_eight_shapes_by_default():
    assert set(DEFAULT_SHAPES) == set(SHAPES) and len(SHAPES) == 8
    assert set(SyntheticDataConfig().shapes) == set(SHAPES)


def test_a_prompt_never_takes_a_colour_close_to_its_target():
    assert {"red", "orange", "magenta"} & set(colours_alike((220, 50, 50))) == {"red", "orange"}
    assert "orange" in colours_alike((235, 210, 50)) and "white" not in colours_alike((235, 210, 50))
