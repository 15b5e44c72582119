"""Visual-prompt video QA built from object tracks, in the V2P-Bench release format.

Used for SFT data and, on held-out scenes, for the synthetic V2P benchmark. Each question marks a
target object with a drawn prompt on one keyframe and refers to it only as "the object marked by
<prompt noun>": its attributes never appear in the question (V2P-Bench's rule), while other objects
may be named in words. Prompts take all 8 V2P shapes, several colours and line widths, and a
hand-drawn (doodle) look, all drawn from the build's seed.

Question kinds (dimension ids as in :data:`data_builders.v2p_format.DIMENSIONS`; ``category``
is our own kind code, the release leaves it undocumented), and what each needs from the track:

==========  ==========  ========  ====================================  ================================
kind        dimension   category  options                               needs
==========  ==========  ========  ====================================  ================================
colour      1 OA        1         colours                               a ``colour`` attribute
shape       1 OA        2         shapes                                a ``shape`` attribute
direction   3 OD        3         left / right / up / down              clear single-axis motion
count       10 GC       4         numbers                               an exhaustive track (all objects)
order       5 FT, 6 RT  5         before / after / at the same time     another object nameable in words
visibility  5 FT, 6 RT  6         stays / comes back / not seen again   nothing (asked when unambiguous)
class       1 OA        7         object categories                     a ``class`` attribute
==========  ==========  ========  ====================================  ================================

``visibility`` asks whether the target goes out of sight after (FT) or before (RT) the moment of the
prompt frame, from the frames where it has no box (GOT-10k's absence labels, LaSOT's occlusion and
out-of-view flags, or the frames the synthetic world leaves it out of). A one-object GOT-10k /
LaSOT track therefore gets direction, visibility and class questions; colour and shape questions
need an attribute those datasets do not have, so they are skipped, as are count and order.
"""

from __future__ import annotations

import re
import shutil
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from tqdm import tqdm

from core.errors import ConfigError, DataError, DecodeError
from core.files import atomic_path, crosstab_markdown, link_or_copy, save_samples, write_reports
from core.text_models import TextModel
from data_builders.cli_config import QuestionKind, VpSftBuild
from data_builders.qc import QcStep, make_blind_models, qc_markdown, run_qc
from data_builders.sources.tracks import TRACK_FORMATS, frames_visible, load_generic_track, read_tracks
from data_builders.v2p_format import DIMENSIONS, load_v2p_release, render_question, write_v2p_release
from data_builders.visual_prompts import (
    PROMPT_COLOURS,
    PROMPT_NOUNS,
    colours_alike,
    draw_prompt,
    polygon_mask,
    sample_style,
    scaled_width,
)

KINDS = tuple(kind.value for kind in QuestionKind)  # in the order of their category codes
_CATEGORY = {kind: i for i, kind in enumerate(KINDS, start=1)}
_DIRECTIONS = ("left", "right", "up", "down")
_ORDER = ("before", "after", "at the same time")
_AFTER = (
    "It stays in sight until the end of the video",
    "It goes out of sight and comes back later",
    "It goes out of sight and is not seen again",
)
_BEFORE = (
    "It is in sight from the start of the video",
    "It comes into sight after the video starts",
    "It goes out of sight for a while and comes back",
)
_MIN_GAP_S = 0.5  # shorter absences (or returns) are too brief to tell apart by eye: no question


def questions_from_tracks(
    track_file: str | Path, cfg: VpSftBuild, rng: np.random.Generator, *, out_root: str | Path
) -> list[dict[str, Any]]:
    """:func:`questions_from_track` for one generic track file, its video relative to ``cfg.world``."""
    return questions_from_track(load_generic_track(track_file, cfg.world), cfg, rng, out_root=out_root)


def questions_from_track(
    track: dict[str, Any],
    cfg: VpSftBuild,
    rng: np.random.Generator,
    *,
    out_root: str | Path,
    vocab: dict[str, list[str]] | None = None,
) -> list[dict[str, Any]]:
    """Make up to ``cfg.questions_per_video`` visual-prompt questions for one video and draw their frames.

    Writes ``<out_root>/frames/<source>/<qid>.jpg`` and links the video to
    ``<out_root>/videos/<source>/``.

    Args:
        track: an internal track (:mod:`data_builders.sources.tracks`).
        cfg: the shapes, kinds and prompt looks drawn from, and the questions wanted (fewer when the
            track supports fewer).
        rng: all randomness (target, kind, keyframe, prompt shape and style, option order).
        out_root: release root to write frames and videos under.
        vocab: ``{"colour": [...], "shape": [...], "class": [...]}`` option pools; defaults to this
            track's values.

    Returns:
        Release-format rows (plus ``id``, ``prompt_shape``, ``prompt_style``, ``keyframe`` and
        ``target_id``), options shuffled.
    """
    out_root, per_video = Path(out_root), cfg.questions_per_video
    objects = track["objects"]
    vocab = vocab or attribute_vocab([track])
    items, seen = [], set()
    for _ in range(6 * per_video):
        if len(items) == per_video:
            break
        target = objects[int(rng.integers(len(objects)))]
        usable = [k for k in cfg.kinds if _supports(k, target, track)]
        shape = _prompt_shape(target, cfg.shapes, rng)
        if not usable or shape is None:
            continue
        kind = usable[int(rng.integers(len(usable)))]
        keyframe = int(rng.choice(sorted(map(int, target["boxes"]))))
        item = _make_item(kind, target, track, PROMPT_NOUNS[shape], vocab, keyframe, rng)
        if item is None or (kind, target["id"], item["stem"], item["answer_text"]) in seen:
            continue
        seen.add((kind, target["id"], item["stem"], item["answer_text"]))
        items.append({**item, "kind": kind, "target": target, "shape": shape, "keyframe": keyframe})
    if not items:
        return []
    video = Path(track["video_path"])
    video_rel = f"{track['source']}/{track['video_id']}{video.suffix}"
    link_or_copy(video, out_root / "videos" / video_rel)
    frames = _draw_frames(video, track, items, out_root, cfg, rng)
    return [_row(track, item, video_rel, frame) for item, frame in zip(items, frames, strict=True)]


def attribute_vocab(tracks: Sequence[dict[str, Any]]) -> dict[str, list[str]]:
    """Every value of the ``colour``, ``shape`` and ``class`` attributes across ``tracks`` (option pools)."""
    values: dict[str, set[str]] = {"colour": set(), "shape": set(), "class": set()}
    for track in tracks:
        for obj in track["objects"]:
            for key, pool in values.items():
                if key in obj.get("attributes", {}):
                    pool.add(obj["attributes"][key])
    return {key: sorted(pool) for key, pool in values.items()}


def _supports(kind: str, target: dict[str, Any], track: dict[str, Any]) -> bool:
    """Whether the track's annotations can answer ``kind`` about ``target`` at all."""
    attributes = target.get("attributes", {})
    if kind in ("colour", "shape", "class"):
        return kind in attributes
    if kind == "count":
        return bool(track.get("exhaustive", True))
    if kind == "order":
        return len(track["objects"]) > 1
    return True


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z]+", text.lower()))


def _prompt_shape(target: dict[str, Any], shapes: Sequence[str], rng: np.random.Generator) -> str | None:
    # "the circle" (ellipse) would name a circle's shape: only nouns free of the target's words.
    banned = _words(" ".join(target.get("attributes", {}).values()))
    allowed = [s for s in shapes if not _words(PROMPT_NOUNS[s]) & banned]
    return str(allowed[int(rng.integers(len(allowed)))]) if allowed else None


def _make_item(
    kind: str,
    target: dict,
    track: dict,
    noun: str,
    vocab: dict[str, list[str]],
    keyframe: int,
    rng: np.random.Generator,
) -> dict[str, Any] | None:
    marked = f"the object marked by {noun}"
    attrs = target.get("attributes", {})
    if kind in ("colour", "shape", "class"):
        pool = [v for v in vocab.get(kind, []) if v != attrs[kind]]
        if not pool:
            return None
        stem = f"What is {marked}?" if kind == "class" else f"What {kind} is {marked}?"
        return _item(stem, attrs[kind], list(rng.permutation(pool)[:3]), 1, rng)
    if kind == "direction":
        direction = _direction(target, track)
        others = [d for d in _DIRECTIONS if d != direction]
        return (
            None
            if direction is None
            else _item(f"In which direction does {marked} move?", direction, others, 3, rng)
        )
    if kind == "count":
        return _count_item(marked, target, track["objects"], rng)
    if kind == "visibility":
        return _visibility_item(marked, target, track, keyframe, rng)
    return _order_item(marked, noun, target, track, rng)


def _item(stem: str, answer: str, distractors: list[str], dimension: int, rng: np.random.Generator) -> dict:
    options = [answer, *map(str, distractors)]
    order = rng.permutation(len(options))
    options = [options[i] for i in order]
    return {
        "stem": stem,
        "options": options,
        "answer": options.index(answer),
        "answer_text": answer,
        "dimension": dimension,
    }


def _direction(target: dict[str, Any], track: dict[str, Any]) -> str | None:
    """The dominant direction of on-screen motion, or None when it is small, diagonal or back-and-forth."""
    frames = sorted(target["boxes"], key=int)
    # Centres about every half second: box jitter on real tracks would otherwise inflate the path.
    step = max(1, round(float(track["fps"]) / 2))
    centres = np.array([_centre(target["boxes"][f]) for f in frames[::step] + frames[-1:]])
    dx, dy = centres[-1] - centres[0]
    along, across = max(abs(dx), abs(dy)), min(abs(dx), abs(dy))
    # Ask only about clearly visible, clearly single-axis motion (>= 8% of the frame's short side) ...
    if along < 0.08 * min(track["width"], track["height"]) or across * 2 > along:
        return None
    axis = 0 if abs(dx) > abs(dy) else 1
    # ... that mostly keeps going one way (the path along the axis at most 1.5 times the net move).
    if np.abs(np.diff(centres[:, axis])).sum() > 1.5 * along:
        return None
    if axis == 0:
        return "right" if dx > 0 else "left"
    return "down" if dy > 0 else "up"


def _centre(box: list[float]) -> tuple[float, float]:
    return (box[0] + box[2]) / 2, (box[1] + box[3]) / 2


def _count_item(marked: str, target: dict, objects: list[dict], rng: np.random.Generator) -> dict:
    same_shape = all("shape" in o.get("attributes", {}) for o in objects)
    if same_shape and rng.random() >= 0.5:
        stem = f"How many objects in the video have the same shape as {marked}, counting it too?"
        answer = sum(o["attributes"]["shape"] == target["attributes"]["shape"] for o in objects)
    else:
        stem = f"How many objects appear in the video in total, including {marked}?"
        answer = len(objects)
    low = int(rng.integers(max(1, answer - 3), answer + 1))
    distractors = [n for n in range(low, low + 4) if n != answer]
    return _item(stem, str(answer), distractors, 10, rng)


def _order_item(marked: str, noun: str, target: dict, track: dict, rng: np.random.Generator) -> dict | None:
    """Did the target first appear before/after another object, which is named in words?"""
    banned = _words(" ".join(target.get("attributes", {}).values())) | _words(noun)
    names = Counter(_name(o) for o in track["objects"])
    others = [
        o
        for o in track["objects"]
        if o is not target and _name(o) and names[_name(o)] == 1 and not _words(_name(o)) & banned
    ]
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


def _name(obj: dict[str, Any]) -> str | None:
    """How an object is named in words: "red circle", else its class, else None (not nameable)."""
    attrs = obj.get("attributes", {})
    if "colour" in attrs and "shape" in attrs:
        return f"{attrs['colour']} {attrs['shape']}"
    return attrs.get("class")


def _first_frame(obj: dict[str, Any]) -> int:
    return min(map(int, obj["boxes"]))


def _visibility_item(
    marked: str, target: dict, track: dict, keyframe: int, rng: np.random.Generator
) -> dict | None:
    """Does the target go out of sight after (FT) or before (RT) the prompt frame? None if unclear."""
    visible = frames_visible(track, target)
    min_run = max(2, round(_MIN_GAP_S * float(track["fps"])))
    if rng.random() < 0.5:
        pattern = _run_pattern(visible[keyframe:], min_run)
        answers = {(True,): 0, (True, False, True): 1, (True, False): 2}
        stem, options, dimension = (
            f"After the moment of the marked frame, what happens to {marked}?",
            _AFTER,
            5,
        )
    else:
        pattern = _run_pattern(visible[: keyframe + 1][::-1], min_run)  # read backwards from the keyframe
        answers = {(True,): 0, (True, False): 1, (True, False, True): 2}
        stem, options, dimension = (
            f"Before the moment of the marked frame, was {marked} always in sight?",
            _BEFORE,
            6,
        )
    if pattern not in answers:
        return None
    answer = options[answers[pattern]]
    return _item(stem, answer, [o for o in options if o != answer], dimension, rng)


def _run_pattern(visible: np.ndarray, min_run: int) -> tuple[bool, ...] | None:
    """Visible/absent runs from the keyframe on, e.g. ``(True, False, True)``; None if a run after the
    first is shorter than ``min_run`` frames, or more than one absence (too ambiguous to ask)."""
    edges = np.flatnonzero(np.diff(visible.astype(np.int8))) + 1
    bounds = [0, *edges.tolist(), len(visible)]
    runs = [(bool(visible[a]), b - a) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    if any(length < min_run for _, length in runs[1:]) or len(runs) > 3:
        return None
    return tuple(value for value, _ in runs)


def _draw_frames(
    video: Path, track: dict, items: list[dict], out_root: Path, cfg: VpSftBuild, rng: np.random.Generator
) -> list[str]:
    """Draw each item's prompt on its keyframe (where its target is visible); one decode per video."""
    import decord  # imported here: only frame drawing needs a decoder

    keyframes = sorted({item["keyframe"] for item in items})
    try:
        reader = decord.VideoReader(str(video), ctx=decord.cpu(0))
        if keyframes[-1] >= len(reader):
            raise DecodeError(str(video), f"has {len(reader)} frames; the track needs frame {keyframes[-1]}")
        by_index = dict(zip(keyframes, reader.get_batch(keyframes).asnumpy(), strict=True))
    except decord.DECORDError as err:
        raise DecodeError(str(video), str(err).splitlines()[0]) from None
    paths = []
    for k, item in enumerate(items):
        image, target = by_index[item["keyframe"]], item["target"]
        box = target["boxes"][str(item["keyframe"])]
        # A scribble or a dot lies on the object: never in its colour, nor in one too close to it.
        avoid = [target.get("attributes", {}).get("colour", ""), *colours_alike(_object_colour(image, box))]
        style = sample_style(
            rng, colours=cfg.colours, widths=cfg.line_widths, doodle_share=cfg.doodle_share, avoid=avoid
        )
        polygons = target.get("masks", {}).get(str(item["keyframe"]))
        mask = (
            polygon_mask(polygons, *image.shape[:2]) if polygons and item["shape"] == "mask_contour" else None
        )
        drawn = draw_prompt(
            image,
            item["shape"],
            box,
            colour=style.rgb,
            width=scaled_width(style.width, *image.shape[:2]),
            rng=rng,
            doodle=style.doodle,
            label=style.label,
            mask=mask,
        )
        item["style"] = {"colour": style.colour, "width": style.width, "doodle": style.doodle}
        relative = f"{track['source']}/{track['video_id']}_q{k:02d}.jpg"
        with atomic_path(out_root / "frames" / relative) as tmp:
            Image.fromarray(drawn).save(tmp, format="JPEG", quality=95)
        paths.append(relative)
    return paths


def _object_colour(image: np.ndarray, box: Sequence[float]) -> np.ndarray:
    """The median colour of a 5x5 grid over the box's inner half: mostly the object, little around it."""
    x0, y0, x1, y1 = box
    xs = np.clip(np.linspace(x0, x1, 9)[2:7], 0, image.shape[1] - 1).astype(int)
    ys = np.clip(np.linspace(y0, y1, 9)[2:7], 0, image.shape[0] - 1).astype(int)
    return np.median(image[np.ix_(ys, xs)].reshape(-1, 3), axis=0)


def _row(track: dict[str, Any], item: dict[str, Any], video_rel: str, frame: str) -> dict[str, Any]:
    return {
        "id": Path(frame).stem,
        "video_id": track["video_id"],
        "video_path": video_rel,
        "duration": track["duration"],
        "question": render_question(item["stem"], item["options"]),
        "answer": chr(ord("A") + item["answer"]),
        "source": track["source"],
        "frame_path": frame,
        "dimension": item["dimension"],
        "category": _CATEGORY[item["kind"]],
        # Not in the release format (the loader ignores unknown fields): kept for per-shape and
        # per-object analysis of the synthetic benchmark.
        "prompt_shape": item["shape"],
        "prompt_style": item["style"],
        "keyframe": item["keyframe"],
        "target_id": item["target"]["id"],
    }


def build_vp_sft(cfg: VpSftBuild, *, blind_models: Sequence[TextModel] | None = None) -> Path:
    """Build visual-prompt QA from the object tracks of ``cfg.world``, with quality control.

    Writes ``<out>/v2p/`` (release format), ``<out>/hf/`` (the samples :func:`load_v2p_release` makes of
    it, so training sees what the benchmark loader produces), ``<out>/stats.md`` and
    ``<out>/build_info.json`` (with every QC step's removals), and, for frame-folder sources, the encoded
    videos under ``<out>/source_videos/``.

    Args:
        cfg: the build's settings.
        blind_models: blind-filter models to use instead of those ``cfg.qc.blind`` names (tests).

    Returns:
        ``cfg.out`` as a path.

    Raises:
        ConfigError: unknown shapes, kinds, colours or format, or fewer than one question per video.
        DataError: no track files, a bad generic track, or no question survived.
    """
    _check_settings(cfg)
    if blind_models is None:
        blind_models = make_blind_models(cfg.qc.blind)  # a bad setting fails here, before any work
    world_root, out_dir = Path(cfg.world), Path(cfg.out)
    tracks, quarantined = read_tracks(cfg.format, world_root, out_dir / "source_videos", **cfg.source_options)
    vocab = attribute_vocab(tracks)
    rng = np.random.default_rng(cfg.seed)
    release, rows = out_dir / "v2p", []
    for track in tqdm(tracks, desc="vp questions", unit="video"):
        rows += questions_from_track(track, cfg, rng, out_root=release, vocab=vocab)
    made = len(rows)
    rows, steps = run_qc(rows, cfg.qc, rng, blind_models)
    if not rows:
        raise DataError(str(world_root), f"no question survived quality control (of {made} made)")
    _prune_media(release, rows)
    write_v2p_release(rows, release)
    save_samples(load_v2p_release(release), out_dir / "hf")
    info = {
        "seed": cfg.seed,
        "world_root": str(world_root),
        "source_format": str(cfg.format),
        "videos": len(tracks),
    }
    _write_reports(out_dir, rows, steps, quarantined, made=made, **info)
    return out_dir


def _check_settings(cfg: VpSftBuild) -> None:
    shapes, kinds, colours = [*map(str, cfg.shapes)], [*map(str, cfg.kinds)], list(cfg.colours)
    if set(shapes) - set(PROMPT_NOUNS) or not shapes:
        raise ConfigError(f"shapes must be a non-empty subset of {sorted(PROMPT_NOUNS)}, got {shapes}")
    if set(kinds) - set(KINDS) or not kinds:
        raise ConfigError(f"kinds must be a non-empty subset of {list(KINDS)}, got {kinds}")
    if set(colours) - set(PROMPT_COLOURS) or not colours:
        raise ConfigError(f"colours must be a non-empty subset of {sorted(PROMPT_COLOURS)}, got {colours}")
    if not cfg.line_widths or min(cfg.line_widths) < 1 or not 0 <= cfg.doodle_share <= 1:
        raise ConfigError(
            f"line widths must be >= 1 px and doodle share in [0, 1], got {list(cfg.line_widths)}, "
            f"{cfg.doodle_share}"
        )
    if cfg.questions_per_video < 1:
        raise ConfigError(f"questions_per_video must be at least 1, got {cfg.questions_per_video}")
    if cfg.format not in TRACK_FORMATS:
        raise ConfigError(f"unknown track format {cfg.format!r}; choose one of {sorted(TRACK_FORMATS)}")


def _prune_media(release: Path, rows: list[dict[str, Any]]) -> None:
    """Delete frames and video links no kept row refers to (QC removals, or an earlier build's leftovers)."""
    wanted = {release / "frames" / r["frame_path"] for r in rows} | {
        release / "videos" / r["video_path"] for r in rows
    }
    for folder in ("frames", "videos"):
        for path in sorted((release / folder).rglob("*")):
            if path.is_file() and path not in wanted:
                path.unlink()
        for path in sorted((release / folder).rglob("*"), reverse=True):
            if path.is_dir() and not any(path.iterdir()):
                shutil.rmtree(path)


def _write_reports(
    out_dir: Path, rows: list[dict], steps: list[QcStep], quarantined: list[str], *, made: int, **info: Any
) -> None:
    dims = [f"{r['dimension']} {DIMENSIONS[r['dimension']][0]}" for r in rows]
    table = crosstab_markdown(zip(dims, (r["prompt_shape"] for r in rows), strict=True), "dimension")
    letters = Counter(r["answer"] for r in rows)
    letter_line = ", ".join(f"{k} {letters[k]}" for k in sorted(letters))
    kinds = {kind: _CATEGORY[kind] for kind in KINDS}
    stats = (
        f"# Visual-prompt QA\n\n{len(rows)} questions kept of {made} made, from {info['videos']} videos.\n\n"
        f"Instances by dimension x prompt shape.\n\n{table}\nAnswer letters: {letter_line}\n\n"
        + qc_markdown(steps)
    )
    if quarantined:
        stats += f"\n## Quarantined inputs ({len(quarantined)})\n\n" + "".join(
            f"- {q}\n" for q in quarantined
        )
    styles = [r["prompt_style"] for r in rows]
    write_reports(
        out_dir,
        stats,
        {
            **info,
            "questions": len(rows),
            "questions_made": made,
            "by_dimension": dict(Counter(str(r["dimension"]) for r in rows)),
            "by_shape": dict(Counter(r["prompt_shape"] for r in rows)),
            "by_kind": {k: sum(r["category"] == c for r in rows) for k, c in kinds.items()},
            "by_colour": dict(Counter(s["colour"] for s in styles)),
            "doodled": sum(s["doodle"] for s in styles),
            "answer_letters": dict(letters),
            "qc": [step.report() for step in steps],
            "quarantined": quarantined,
        },
    )
