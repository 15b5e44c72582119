"""A synthetic world of moving coloured shapes whose ground truth is known exactly.

Videos, per-object box tracks and ActivityNet-style dense captions all come from the same ground
truth, so every later stage (questions, prompts, training, scoring) can be checked end to end.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw
from tqdm import tqdm

from core.files import write_json_atomic
from core.video_io import write_mp4

COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 50, 50),
    "green": (50, 190, 70),
    "blue": (60, 100, 235),
    "yellow": (235, 210, 50),
}
BACKGROUND = (48, 48, 48)
SHAPES = ("square", "circle", "triangle")
DIRECTIONS: dict[str, tuple[int, int]] = {"left": (-1, 0), "right": (1, 0), "up": (0, -1), "down": (0, 1)}
DIRECTION_PHRASES = {"left": "to the left", "right": "to the right", "up": "up", "down": "down"}

_MARGIN = 2  # px kept free at the frame border
_GAP = 2  # px kept free between objects so no object ever occludes another
_EVENT_S = 1.0  # length of the short "enters"/"leaves"/"crosses" caption segments


@dataclass(frozen=True)
class ObjectTrack:
    """One object moving in a straight line at constant speed.

    Attributes:
        start_xy: Top-left corner of the object's ``size``-square box at ``appear_frame``.
        velocity: ``(dx, dy)`` px per frame; exactly one component is non-zero.
        disappear_frame: First frame the object is gone (exclusive end).
    """

    id: int
    colour: str
    shape: str
    size: int
    start_xy: tuple[float, float]
    velocity: tuple[float, float]
    appear_frame: int
    disappear_frame: int

    @property
    def direction(self) -> str:
        """``"left"``, ``"right"``, ``"up"`` or ``"down"``."""
        dx, dy = self.velocity
        return next(name for name, (ux, uy) in DIRECTIONS.items() if ux * dx + uy * dy > 0)

    @property
    def name(self) -> str:
        """Colour and shape, e.g. ``"red circle"``."""
        return f"{self.colour} {self.shape}"


@dataclass(frozen=True)
class Scene:
    """One synthetic video's ground truth."""

    video_id: str
    fps: float
    num_frames: int
    width: int
    height: int
    objects: list[ObjectTrack]

    @property
    def duration(self) -> float:
        """Length in seconds."""
        return self.num_frames / self.fps


def make_scene(
    video_id: str,
    rng: np.random.Generator,
    *,
    width: int = 112,
    height: int = 112,
    fps: float = 8.0,
    num_frames: int = 48,
    max_objects: int = 3,
) -> Scene:
    """Sample a scene: distinct-coloured objects that stay in frame and never overlap.

    Args:
        video_id: Id to give the scene.
        rng: Source of all randomness; the same generator state gives the same scene.
        width, height: Frame size in px (even, for H.264).
        fps: Frame rate.
        num_frames: Video length in frames.
        max_objects: At most this many objects (1..len(COLOURS)).

    Returns:
        The scene; at least one object is visible at every frame.
    """
    if not 1 <= max_objects <= len(COLOURS):
        raise ValueError(f"max_objects must be in 1..{len(COLOURS)}, got {max_objects}")
    if num_frames < 8 or min(width, height) < 32 or width % 2 or height % 2:
        raise ValueError(f"need >= 8 frames and even sides >= 32, got {num_frames} frames, {width}x{height}")
    n_objects = int(rng.integers(1, max_objects + 1))
    colours = [str(c) for c in rng.permutation(list(COLOURS))[:n_objects]]
    spans = [_sample_span(rng, num_frames) for _ in colours]
    tracks = _place_objects(rng, colours, spans, width, height)
    if not _covers_every_frame(tracks, num_frames):
        # The first object is placed on an empty canvas, so a full-span first object always fits.
        spans[0] = (0, num_frames)
        tracks = _place_objects(rng, colours, spans, width, height)
    # Ids follow order of appearance, so "object 0" is the one seen first.
    tracks.sort(key=lambda t: (t.appear_frame, -t.disappear_frame))
    objects = [replace(t, id=i) for i, t in enumerate(tracks)]
    return Scene(video_id, float(fps), num_frames, width, height, objects)


def _place_objects(
    rng: np.random.Generator, colours: list[str], spans: list[tuple[int, int]], width: int, height: int
) -> list[ObjectTrack]:
    """Sample one path per colour, retrying until it clears the others; drop it if it never does."""
    tracks: list[ObjectTrack] = []
    for colour, span in zip(colours, spans, strict=True):
        for _ in range(100):
            track = _sample_track(rng, colour, span, width, height)
            if not any(_paths_touch(track, other) for other in tracks):
                tracks.append(track)
                break
    return tracks


def _covers_every_frame(tracks: list[ObjectTrack], num_frames: int) -> bool:
    visible = np.zeros(num_frames, dtype=bool)
    for track in tracks:
        visible[track.appear_frame : track.disappear_frame] = True
    return bool(visible.all())


def _sample_span(rng: np.random.Generator, num_frames: int) -> tuple[int, int]:
    """Visible frames [start, end): whole video, late entry, early exit, or both."""
    t = num_frames
    kind = rng.choice(["full", "late", "early", "both"], p=[0.4, 0.2, 0.2, 0.2])
    if kind == "full":
        return 0, t
    if kind == "late":
        return int(rng.integers(t // 6, t // 2)), t
    if kind == "early":
        return 0, int(rng.integers(t // 2, 5 * t // 6))
    return int(rng.integers(t // 8, t // 3)), int(rng.integers(2 * t // 3, 7 * t // 8))


def _sample_track(
    rng: np.random.Generator, colour: str, span: tuple[int, int], width: int, height: int
) -> ObjectTrack:
    smallest = min(width, height)
    size = int(rng.integers(smallest // 8, smallest // 5 + 1))
    shape = str(rng.choice(SHAPES))
    direction = str(rng.choice(list(DIRECTIONS)))
    ux, uy = DIRECTIONS[direction]
    steps = max(1, span[1] - span[0] - 1)
    along, across = (width, height) if ux else (height, width)
    room = along - 2 * _MARGIN - size  # how far the top-left corner may travel along the axis
    # At most 2 px/frame, and at least half the largest speed that keeps it in frame, so motion is visible.
    speed = float(rng.uniform(0.5, 1.0)) * min(2.0, room / steps)
    travel = speed * steps
    low = _MARGIN if (ux + uy) > 0 else _MARGIN + travel
    start_along = float(rng.uniform(low, low + room - travel))
    start_across = float(rng.integers(_MARGIN, across - _MARGIN - size + 1))
    start_xy = (start_along, start_across) if ux else (start_across, start_along)
    return ObjectTrack(-1, colour, shape, size, start_xy, (ux * speed, uy * speed), span[0], span[1])


def _paths_touch(a: ObjectTrack, b: ObjectTrack) -> bool:
    for f in range(max(a.appear_frame, b.appear_frame), min(a.disappear_frame, b.disappear_frame)):
        ax0, ay0, ax1, ay1 = box_at(a, f)
        bx0, by0, bx1, by1 = box_at(b, f)
        if ax0 < bx1 + _GAP and bx0 < ax1 + _GAP and ay0 < by1 + _GAP and by0 < ay1 + _GAP:
            return True
    return False


def box_at(track: ObjectTrack, frame_index: int) -> tuple[int, int, int, int] | None:
    """The object's pixel box ``(x0, y0, x1, y1)`` (x1, y1 exclusive) at a frame, or None if absent."""
    if not track.appear_frame <= frame_index < track.disappear_frame:
        return None
    t = frame_index - track.appear_frame
    x0 = round(track.start_xy[0] + track.velocity[0] * t)
    y0 = round(track.start_xy[1] + track.velocity[1] * t)
    return x0, y0, x0 + track.size, y0 + track.size


def render_frames(scene: Scene) -> np.ndarray:
    """Draw the scene: ``uint8[T, H, W, 3]`` with filled shapes on dark grey."""
    frames = np.empty((scene.num_frames, scene.height, scene.width, 3), dtype=np.uint8)
    for f in range(scene.num_frames):
        canvas = Image.new("RGB", (scene.width, scene.height), BACKGROUND)
        draw = ImageDraw.Draw(canvas)
        for track in scene.objects:
            box = box_at(track, f)
            if box is not None:
                _draw_object(draw, track.shape, box, COLOURS[track.colour])
        frames[f] = np.asarray(canvas)
    return frames


def _draw_object(draw: ImageDraw.ImageDraw, shape: str, box: tuple[int, ...], rgb: tuple[int, ...]) -> None:
    x0, y0, x1, y1 = box[0], box[1], box[2] - 1, box[3] - 1  # PIL boxes are inclusive
    if shape == "square":
        draw.rectangle((x0, y0, x1, y1), fill=rgb)
    elif shape == "circle":
        draw.ellipse((x0, y0, x1, y1), fill=rgb)
    else:  # upright triangle: apex at top centre; the box centre lies inside it
        draw.polygon([((x0 + x1) / 2, y0), (x1, y1), (x0, y1)], fill=rgb)


def scene_events(scene: Scene) -> list[tuple[float, float, str]]:
    """Dense captions from the ground truth, like ActivityNet Captions.

    Each object gives a segment for its whole motion, plus short ones when it enters late,
    leaves early, or crosses the middle of the frame. Every sentence names colour, shape and
    direction. Segments overlap across objects.

    Returns:
        ``(start_s, end_s, sentence)`` sorted by time, times rounded to milliseconds.
    """
    events = []
    for track in scene.objects:
        start, end = track.appear_frame / scene.fps, track.disappear_frame / scene.fps
        name, moving = track.name, DIRECTION_PHRASES[track.direction]
        events.append((start, end, f"a {name} moves {moving}"))
        if track.appear_frame > 0:
            events.append((start, min(end, start + _EVENT_S), f"a {name} enters the scene moving {moving}"))
        if track.disappear_frame < scene.num_frames:
            events.append((max(start, end - _EVENT_S), end, f"the {name} leaves the scene moving {moving}"))
        crossing = _middle_crossing_frame(scene, track)
        if crossing is not None:
            at = crossing / scene.fps
            span = (max(start, at - _EVENT_S / 2), min(end, at + _EVENT_S / 2))
            events.append((*span, f"the {name} crosses the middle of the frame moving {moving}"))
    events = [(round(s, 3), round(e, 3), text) for s, e, text in events]
    return sorted(events)


def _middle_crossing_frame(scene: Scene, track: ObjectTrack) -> float | None:
    """The (fractional) frame at which the object's centre passes the frame's midline, if it does."""
    axis = 0 if track.velocity[0] else 1
    middle = (scene.width if axis == 0 else scene.height) / 2
    t = (middle - track.size / 2 - track.start_xy[axis]) / track.velocity[axis]
    if 0 <= t <= track.disappear_frame - track.appear_frame - 1:
        return track.appear_frame + t
    return None


def track_record(scene: Scene) -> dict[str, Any]:
    """The generic object-track JSON record for a scene (video path relative to the world root)."""
    objects = []
    for track in scene.objects:
        boxes = {str(f): list(box_at(track, f)) for f in range(track.appear_frame, track.disappear_frame)}
        attributes = {"colour": track.colour, "shape": track.shape}
        objects.append({"id": track.id, "attributes": attributes, "boxes": boxes})
    return {
        "video_id": scene.video_id,
        "video_path": f"videos/{scene.video_id}.mp4",
        "fps": scene.fps,
        "num_frames": scene.num_frames,
        "width": scene.width,
        "height": scene.height,
        "duration": round(scene.duration, 3),
        "objects": objects,
    }


def build_world(root: str | Path, n_videos: int, seed: int, **scene_kwargs: Any) -> list[Scene]:
    """Generate the synthetic world under ``root``: videos, tracks, captions and a manifest.

    Writes ``videos/<id>.mp4``, ``tracks/<id>.json``, ``activitynet_captions.json`` and
    ``world.json``. Video ``i`` draws from its own generator seeded by ``(seed, i)``, so a
    larger world with the same seed starts with the same videos.

    Args:
        root: Output folder (created).
        n_videos: Number of videos.
        seed: Non-negative seed; the same seed gives byte-identical JSON and identical frames.
        **scene_kwargs: Passed to ``make_scene`` (width, height, fps, num_frames, max_objects).

    Returns:
        The scenes, in video order.
    """
    settings = _scene_settings(scene_kwargs)
    root = Path(root)
    scenes, captions = [], {}
    for i in tqdm(range(n_videos), desc="synthetic world", unit="video"):
        scene = make_scene(f"v_syn{seed:02d}{i:04d}", np.random.default_rng([seed, i]), **settings)
        write_mp4(root / "videos" / f"{scene.video_id}.mp4", render_frames(scene), scene.fps)
        write_json_atomic(root / "tracks" / f"{scene.video_id}.json", track_record(scene))
        events = scene_events(scene)
        captions[scene.video_id] = {
            "duration": round(scene.duration, 3),
            "timestamps": [[s, e] for s, e, _ in events],
            "sentences": [text for _, _, text in events],
        }
        scenes.append(scene)
    write_json_atomic(root / "activitynet_captions.json", captions)
    manifest = {
        "seed": seed,
        "n_videos": n_videos,
        "n_objects": sum(len(s.objects) for s in scenes),
        "n_captions": sum(len(c["sentences"]) for c in captions.values()),
        "scene_kwargs": settings,
    }
    write_json_atomic(root / "world.json", manifest, indent=2)
    return scenes


def _scene_settings(overrides: dict[str, Any]) -> dict[str, Any]:
    """make_scene's keyword defaults with ``overrides`` applied, so world.json records every setting."""
    params = inspect.signature(make_scene).parameters.values()
    defaults = {p.name: p.default for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}
    unknown = sorted(set(overrides) - set(defaults))
    if unknown:
        raise TypeError(f"unknown scene settings {unknown}; allowed: {sorted(defaults)}")
    return {**defaults, **overrides}
