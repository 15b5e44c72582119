"""The synthetic world: scene invariants, mp4 round-trips, file formats and determinism by seed."""

from __future__ import annotations

import json
from pathlib import Path

import av
import numpy as np
import pytest

from core.video_io import read_all_frames, write_mp4
from data_builders.synthetic_world import (
    COLOURS,
    DIRECTION_PHRASES,
    box_at,
    build_world,
    make_scene,
    render_frames,
    scene_events,
)

N_VIDEOS, SEED = 3, 7
COLOUR_TOLERANCE = 24  # per channel, after yuv420p H.264 and back


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> tuple[Path, list]:
    root = tmp_path_factory.mktemp("world")
    return root, build_world(root, N_VIDEOS, SEED)


def random_scenes(n: int = 150) -> list:
    return [make_scene(f"v_{i}", np.random.default_rng([11, i])) for i in range(n)]


def box_centre(box: tuple[int, int, int, int]) -> tuple[int, int]:
    return (box[0] + box[2]) // 2, (box[1] + box[3]) // 2


def test_scenes_keep_objects_distinct_in_frame_and_apart():
    for scene in random_scenes():
        colours = [t.colour for t in scene.objects]
        assert len(set(colours)) == len(colours) and 1 <= len(colours) <= 3
        for f in range(scene.num_frames):
            boxes = [b for b in (box_at(t, f) for t in scene.objects) if b is not None]
            assert boxes, f"{scene.video_id}: nothing visible at frame {f}"
            for x0, y0, x1, y1 in boxes:
                assert 0 <= x0 < x1 <= scene.width and 0 <= y0 < y1 <= scene.height
            for i, a in enumerate(boxes):  # no occlusion: every box's pixels belong to one object
                for b in boxes[i + 1 :]:
                    assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1]


def test_objects_move_one_way_and_some_come_and_go():
    scenes = random_scenes()
    tracks = [t for s in scenes for t in s.objects]
    for track in tracks:
        dx, dy = track.velocity
        assert (dx == 0) != (dy == 0)
        assert track.direction in DIRECTION_PHRASES
        first, last = box_at(track, track.appear_frame), box_at(track, track.disappear_frame - 1)
        assert box_at(track, track.disappear_frame) is None
        assert abs(last[0] - first[0]) + abs(last[1] - first[1]) >= 5, "motion must be visible"
    assert {t.direction for t in tracks} == set(DIRECTION_PHRASES)
    assert any(t.appear_frame > 0 for t in tracks)
    assert any(t.disappear_frame < s.num_frames for s in scenes for t in s.objects)
    assert {len(s.objects) for s in scenes} == {1, 2, 3}


def test_rendered_colour_at_each_box_centre_is_the_objects_colour():
    scene = random_scenes(5)[-1]
    frames = render_frames(scene)
    assert frames.shape == (scene.num_frames, scene.height, scene.width, 3) and frames.dtype == np.uint8
    for track in scene.objects:
        for f in range(track.appear_frame, track.disappear_frame):
            x, y = box_centre(box_at(track, f))
            assert tuple(frames[f, y, x]) == COLOURS[track.colour]


def test_events_name_colour_shape_and_direction():
    for scene in random_scenes(30):
        events = scene_events(scene)
        assert len(events) >= len(scene.objects)
        assert events == sorted(events)
        for start, end, sentence in events:
            assert 0 <= start < end <= scene.duration
            assert any(
                t.colour in sentence and t.shape in sentence and DIRECTION_PHRASES[t.direction] in sentence
                for t in scene.objects
            ), sentence


def test_mp4_round_trip_keeps_object_colours(world):
    root, scenes = world
    for scene in scenes:
        frames = read_all_frames(root / "videos" / f"{scene.video_id}.mp4")
        assert frames.shape == (scene.num_frames, scene.height, scene.width, 3)
        for track in scene.objects:
            for f in range(track.appear_frame, track.disappear_frame):
                x, y = box_centre(box_at(track, f))
                error = np.abs(frames[f, y, x].astype(int) - COLOURS[track.colour]).max()
                assert error <= COLOUR_TOLERANCE, (scene.video_id, track.colour, f, frames[f, y, x])


def test_track_files_follow_the_generic_format(world):
    root, scenes = world
    for scene in scenes:
        record = json.loads((root / "tracks" / f"{scene.video_id}.json").read_text())
        assert record["video_id"].startswith(f"v_syn{SEED:02d}")
        assert (root / record["video_path"]).is_file()
        assert record["duration"] == pytest.approx(record["num_frames"] / record["fps"])
        for obj, track in zip(record["objects"], scene.objects, strict=True):
            assert obj["attributes"] == {"colour": track.colour, "shape": track.shape}
            assert sorted(map(int, obj["boxes"])) == list(range(track.appear_frame, track.disappear_frame))
            for frame, (x0, y0, x1, y1) in obj["boxes"].items():
                assert [x0, y0, x1, y1] == list(box_at(track, int(frame)))
                assert 0 <= x0 < x1 <= record["width"] and 0 <= y0 < y1 <= record["height"]


def test_captions_file_follows_activitynet_format(world):
    root, scenes = world
    captions = json.loads((root / "activitynet_captions.json").read_text())
    assert list(captions) == [s.video_id for s in scenes]
    for entry in captions.values():
        assert len(entry["timestamps"]) == len(entry["sentences"]) > 0
        for start, end in entry["timestamps"]:
            assert 0.0 <= start <= end <= entry["duration"]
        assert all(isinstance(s, str) and s for s in entry["sentences"])
    manifest = json.loads((root / "world.json").read_text())
    assert manifest["seed"] == SEED and manifest["n_videos"] == N_VIDEOS
    assert manifest["scene_kwargs"]["fps"] == 8.0


def test_same_seed_gives_identical_files_and_frames(world, tmp_path):
    root, _ = world
    build_world(tmp_path, N_VIDEOS, SEED)
    json_files = sorted(p.relative_to(root) for p in root.rglob("*.json"))
    assert json_files == sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.json"))
    for rel in json_files:
        assert (root / rel).read_bytes() == (tmp_path / rel).read_bytes(), rel
    for video in sorted((root / "videos").glob("*.mp4")):
        assert np.array_equal(read_all_frames(video), read_all_frames(tmp_path / "videos" / video.name))


def test_a_synthetic_build_is_the_same_for_the_same_seed(synthetic_build, tmp_path):
    """Every dataset of the build, rebuilt elsewhere from the same config, has the same rows."""
    from data_builders.build import build_synthetic
    from data_builders.cli_config import SyntheticDataConfig

    built = json.loads((synthetic_build.ovibench.parent / "build.json").read_text())["config"]
    again = build_synthetic(SyntheticDataConfig(**{**built, "root": str(tmp_path / "again")}))
    for first, second in (
        (synthetic_build.ovibench / "ovibench.jsonl", again.ovibench / "ovibench.jsonl"),
        (synthetic_build.ovi_train.parent / "ovibench.jsonl", again.ovi_train.parent / "ovibench.jsonl"),
        (synthetic_build.v2p_bench / "dataset_info.jsonl", again.v2p_bench / "dataset_info.jsonl"),
        (
            synthetic_build.v2p_sft.parent / "v2p" / "dataset_info.jsonl",
            again.v2p_sft.parent / "v2p" / "dataset_info.jsonl",
        ),
    ):
        assert first.read_text() == second.read_text(), first


def test_other_seed_gives_another_world(world, tmp_path):
    root, _ = world
    build_world(tmp_path, 2, SEED + 1, num_frames=16)
    theirs = json.loads((tmp_path / "activitynet_captions.json").read_text())
    ours = json.loads((root / "activitynet_captions.json").read_text())
    assert set(theirs).isdisjoint(ours)
    assert [e["sentences"] for e in theirs.values()] != [e["sentences"] for e in ours.values()][:2]


def test_unknown_scene_setting_is_rejected(tmp_path):
    with pytest.raises(TypeError, match="max_objects"):
        build_world(tmp_path, 1, 0, n_objects=2)


def test_write_mp4_is_atomic_and_keyframes_often(tmp_path):
    frames = np.zeros((20, 32, 64, 3), dtype=np.uint8)  # decord 0.6 cannot decode widths 48 or 72
    frames[:, :, :, 0] = np.arange(20, dtype=np.uint8)[:, None, None] * 10
    path = tmp_path / "nested" / "clip.mp4"
    write_mp4(path, frames, fps=10.0, gop=4)
    assert [p.name for p in path.parent.iterdir()] == ["clip.mp4"], "no temp file left behind"
    with av.open(str(path)) as container:
        assert container.streams.video[0].average_rate == 10
        keyframes = [i for i, frame in enumerate(container.decode(video=0)) if frame.key_frame]
    # x264 may place a keyframe early, never late: a seek decodes at most `gop` frames.
    assert keyframes[0] == 0 and len(keyframes) >= 5
    assert max(np.diff(keyframes)) <= 4
    assert len(read_all_frames(path)) == 20


def test_write_mp4_rejects_odd_sizes(tmp_path):
    with pytest.raises(ValueError, match="even"):
        write_mp4(tmp_path / "odd.mp4", np.zeros((2, 31, 32, 3), dtype=np.uint8), fps=8.0)
    assert not list(tmp_path.iterdir())
