"""A source dataset for the OVI-Train builder tests: ActivityNet-format captions of object videos (a closed
vocabulary of coloured shapes that enter, move and leave) plus one plain-caption video, with tiny mp4s."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from core.video_io import write_mp4
from data_builders.cli_config import OviTrainBuild

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


# --- realistic annotation files (the shapes and statistics of the real ones, made up) -------------------

PEOPLE = ("A man", "A woman", "A young boy", "A little girl", "A group of people", "An old woman")
PRONOUNS = {
    "A man": "He",
    "A young boy": "He",
    "A woman": "She",
    "A little girl": "She",
    "An old woman": "She",
}
ACTIONS = (
    "speaks to the camera",
    "plays the violin on a stage",
    "lifts a heavy barbell overhead",
    "mixes ingredients in a large bowl",
    "rides a bike down a dirt road",
    "throws a ball to a dog",
    "paints a fence in the back yard",
    "dances in a crowded room",
)
THINGS = (
    "The camera pans around the room",
    "A dog runs across the yard",
    "Text appears on the screen",
    "The crowd cheers loudly",
    "The credits roll over a black screen",
)


def _sentences(rng: np.random.Generator, subject: str | None, n: int) -> list[str]:
    """``n`` captions of one video: its subject's actions (each once, then "He then ..."), some scenery."""
    actions = [ACTIONS[i] for i in rng.permutation(len(ACTIONS))]
    sentences = []
    for step in range(n):
        if subject is None or rng.random() < 0.2:
            sentences.append(f"{THINGS[int(rng.integers(len(THINGS)))]}.")
        elif step and subject in PRONOUNS and rng.random() < 0.6:
            sentences.append(f"{PRONOUNS[subject]} then {actions[step % len(actions)]}.")
        else:
            sentences.append(f"{subject} {actions[step % len(actions)]}.")
    return sentences


def realistic_activitynet_video(rng: np.random.Generator, n_captions: int) -> dict:
    """One ActivityNet-Captions entry: a noisy duration (``70.28999999999999``), mostly sequential events
    that overlap by a few seconds or leave short gaps, sometimes one event spanning the whole video, and a
    last event ending at the rounded duration (beyond the noisy one by float noise)."""
    rounded = round(float(np.clip(rng.lognormal(4.6, 0.6), 10.0, 600.0)), 2)
    duration = float(np.nextafter(rounded, 0.0)) if rng.random() < 0.5 else rounded
    subject = PEOPLE[int(rng.integers(len(PEOPLE)))] if rng.random() < 0.85 else None
    whole = n_captions >= 3 and rng.random() < 0.15  # a first caption over the whole video
    inner = n_captions - whole
    cuts = np.sort(rng.uniform(0, rounded, size=inner - 1)) if inner > 1 else np.array([])
    bounds = [0.0, *cuts.tolist(), rounded]
    stamps = []
    for i in range(inner):
        start = bounds[i] - (rng.uniform(0, 3) if i and rng.random() < 0.6 else 0.0)
        end = bounds[i + 1] - (rng.uniform(0, 2) if i < inner - 1 and rng.random() < 0.3 else 0.0)
        start = round(max(0.0, start), 2)
        end = round(min(max(end, start + 0.5), rounded), 2) if i < inner - 1 else rounded
        stamps.append([round(min(start, end - 0.5), 2), end])
    if whole:
        stamps.insert(0, [0.0, rounded])
    return {"duration": duration, "timestamps": stamps, "sentences": _sentences(rng, subject, n_captions)}


def realistic_activitynet(
    n_videos: int, n_captions: int, seed: int = 0, bad_ends: int = 0, rounding_ends: int = 0
) -> dict:
    """An ActivityNet-Captions ``train.json``: ``n_videos`` entries, ``n_captions`` captions in all (2 or
    more a video, 3.7 on average at the real file's ratio); the last segment of ``bad_ends`` videos ends
    a second or more past the video (a real annotation error, not float noise), and that of the next
    ``rounding_ends`` videos one 0.01 s step past a float-noisy duration (``148.84`` for
    ``148.82999999999998``: the file's rounding, a segment to keep)."""
    rng = np.random.default_rng(seed)
    counts = 2 + rng.multinomial(n_captions - 2 * n_videos, [1 / n_videos] * n_videos)
    videos = {f"v_{i:011d}": realistic_activitynet_video(rng, int(k)) for i, k in enumerate(counts)}
    for key in list(videos)[:bad_ends]:
        videos[key]["timestamps"][-1][1] = round(videos[key]["duration"] + 1.5, 2)
    for key in list(videos)[bad_ends : bad_ends + rounding_ends]:
        rounded = round(videos[key]["duration"], 2)
        videos[key]["duration"] = float(np.nextafter(rounded, 0.0))
        videos[key]["timestamps"][-1][1] = round(rounded + 0.01, 2)
    return videos


QUERIES = (
    "A man is talking to the camera in his car.",
    "A woman cooks pasta in a small kitchen.",
    "Aerial footage of a city at night.",
    "Two girls are shopping for clothes at a mall.",
    "Food is being fried in a pan.",
    "A chef shows off a plate of sushi.",
    "People are walking on a busy street.",
    "A dog is playing in the snow.",
    "The family is eating dinner together.",
    "A boy plays a video game on his couch.",
)


def realistic_qvhighlights(n_queries: int, seed: int = 0) -> list[dict]:
    """QVHighlights ``highlight_train_release.jsonl`` lines: 150 s clips (a few shorter), mostly one query
    a clip (some two), each with one to three relevant windows (1.7 on average) on the 2 s clip grid,
    ending at the clip's end at times."""
    rng = np.random.default_rng(seed)
    lines, clip = [], 0
    while len(lines) < n_queries:
        duration = 150 if rng.random() < 0.9 else int(rng.integers(60, 149))
        vid = f"yt{clip:09d}_{clip * 150}.0_{clip * 150 + 150}.0"
        for _ in range(min(1 if rng.random() < 0.85 else 2, n_queries - len(lines))):
            windows, t = [], int(rng.integers(0, 20)) * 2
            for _ in range(int(rng.choice([1, 2, 3], p=[0.5, 0.3, 0.2]))):
                end = min(duration, t + int(rng.integers(2, 20)) * 2)
                if end <= t:
                    break
                windows.append([t, end])
                t = end + int(rng.integers(1, 15)) * 2
            query = QUERIES[int(rng.integers(len(QUERIES)))]
            lines.append(_qvh_line(len(lines), query, duration, vid, windows))
        clip += 1
    return lines


def _qvh_line(qid: int, query: str, duration: int, vid: str, windows: list[list[int]]) -> dict:
    clips = [c for s, e in windows for c in range(s // 2, e // 2)]
    return {
        "qid": qid,
        "query": query,
        "duration": duration,
        "vid": vid,
        "relevant_windows": windows,
        "relevant_clip_ids": clips,
        "saliency_scores": [[2, 3, 1]] * len(clips),
    }


def link_videos(videos: Path, names: list[str]) -> Path:
    """One tiny mp4, hard-linked as ``<name>.mp4`` for each name (real-scale builds without real videos)."""
    videos.mkdir(parents=True, exist_ok=True)
    first = videos / "_one.mp4"
    write_mp4(first, np.zeros((4, 32, 32, 3), dtype=np.uint8), fps=1.0)
    for name in names:
        target = videos / f"{name}.mp4"
        if not target.exists():
            os.link(first, target)
    first.unlink()
    return videos
