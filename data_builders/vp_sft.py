"""Visual-prompt video QA built from object tracks, in the V2P-Bench release format.

Used for SFT data and, on held-out scenes, for the synthetic V2P benchmark. Each question marks a
target object with a drawn prompt on one keyframe and refers to it only as "the object marked by
<prompt noun>": its colour and shape never appear in the question (V2P-Bench's rule), while other
objects may be named in words.

Question kinds (dimension ids as in :data:`data_builders.v2p_format.DIMENSIONS`; ``category``
is our own kind code, the release leaves it undocumented):

====================  ==========  ========  ===========================================
kind                  dimension   category  options
====================  ==========  ========  ===========================================
colour                1 OA        1         colours
shape                 1 OA        2         shapes
direction             3 OD        3         left / right / up / down
count                 10 GC       4         numbers
order                 5 FT, 6 RT  5         before / after / at the same time
====================  ==========  ========  ===========================================
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from tqdm import tqdm

from data_builders.checks import is_list_of, is_number
from data_builders.errors import DataError, DecodeError, SettingError
from data_builders.files import (
    crosstab_markdown,
    link_or_copy,
    read_json_object,
    save_samples,
    write_reports,
)
from data_builders.v2p_format import (
    DIMENSIONS,
    load_v2p_release,
    parse_options,
    render_question,
    write_v2p_release,
)
from data_builders.visual_prompts import PROMPT_NOUNS, draw_prompt

DEFAULT_SHAPES = ("rectangle", "ellipse", "arrow", "point")
KINDS = ("colour", "shape", "direction", "count", "order")
_CATEGORY = {kind: i for i, kind in enumerate(KINDS, start=1)}
_DIRECTIONS = ("left", "right", "up", "down")
_ORDER = ("before", "after", "at the same time")
_TRACK_FIELDS = ("video_id", "video_path", "fps", "duration", "width", "height", "objects")


def load_track(path: Path) -> dict[str, Any]:
    """Read and check one object-track JSON file.

    Raises:
        DataError: naming the file and the bad field.
    """
    track = read_json_object(path, "track")
    for name in _TRACK_FIELDS:
        if name not in track:
            raise DataError(str(path), "missing", field=name)
    if not isinstance(track["objects"], list) or not track["objects"]:
        raise DataError(str(path), "expected a non-empty list", field="objects")
    for i, obj in enumerate(track["objects"]):
        attributes, boxes = obj.get("attributes"), obj.get("boxes")
        if not isinstance(attributes, dict) or not {"colour", "shape"} <= attributes.keys():
            raise DataError(str(path), "needs colour and shape", field=f"objects[{i}].attributes")
        if not isinstance(boxes, dict) or not boxes:
            raise DataError(str(path), "expected a non-empty {frame: box} map", field=f"objects[{i}].boxes")
        for frame, box in boxes.items():
            if not (frame.isdigit() and _valid_box(box)):
                raise DataError(str(path), f"bad box {box!r}", field=f"objects[{i}].boxes[{frame!r}]")
    return track


def _valid_box(box: Any) -> bool:
    return is_list_of(box, is_number, 4) and box[2] > box[0] and box[3] > box[1]


def questions_from_tracks(
    track_file: str | Path,
    world_root: str | Path,
    rng: np.random.Generator,
    *,
    out_root: str | Path,
    shapes: Sequence[str] = DEFAULT_SHAPES,
    per_video: int = 4,
    vocab: dict[str, list[str]] | None = None,
) -> list[dict[str, Any]]:
    """Make up to ``per_video`` visual-prompt questions for one video and draw their frames.

    Writes ``<out_root>/frames/synthetic/<qid>.jpg`` and links the video to
    ``<out_root>/videos/synthetic/``.

    Args:
        track_file: object-track JSON of the video.
        world_root: folder the track's ``video_path`` is relative to.
        rng: all randomness (target, keyframe, prompt shape, option order).
        out_root: release root to write frames and videos under.
        shapes: prompt shapes to draw from.
        per_video: questions wanted; fewer when the track supports fewer.
        vocab: ``{"colour": [...], "shape": [...]}`` option pools; defaults to this track's values.

    Returns:
        Release-format rows (plus ``id``, ``prompt_shape`` and ``target_id``), options shuffled.
    """
    track_file, out_root = Path(track_file), Path(out_root)
    track = load_track(track_file)
    video = Path(world_root) / track["video_path"]
    if not video.is_file():
        raise DataError(str(track_file), f"video not found: {video}", field="video_path")
    objects = track["objects"]
    vocab = vocab or {k: sorted({o["attributes"][k] for o in objects}) for k in ("colour", "shape")}
    items, seen = [], set()
    for _ in range(6 * per_video):
        if len(items) == per_video:
            break
        target = objects[int(rng.integers(len(objects)))]
        kind = KINDS[int(rng.integers(len(KINDS)))]
        shape = _prompt_shape(target, shapes, rng)
        item = _make_item(kind, target, track, PROMPT_NOUNS[shape], vocab, rng) if shape else None
        if item is None or (kind, target["id"], item["stem"]) in seen:
            continue
        seen.add((kind, target["id"], item["stem"]))
        items.append({**item, "kind": kind, "target": target, "shape": shape})
    if not items:
        return []
    video_rel = f"synthetic/{track['video_id']}{video.suffix}"
    link_or_copy(video, out_root / "videos" / video_rel)
    frames = _draw_frames(video, track, items, out_root, rng)
    return [_row(track, item, video_rel, frame) for item, frame in zip(items, frames, strict=True)]


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z]+", text.lower()))


def _prompt_shape(target: dict[str, Any], shapes: Sequence[str], rng: np.random.Generator) -> str | None:
    # "the circle" (ellipse) would name a circle's shape: only nouns free of the target's words.
    banned = _words(" ".join(target["attributes"].values()))
    allowed = [s for s in shapes if not _words(PROMPT_NOUNS[s]) & banned]
    return str(allowed[int(rng.integers(len(allowed)))]) if allowed else None


def _make_item(
    kind: str, target: dict, track: dict, noun: str, vocab: dict[str, list[str]], rng: np.random.Generator
) -> dict[str, Any] | None:
    marked = f"the object marked by {noun}"
    attrs = target["attributes"]
    if kind in ("colour", "shape"):
        pool = [v for v in vocab[kind] if v != attrs[kind]]
        if not pool:
            return None
        distractors = list(rng.permutation(pool)[:3])
        return _item(f"What {kind} is {marked}?", attrs[kind], distractors, 1, rng)
    if kind == "direction":
        direction = _direction(target, track)
        others = [d for d in _DIRECTIONS if d != direction]
        if direction is None:
            return None
        return _item(f"In which direction does {marked} move?", direction, others, 3, rng)
    if kind == "count":
        return _count_item(marked, target, track["objects"], rng)
    return _order_item(marked, noun, target, track, rng)


def _item(stem: str, answer: str, distractors: list[str], dimension: int, rng: np.random.Generator) -> dict:
    options = [answer, *map(str, distractors)]
    order = rng.permutation(len(options))
    options = [options[i] for i in order]
    return {"stem": stem, "options": options, "answer": options.index(answer), "dimension": dimension}


def _direction(target: dict[str, Any], track: dict[str, Any]) -> str | None:
    """The dominant direction of motion, or None when the motion is too small or diagonal."""
    frames = sorted(target["boxes"], key=int)
    (a0, b0, a1, b1), (c0, d0, c1, d1) = target["boxes"][frames[0]], target["boxes"][frames[-1]]
    dx, dy = (c0 + c1 - a0 - a1) / 2, (d0 + d1 - b0 - b1) / 2
    along, across = max(abs(dx), abs(dy)), min(abs(dx), abs(dy))
    # Ask only about clearly visible, clearly single-axis motion (>= 8% of the frame's short side).
    if along < 0.08 * min(track["width"], track["height"]) or across * 2 > along:
        return None
    if abs(dx) > abs(dy):
        return "right" if dx > 0 else "left"
    return "down" if dy > 0 else "up"


def _count_item(marked: str, target: dict, objects: list[dict], rng: np.random.Generator) -> dict:
    if rng.random() < 0.5:
        stem = f"How many objects appear in the video in total, including {marked}?"
        answer = len(objects)
    else:
        stem = f"How many objects in the video have the same shape as {marked}, counting it too?"
        answer = sum(o["attributes"]["shape"] == target["attributes"]["shape"] for o in objects)
    low = int(rng.integers(max(1, answer - 3), answer + 1))
    distractors = [n for n in range(low, low + 4) if n != answer]
    return _item(stem, str(answer), distractors, 10, rng)


def _order_item(marked: str, noun: str, target: dict, track: dict, rng: np.random.Generator) -> dict | None:
    """Did the target first appear before/after another object, which is named in words?"""
    banned = _words(" ".join(target["attributes"].values())) | _words(noun)
    names = Counter(_name(o) for o in track["objects"])
    others = [o for o in track["objects"] if names[_name(o)] == 1 and not _words(_name(o)) & banned]
    if not others:
        return None
    other = others[int(rng.integers(len(others)))]
    gap = (_first_frame(target) - _first_frame(other)) / float(track["fps"])
    if 0 < abs(gap) < 0.5:  # too close to tell apart by eye
        return None
    ask = "Did {} first appear before, after or at the same time as {}?"
    if rng.random() < 0.5:  # forward: the target relative to the other
        stem, dimension, sign = ask.format(marked, f"the {_name(other)}"), 5, 1
    else:  # reverse: the other relative to the target
        stem, dimension, sign = ask.format(f"the {_name(other)}", marked), 6, -1
    answer = _ORDER[2] if gap == 0 else _ORDER[0] if sign * gap < 0 else _ORDER[1]
    return _item(stem, answer, [o for o in _ORDER if o != answer], dimension, rng)


def _name(obj: dict[str, Any]) -> str:
    return f"{obj['attributes']['colour']} {obj['attributes']['shape']}"


def _first_frame(obj: dict[str, Any]) -> int:
    return min(map(int, obj["boxes"]))


def _draw_frames(
    video: Path, track: dict, items: list[dict], out_root: Path, rng: np.random.Generator
) -> list[str]:
    """Draw each item's prompt on a random frame where its target is visible; one decode per video."""
    import decord  # imported here: only frame drawing needs a decoder

    keyframes = [int(rng.choice(sorted(map(int, item["target"]["boxes"])))) for item in items]
    try:
        reader = decord.VideoReader(str(video), ctx=decord.cpu(0))
        if max(keyframes) >= len(reader):
            raise DecodeError(str(video), f"has {len(reader)} frames; the track needs frame {max(keyframes)}")
        images = reader.get_batch(sorted(set(keyframes))).asnumpy()
    except decord.DECORDError as err:
        raise DecodeError(str(video), str(err).splitlines()[0]) from None
    by_index = dict(zip(sorted(set(keyframes)), images, strict=True))
    paths = []
    for k, (item, index) in enumerate(zip(items, keyframes, strict=True)):
        colour = tuple(int(c) for c in rng.integers(230, 256, size=3))  # white-ish, visible on any object
        box = item["target"]["boxes"][str(index)]
        drawn = draw_prompt(by_index[index], item["shape"], box, colour=colour, width=2, rng=rng)
        relative = f"synthetic/{track['video_id']}_q{k:02d}.jpg"
        (out_root / "frames" / relative).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(drawn).save(out_root / "frames" / relative, quality=95)
        paths.append(relative)
    return paths


def _row(track: dict[str, Any], item: dict[str, Any], video_rel: str, frame: str) -> dict[str, Any]:
    return {
        "id": Path(frame).stem,
        "video_id": track["video_id"],
        "video_path": video_rel,
        "duration": track["duration"],
        "question": render_question(item["stem"], item["options"]),
        "answer": chr(ord("A") + item["answer"]),
        "source": "synthetic",
        "frame_path": frame,
        "dimension": item["dimension"],
        "category": _CATEGORY[item["kind"]],
        # Not in the release format (the loader ignores unknown fields): kept for per-shape and
        # per-object analysis of the synthetic benchmark.
        "prompt_shape": item["shape"],
        "target_id": item["target"]["id"],
    }


def balance_answer_letters(rows: list[dict[str, Any]], rng: np.random.Generator) -> None:
    """Move each row's answer so letters are used about equally (in place).

    Rows with fewer options go first (they cannot use the late letters); each then takes the least
    used letter it can, ties broken at random, keeping the order of its other options.
    """
    counts: Counter[str] = Counter()
    parsed = [parse_options(row["question"]) for row in rows]
    order = sorted(range(len(rows)), key=lambda i: (len(parsed[i][1]), rng.random()))
    for i in order:
        stem, options = parsed[i]
        correct = options.pop(ord(rows[i]["answer"]) - ord("A"))
        letters = [chr(ord("A") + j) for j in range(len(options) + 1)]
        fewest = min(counts[letter] for letter in letters)
        letter = str(rng.choice([x for x in letters if counts[x] == fewest]))
        options.insert(ord(letter) - ord("A"), correct)
        rows[i]["question"], rows[i]["answer"] = render_question(stem, options), letter
        counts[letter] += 1


def build_vp_sft(
    world_root: str | Path,
    out_dir: str | Path,
    *,
    seed: int,
    questions_per_video: int = 4,
    shapes: Sequence[str] = DEFAULT_SHAPES,
) -> Path:
    """Build visual-prompt QA from ``<world_root>/tracks/*.json``.

    Writes ``out_dir/v2p/`` (release format), ``out_dir/hf/`` (the samples
    :func:`load_v2p_release` makes of it, so training sees what the benchmark loader produces),
    ``out_dir/stats.md`` and ``out_dir/build_info.json``.

    Returns:
        ``out_dir``.

    Raises:
        SettingError: unknown prompt shapes or fewer than one question per video.
        DataError: no track files, or a bad track.
    """
    _check_settings(shapes, questions_per_video)
    world_root, out_dir = Path(world_root), Path(out_dir)
    track_files = sorted((world_root / "tracks").glob("*.json"))
    if not track_files:
        raise DataError(str(world_root / "tracks"), "no object-track files (*.json)")
    tracks = [load_track(f) for f in track_files]
    vocab = {
        k: sorted({o["attributes"][k] for t in tracks for o in t["objects"]}) for k in ("colour", "shape")
    }
    rng = np.random.default_rng(seed)
    release, rows = out_dir / "v2p", []
    for track_file in tqdm(track_files, desc="vp questions", unit="video"):
        rows += questions_from_tracks(
            track_file,
            world_root,
            rng,
            out_root=release,
            shapes=shapes,
            per_video=questions_per_video,
            vocab=vocab,
        )
    balance_answer_letters(rows, rng)
    write_v2p_release(rows, release)
    save_samples(load_v2p_release(release), out_dir / "hf")
    _write_reports(out_dir, rows, seed=seed, world_root=world_root, n_videos=len(track_files))
    return out_dir


def _check_settings(shapes: Sequence[str], questions_per_video: int) -> None:
    unknown = sorted(set(shapes) - set(PROMPT_NOUNS))
    if unknown or not shapes:
        raise SettingError(f"shapes must be a non-empty subset of {sorted(PROMPT_NOUNS)}, got {list(shapes)}")
    if questions_per_video < 1:
        raise SettingError(f"questions_per_video must be at least 1, got {questions_per_video}")


def _write_reports(out_dir: Path, rows: list[dict], *, seed: int, world_root: Path, n_videos: int) -> None:
    dims = [f"{r['dimension']} {DIMENSIONS[r['dimension']][0]}" for r in rows]
    table = crosstab_markdown(zip(dims, (r["prompt_shape"] for r in rows), strict=True), "dimension")
    letters = Counter(r["answer"] for r in rows)
    letter_line = ", ".join(f"{k} {letters[k]}" for k in sorted(letters))
    stats = f"# Visual-prompt QA\n\nInstances by dimension x prompt shape.\n\n{table}\n"
    info = {
        "seed": seed,
        "world_root": str(world_root),
        "videos": n_videos,
        "questions": len(rows),
        "by_dimension": dict(Counter(str(r["dimension"]) for r in rows)),
        "by_shape": dict(Counter(r["prompt_shape"] for r in rows)),
        "answer_letters": dict(letters),
    }
    write_reports(out_dir, stats + f"Answer letters: {letter_line}\n", info)
