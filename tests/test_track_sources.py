"""Track readers: the generic JSON, GOT-10k and LaSOT sequence folders, and the questions they support."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from core.errors import ConfigError, DataError
from core.formats.v2p import parse_options
from core.video_io import read_all_frames, write_mp4
from data_builders.cli_config import VpSftBuild
from data_builders.sources.tracks import load_generic_track, read_got10k, read_lasot, read_tracks
from data_builders.vp_sft import build_vp_sft, questions_from_track

W, H, N = 64, 48, 30


def _write_sequence(folder: Path, *, step: tuple[int, int], absent: set[int], frames_dir: str = "") -> list:
    """N frames of a 10x8 bright block moving ``step`` px per frame; gt boxes as ``x,y,w,h`` lines."""
    (folder / frames_dir).mkdir(parents=True, exist_ok=True)
    boxes = []
    for f in range(N):
        x, y = 4 + step[0] * f, 4 + step[1] * f
        image = np.full((H, W, 3), 40, dtype=np.uint8)
        if f not in absent:
            image[y : y + 8, x : x + 10] = (230, 60, 60)
        Image.fromarray(image).save(folder / frames_dir / f"{f + 1:08d}.jpg")
        boxes.append((x, y, 10, 8))
    (folder / "groundtruth.txt").write_text("".join(f"{x},{y},{w},{h}\n" for x, y, w, h in boxes))
    return boxes


def _got10k_sequence(root: Path, name: str, category: str, absent: set[int], step=(1, 0)) -> Path:
    folder = root / name
    _write_sequence(folder, step=step, absent=absent)
    (folder / "absence.label").write_text("".join(f"{int(f in absent)}\n" for f in range(N)))
    (folder / "meta_info.ini").write_text(
        f"[METAINFO]\nurl: https://example.org/v?t=1:2\nobject_class: {category}\nmotion_class: running\n"
    )
    return folder


def test_got10k_sequence_becomes_an_mp4_and_a_one_object_track(tmp_path: Path):
    _got10k_sequence(tmp_path / "train", "GOT-10k_Train_000001", "zebra", absent={10, 11, 12, 13})
    tracks, quarantined = read_got10k(tmp_path / "train", tmp_path / "videos")
    assert quarantined == []
    (track,) = tracks
    assert track["video_id"] == "GOT-10k_Train_000001" and track["source"] == "got10k"
    assert track["fps"] == 10.0 and track["num_frames"] == N and track["duration"] == 3.0
    assert track["exhaustive"] is False and (track["width"], track["height"]) == (W, H)
    (obj,) = track["objects"]
    assert obj["attributes"] == {"class": "zebra"}
    assert sorted(map(int, obj["boxes"])) == [f for f in range(N) if f not in {10, 11, 12, 13}]
    assert obj["boxes"]["2"] == [6.0, 4.0, 16.0, 12.0]  # x,y,w,h -> x0,y0,x1,y1
    frames = read_all_frames(track["video_path"])
    assert frames.shape == (N, H, W, 3)
    # The block is where the box says, and gone on absent frames.
    assert frames[2, 6:10, 8:14, 0].mean() > 180 and frames[11, :, :, 0].max() < 120


def test_lasot_sequence_is_subsampled_scaled_and_named_by_its_folder(tmp_path: Path):
    folder = tmp_path / "lasot" / "air_plane" / "air_plane-3"
    boxes = _write_sequence(folder, step=(0, 1), absent={20, 21, 22}, frames_dir="img")
    (folder / "full_occlusion.txt").write_text(",".join("1" if f in {20, 21} else "0" for f in range(N)))
    (folder / "out_of_view.txt").write_text(",".join("1" if f == 22 else "0" for f in range(N)))
    (folder / "nlp.txt").write_text("a plane flying")
    tracks, quarantined = read_lasot(tmp_path / "lasot", tmp_path / "videos", stride=2, max_side=32)
    (track,) = tracks
    assert not quarantined and track["fps"] == 15.0 and track["num_frames"] == N // 2
    assert (track["width"], track["height"]) == (32, 24)
    (obj,) = track["objects"]
    assert obj["attributes"] == {"class": "air plane"}
    assert "10" not in obj["boxes"] and "11" not in obj["boxes"]  # source frames 20 and 22
    x, y, w, h = boxes[4]  # kept frame 2 is source frame 4; boxes halve with the frame
    assert obj["boxes"]["2"] == [x / 2, y / 2, (x + w) / 2, (y + h) / 2]
    assert read_all_frames(track["video_path"]).shape == (N // 2, 24, 32, 3)


def test_bad_sequences_are_quarantined_with_the_reason(tmp_path: Path):
    root = tmp_path / "val"
    _got10k_sequence(root, "good", "car", absent=set())
    test_split = _got10k_sequence(root, "first_box_only", "car", absent=set())
    (test_split / "groundtruth.txt").write_text("1,2,3,4\n")
    short_labels = _got10k_sequence(root, "short_labels", "car", absent=set())
    (short_labels / "absence.label").write_text("0\n0\n")
    tracks, quarantined = read_got10k(root, tmp_path / "videos")
    assert [t["video_id"] for t in tracks] == ["good"]
    assert len(quarantined) == 2
    assert "1 boxes for 30 frames" in quarantined[0] and "absence.label" in quarantined[1]


def test_unknown_format_or_option_is_a_setting_error(tmp_path: Path):
    with pytest.raises(ConfigError, match="choose one of"):
        read_tracks("mot17", tmp_path, tmp_path)
    with pytest.raises(ConfigError, match="stride"):
        read_tracks("got10k", tmp_path, tmp_path, strides=2)


def test_generic_track_with_masks_and_defaults(tmp_path: Path):
    write_mp4(tmp_path / "videos" / "a.mp4", np.zeros((8, 32, 32, 3), np.uint8), 8.0)
    track = {
        "video_id": "a",
        "video_path": "videos/a.mp4",
        "fps": 8.0,
        "duration": 1.0,
        "width": 32,
        "height": 32,
        "objects": [
            {
                "id": 0,
                "attributes": {"class": "cup"},
                "boxes": {"0": [2, 2, 12, 12]},
                "masks": {"0": [[[2, 2], [12, 2], [7, 12]]]},
            }
        ],
    }
    (tmp_path / "a.json").write_text(json.dumps(track))
    loaded = load_generic_track(tmp_path / "a.json", tmp_path)
    assert loaded["video_path"] == str((tmp_path / "videos" / "a.mp4").resolve())
    assert loaded["num_frames"] == 8 and loaded["source"] == "synthetic" and loaded["exhaustive"] is True
    track["objects"][0]["masks"] = {"0": [[1, 2]]}
    (tmp_path / "a.json").write_text(json.dumps(track))
    with pytest.raises(DataError, match=r"a\.json.*objects\[0\]\.masks\['0'\]"):
        load_generic_track(tmp_path / "a.json", tmp_path)


def test_got10k_build_asks_only_what_one_annotated_object_supports(tmp_path: Path):
    root = tmp_path / "GOT-10k" / "train"
    # Moves right, hidden for 1 s in the middle (comes back); a second moves down; a third never hides.
    _got10k_sequence(root, "seq_a", "zebra", absent=set(range(12, 22)))
    _got10k_sequence(root, "seq_b", "car", absent=set(range(20, 30)), step=(0, 1))
    _got10k_sequence(root, "seq_c", "person", absent=set())
    cfg = VpSftBuild(world=str(root), out=str(tmp_path / "out"), questions_per_video=6, format="got10k")
    out = build_vp_sft(cfg)
    rows = [json.loads(line) for line in (out / "v2p" / "dataset_info.jsonl").read_text().splitlines()]
    kinds = Counter(r["category"] for r in rows)
    assert set(kinds) <= {3, 6, 7} and len(kinds) == 3, kinds  # direction, visibility, class only
    truth = {
        "seq_a": ("right", set(range(12, 22))),
        "seq_b": ("down", set(range(20, 30))),
        "seq_c": ("right", set()),
    }
    for row in rows:
        stem, options = parse_options(row["question"])
        answer = options[ord(row["answer"]) - ord("A")]
        direction, absent = truth[row["video_id"]]
        assert row["source"] == "got10k" and row["video_path"] == f"got10k/{row['video_id']}.mp4"
        if row["category"] == 3:
            assert answer == direction
        if row["category"] == 7:
            assert answer == {"seq_a": "zebra", "seq_b": "car", "seq_c": "person"}[row["video_id"]]
        if stem.startswith("After"):
            later = {f for f in absent if f > row["keyframe"]}
            gone_at_end = N - 1 in later
            expect = "not seen again" if gone_at_end else "comes back" if later else "stays in sight"
            assert expect in answer, (row["keyframe"], answer)
        if stem.startswith("Before"):
            earlier = {f for f in absent if f < row["keyframe"]}
            expect = (
                "for a while"
                if earlier and 0 not in earlier
                else "after the video starts"
                if earlier
                else "start"
            )
            assert expect in answer, (row["keyframe"], answer)
    info = json.loads((out / "build_info.json").read_text())
    assert info["source_format"] == "got10k" and info["videos"] == 3


def test_mask_contour_follows_the_tracks_polygon(tmp_path: Path):
    write_mp4(tmp_path / "videos" / "m.mp4", np.zeros((8, 32, 32, 3), np.uint8), 8.0)
    triangle = [[14, 2], [26, 26], [2, 26]]
    obj = {"id": 0, "attributes": {"class": "cup"}, "boxes": {str(f): [2, 2, 26, 26] for f in range(8)}}
    obj["masks"] = {str(f): [triangle] for f in range(8)}
    track = {
        "video_id": "m",
        "video_path": "videos/m.mp4",
        "fps": 8.0,
        "duration": 1.0,
        "width": 32,
        "height": 32,
    }
    (tmp_path / "m.json").write_text(json.dumps({**track, "objects": [obj]}))
    loaded = load_generic_track(tmp_path / "m.json", tmp_path)
    cfg = VpSftBuild(
        world=str(tmp_path),
        out=str(tmp_path / "out"),
        questions_per_video=1,
        shapes=["mask_contour"],
        kinds=["class"],
        colours=["white"],
        line_widths=[1],
        doodle_share=0.0,
    )
    vocab = {"class": ["cup", "mug", "vase"]}
    (row,) = questions_from_track(
        loaded, cfg, np.random.default_rng(0), out_root=tmp_path / "out", vocab=vocab
    )
    drawn = np.asarray(Image.open(tmp_path / "out" / "frames" / row["frame_path"])).max(axis=2)
    # The ring runs just outside the triangle: under its base, not in the box's top corners.
    assert drawn[27, 4] > 100 and drawn[27, 24] > 100 and drawn[3, 3] < 60 and drawn[3, 28] < 60
