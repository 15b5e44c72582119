"""Visual-prompt video QA built from object tracks, in the V2P-Bench release format.

Used for SFT data and, on held-out scenes, for the synthetic V2P benchmark. Each question marks a
target object with a drawn prompt on one keyframe and refers to it only as "the object marked by
<prompt noun>": its attributes never appear in the question (V2P-Bench's rule), while other objects
may be named in words. Prompts take all 8 V2P shapes, several colours and line widths, and a
hand-drawn (doodle) look, all drawn from the build's seed.

The question kinds, what each asks and what it needs from a track, are the rows of
:data:`data_builders.vp_kinds.VP_KINDS`; a build asks each kind only where the track supports it.
"""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from tqdm import tqdm

from core.errors import ConfigError, DataError, DecodeError
from core.files import atomic_path, crosstab_markdown, link_or_copy
from core.formats.v2p import DIMENSIONS, release_v2p, render_question
from core.text_models import TextModel
from core.vocab import PROMPT_NOUNS
from data_builders.cli_config import VpSftBuild
from data_builders.outputs import BuildReport, save_build
from data_builders.qc import QcStep, make_blind_models, qc_markdown, run_qc
from data_builders.sources.tracks import TRACK_FORMATS, load_generic_track, read_tracks
from data_builders.visual_prompts import (
    PROMPT_COLOURS,
    colours_alike,
    draw_prompt,
    polygon_mask,
    sample_style,
    scaled_width,
)
from data_builders.vp_kinds import VP_KINDS, Asked, word_set


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
        usable = [k for k in cfg.kinds if VP_KINDS[k].supports(target, track)]
        shape = _prompt_shape(target, cfg.shapes, rng)
        if not usable or shape is None:
            continue
        kind = usable[int(rng.integers(len(usable)))]
        keyframe = int(rng.choice(sorted(map(int, target["boxes"]))))
        item = VP_KINDS[kind].make(Asked(target, track, PROMPT_NOUNS[shape], keyframe, vocab), rng)
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


def _prompt_shape(target: dict[str, Any], shapes: Sequence[str], rng: np.random.Generator) -> str | None:
    # "the circle" (ellipse) would name a circle's shape: only nouns free of the target's words.
    banned = word_set(" ".join(target.get("attributes", {}).values()))
    allowed = [s for s in shapes if not word_set(PROMPT_NOUNS[s]) & banned]
    return str(allowed[int(rng.integers(len(allowed)))]) if allowed else None


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
        "category": VP_KINDS[item["kind"]].category,
        # Not in the release format (the loader ignores unknown fields): kept for per-shape and
        # per-object analysis of the synthetic benchmark.
        "prompt_shape": item["shape"],
        "prompt_style": item["style"],
        "keyframe": item["keyframe"],
        "target_id": item["target"]["id"],
    }


def build_vp_sft(cfg: VpSftBuild, *, blind_models: Sequence[TextModel] | None = None) -> Path:
    """Build visual-prompt QA from the object tracks of ``cfg.world``, with quality control.

    Writes ``<out>/v2p/`` (release format), ``<out>/hf/`` (the samples the benchmark loader makes of it,
    :func:`~core.formats.v2p.release_v2p`, so training sees what it produces), ``<out>/stats.md`` and
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
    samples = release_v2p(rows, release)
    info = {
        "seed": cfg.seed,
        "world_root": str(world_root),
        "source_format": str(cfg.format),
        "videos": len(tracks),
    }
    return save_build(out_dir, samples, _report(rows, steps, quarantined, made=made, **info))


def _check_settings(cfg: VpSftBuild) -> None:
    shapes, kinds, colours = [*map(str, cfg.shapes)], [*map(str, cfg.kinds)], list(cfg.colours)
    if set(shapes) - set(PROMPT_NOUNS) or not shapes:
        raise ConfigError(f"shapes must be a non-empty subset of {sorted(PROMPT_NOUNS)}, got {shapes}")
    if set(kinds) - set(VP_KINDS) or not kinds:
        raise ConfigError(f"kinds must be a non-empty subset of {list(VP_KINDS)}, got {kinds}")
    if set(colours) - set(PROMPT_COLOURS) or not colours:
        raise ConfigError(f"colours must be a non-empty subset of {sorted(PROMPT_COLOURS)}, got {colours}")
    if not cfg.line_widths or min(cfg.line_widths) < 1 or not 0 <= cfg.doodle_share <= 1:
        raise ConfigError(
            f"line_widths must be non-empty and >= 1 px and doodle_share in [0, 1], got "
            f"{list(cfg.line_widths)}, {cfg.doodle_share}"
        )
    if cfg.questions_per_video < 1:
        raise ConfigError(f"questions_per_video must be at least 1, got {cfg.questions_per_video}")
    if cfg.format not in TRACK_FORMATS:
        raise ConfigError(f"format must be a track format of {sorted(TRACK_FORMATS)}, got {cfg.format!r}")


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


def _report(
    rows: list[dict], steps: list[QcStep], quarantined: list[str], *, made: int, **info: Any
) -> BuildReport:
    dims = [f"{r['dimension']} {DIMENSIONS[r['dimension']][0]}" for r in rows]
    table = crosstab_markdown(zip(dims, (r["prompt_shape"] for r in rows), strict=True), "dimension")
    letters = Counter(r["answer"] for r in rows)
    letter_line = ", ".join(f"{k} {letters[k]}" for k in sorted(letters))
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
    return BuildReport(
        stats,
        {
            **info,
            "questions": len(rows),
            "questions_made": made,
            "by_dimension": dict(Counter(str(r["dimension"]) for r in rows)),
            "by_shape": dict(Counter(r["prompt_shape"] for r in rows)),
            "by_kind": {k.name: sum(r["category"] == k.category for r in rows) for k in VP_KINDS.values()},
            "by_colour": dict(Counter(s["colour"] for s in styles)),
            "doodled": sum(s["doodle"] for s in styles),
            "answer_letters": dict(letters),
            "qc": [step.report() for step in steps],
            "quarantined": quarantined,
        },
    )
