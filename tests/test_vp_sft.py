"""Visual-prompt QA from object tracks: question rules, drawn frames, letter balance, the build."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from core.errors import ConfigError, DataError
from core.formats.v2p import load_v2p_release, parse_options, render_question
from core.video_io import read_all_frames, write_mp4
from data_builders.cli_config import QuestionKind, VpSftBuild
from data_builders.qc import balance_answer_letters
from data_builders.visual_prompts import SHAPES
from data_builders.vp_kinds import VP_KINDS
from data_builders.vp_sft import build_vp_sft, questions_from_tracks

SIZE, FRAMES, FPS, OBJ = 64, 24, 8.0, 10
RGB = {"red": (220, 50, 50), "green": (50, 190, 70), "blue": (60, 100, 235), "yellow": (235, 210, 50)}
STEP = {"left": (-1.5, 0), "right": (1.5, 0), "up": (0, -1.5), "down": (0, 1.5)}


def _object(i: int, colour: str, shape: str, direction: str, appear: int) -> dict:
    """A square moving 1.5 px/frame; object ``i`` keeps to its own lane across the motion."""
    dx, dy = STEP[direction]
    lane = 4 + 18 * i
    x0 = lane if dx == 0 else 42 if dx < 0 else 4
    y0 = lane if dy == 0 else 42 if dy < 0 else 4
    boxes = {}
    for f in range(appear, FRAMES):
        x, y = round(x0 + dx * (f - appear)), round(y0 + dy * (f - appear))
        boxes[str(f)] = [x, y, x + OBJ, y + OBJ]
    return {"id": i, "attributes": {"colour": colour, "shape": shape}, "boxes": boxes}


def _write_video(world: Path, video_id: str, objects: list[dict]) -> dict:
    frames = np.full((FRAMES, SIZE, SIZE, 3), 48, dtype=np.uint8)
    for obj in objects:
        for f, (x0, y0, x1, y1) in obj["boxes"].items():
            frames[int(f), y0:y1, x0:x1] = RGB[obj["attributes"]["colour"]]
    write_mp4(world / "videos" / f"{video_id}.mp4", frames, FPS)
    track = {
        "video_id": video_id,
        "video_path": f"videos/{video_id}.mp4",
        "fps": FPS,
        "num_frames": FRAMES,
        "width": SIZE,
        "height": SIZE,
        "duration": FRAMES / FPS,
        "objects": objects,
    }
    (world / "tracks").mkdir(parents=True, exist_ok=True)
    (world / "tracks" / f"{video_id}.json").write_text(json.dumps(track))
    return track


def _make_world(root: Path, n_videos: int, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    for v in range(n_videos):
        colours = rng.permutation(list(RGB))[: int(rng.integers(2, 4))]
        objects = [
            _object(
                i,
                str(c),
                str(rng.choice(["square", "circle", "triangle"])),
                str(rng.choice(list(STEP))),
                int(rng.choice([0, 0, 8])),
            )
            for i, c in enumerate(colours)
        ]
        _write_video(root, f"v{v:02d}", objects)
    return root


def _stem_words(question: str) -> set[str]:
    stem, _ = parse_options(question)
    return set(re.findall(r"[a-z]+", stem.lower()))


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _make_world(tmp_path_factory.mktemp("world"), n_videos=12)


def _build(world: Path, out: Path, **settings: Any) -> VpSftBuild:
    return VpSftBuild(world=str(world), out=str(out), **settings)


def _all_questions(world: Path, out: Path, seed: int = 1, **settings: Any) -> list[tuple[dict, dict]]:
    rng, cfg = np.random.default_rng(seed), _build(world, out, **settings)
    pairs = []
    for track_file in sorted((world / "tracks").glob("*.json")):
        track = json.loads(track_file.read_text())
        for row in questions_from_tracks(track_file, cfg, rng, out_root=out):
            pairs.append((row, track))
    return pairs


def test_questions_never_name_the_target_and_answers_are_true(world: Path, tmp_path: Path):
    pairs = _all_questions(world, tmp_path, questions_per_video=5)
    assert len(pairs) >= 40
    assert {r["dimension"] for r, _ in pairs} >= {1, 3, 10}
    for row, track in pairs:
        target = track["objects"][row["target_id"]]
        assert not _stem_words(row["question"]) & set(target["attributes"].values()), row["question"]
        assert "the object marked by" in row["question"]
        stem, options = parse_options(row["question"])
        answer = options[ord(row["answer"]) - ord("A")]
        if stem.startswith("What colour"):
            assert answer == target["attributes"]["colour"]
        if stem.startswith("In which direction"):
            first, last = (
                target["boxes"][k] for k in (min(target["boxes"], key=int), max(target["boxes"], key=int))
            )
            moved = np.subtract(last[:2], first[:2])
            truth = ("right" if moved[0] > 0 else "left") if moved[0] else ("down" if moved[1] > 0 else "up")
            assert answer == truth
        if stem.startswith("How many objects appear"):
            assert answer == str(len(track["objects"]))
        if "first appear" in stem:
            assert answer == _order_truth(stem, target, track["objects"])
        if "moment of the marked frame" in stem:
            assert answer == _visibility_truth(stem, target, row["keyframe"])
        assert 2 <= len(options) <= 4 and len(set(options)) == len(options)


def _order_truth(stem: str, target: dict, objects: list[dict]) -> str:
    """Before/after/same time, read from the boxes, for "Did X first appear ... as Y?"."""
    (other,) = [o for o in objects if f"the {o['attributes']['colour']} {o['attributes']['shape']}" in stem]
    first = {id(o): min(map(int, o["boxes"])) for o in (target, other)}
    a, b = (target, other) if stem.startswith("Did the object marked") else (other, target)
    if first[id(a)] == first[id(b)]:
        return "at the same time"
    return "before" if first[id(a)] < first[id(b)] else "after"


def _visibility_truth(stem: str, target: dict, keyframe: int) -> str:
    """The fixture's objects are visible from their appear frame to the end: they never leave."""
    if stem.startswith("After"):
        return "It stays in sight until the end of the video"
    appear = min(map(int, target["boxes"]))
    return (
        "It is in sight from the start of the video"
        if appear == 0
        else "It comes into sight after the video starts"
    )


def test_all_eight_shapes_in_several_styles_deterministically(world: Path, tmp_path: Path):
    pairs = _all_questions(world, tmp_path / "a", questions_per_video=6, shapes=list(SHAPES))
    again = _all_questions(world, tmp_path / "b", questions_per_video=6, shapes=list(SHAPES))
    assert [r for r, _ in pairs] == [r for r, _ in again]
    assert {r["prompt_shape"] for r, _ in pairs} == set(SHAPES)
    styles = [r["prompt_style"] for r, _ in pairs]
    assert len({s["colour"] for s in styles}) >= 4 and {s["width"] for s in styles} == {2, 3}
    assert 0 < sum(s["doodle"] for s in styles) < len(styles)
    for row, track in pairs:  # never a red box around a red object
        assert row["prompt_style"]["colour"] != track["objects"][row["target_id"]]["attributes"]["colour"]
    first = Image.open(tmp_path / "a" / "frames" / pairs[0][0]["frame_path"])
    assert np.array_equal(
        np.asarray(first), np.asarray(Image.open(tmp_path / "b" / "frames" / pairs[0][0]["frame_path"]))
    )


def test_prompt_noun_never_repeats_the_targets_shape(world: Path, tmp_path: Path):
    pairs = _all_questions(world, tmp_path, shapes=["ellipse", "rectangle"])
    circles = [r for r, t in pairs if t["objects"][r["target_id"]]["attributes"]["shape"] == "circle"]
    assert circles and all(r["prompt_shape"] == "rectangle" for r in circles)
    assert all("the circle" not in r["question"] for r in circles)


def test_frames_are_drawn_and_videos_linked(world: Path, tmp_path: Path):
    track_file = world / "tracks" / "v00.json"
    rows = questions_from_tracks(
        track_file, _build(world, tmp_path), np.random.default_rng(0), out_root=tmp_path
    )
    assert rows
    raw = read_all_frames(world / "videos" / "v00.mp4")
    for row in rows:
        image = np.asarray(Image.open(tmp_path / "frames" / row["frame_path"]))
        assert image.shape == (SIZE, SIZE, 3)
        # The prompt changes the keyframe well beyond JPEG noise.
        changed = np.abs(image.astype(int) - raw[row["keyframe"]].astype(int)).max(axis=2) > 80
        assert changed.sum() > 5, row["prompt_shape"]
        assert row["frame_path"].startswith("synthetic/") and row["video_path"] == "synthetic/v00.mp4"
    assert (tmp_path / "videos" / "synthetic" / "v00.mp4").stat().st_size == (
        world / "videos/v00.mp4"
    ).stat().st_size


def test_balance_answer_letters_within_three_points():
    rng = np.random.default_rng(0)
    rows = []
    for i in range(300):
        options = [f"option {j}" for j in range(3 if i % 4 == 0 else 4)]
        rows.append({"question": render_question(f"Q{i}?", options), "answer": "A"})
    balance_answer_letters(rows, rng)
    shares = Counter(r["answer"] for r in rows)
    for letter in "ABCD":
        assert abs(shares[letter] / len(rows) - 0.25) <= 0.03, shares
    for i, row in enumerate(rows):  # the right option moved with its letter
        _, options = parse_options(row["question"])
        assert options[ord(row["answer"]) - ord("A")] == "option 0", i


def test_build_vp_sft_writes_release_hf_and_reports(world: Path, tmp_path: Path):
    import datasets

    out = build_vp_sft(_build(world, tmp_path / "vp", seed=3, questions_per_video=4))
    samples = load_v2p_release(out / "v2p")
    assert len(samples) >= 36
    letters = Counter(s.meta["answer"] for s in samples)
    for letter in "ABCD":
        assert abs(letters[letter] / len(samples) - 0.25) <= 0.03, letters
    hf = datasets.load_from_disk(str(out / "hf"))
    assert hf.num_rows == len(samples) and hf[0] == samples[0].to_row()
    assert all(s.source == "synthetic" and s.task == "v2p" for s in samples)
    assert "| dimension |" in (out / "stats.md").read_text()
    info = json.loads((out / "build_info.json").read_text())
    assert info["seed"] == 3 and info["questions"] == len(samples) and info["world_root"] == str(world)
    assert set(info["by_kind"]) == set(VP_KINDS) and sum(info["by_kind"].values()) == len(samples)
    for name, count in info["by_kind"].items():  # counted by the category code each row carries
        assert count == sum(s.meta["category"] == VP_KINDS[name].category for s in samples)


def test_same_seed_same_questions(world: Path, tmp_path: Path):
    a = build_vp_sft(_build(world, tmp_path / "a", seed=5)) / "v2p" / "dataset_info.jsonl"
    b = build_vp_sft(_build(world, tmp_path / "b", seed=5)) / "v2p" / "dataset_info.jsonl"
    assert a.read_text() == b.read_text()


def test_bad_track_names_file_and_field(world: Path, tmp_path: Path):
    track = json.loads((world / "tracks" / "v00.json").read_text())
    track["objects"][1]["boxes"]["3"] = [5, 5, 2, 9]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(track))
    cfg = _build(world, tmp_path)
    with pytest.raises(DataError, match=r"bad\.json.*objects\[1\]\.boxes\['3'\]"):
        questions_from_tracks(bad, cfg, np.random.default_rng(0), out_root=tmp_path)
    del track["fps"]
    bad.write_text(json.dumps(track))
    with pytest.raises(DataError, match="field 'fps'"):
        questions_from_tracks(bad, cfg, np.random.default_rng(0), out_root=tmp_path)


def test_unknown_prompt_shape_is_a_setting_error(world: Path, tmp_path: Path):
    with pytest.raises(ConfigError, match="shapes"):
        build_vp_sft(_build(world, tmp_path / "out", shapes=["star"]))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("setting", "key"),
    [
        ({"kinds": []}, "kinds"),
        ({"line_widths": [0]}, "line_widths"),
        ({"doodle_share": 2.0}, "doodle_share"),
    ],
)
def test_bad_settings_name_their_key(world: Path, tmp_path: Path, setting: dict, key: str):
    with pytest.raises(ConfigError, match=key):
        build_vp_sft(_build(world, tmp_path / "out", **setting))


def test_a_question_kind_is_one_row_of_the_table():
    """The config's closed choice is the table's names in the table's order (the default draw order), and
    every kind has its own category code."""
    assert [kind.value for kind in QuestionKind] == list(VP_KINDS)
    assert all(name == kind.name for name, kind in VP_KINDS.items())
    assert sorted(kind.category for kind in VP_KINDS.values()) == list(range(1, len(VP_KINDS) + 1))
