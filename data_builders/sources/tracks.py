"""Object-track readers: the generic per-video JSON and GOT-10k / LaSOT sequence folders.

Every reader returns ``(tracks, quarantined)``: tracks in the one internal shape the visual-prompt
builder (:mod:`data_builders.vp_sft`) uses, and one line per input it had to leave out, saying why.

Internal track (also the generic on-disk format, except that ``video_path`` is resolved here)::

    video_id      unique id of the video
    video_path    the video file (absolute once read; relative to the world root on disk)
    fps, width, height, duration, num_frames (num_frames optional on disk: duration * fps)
    source        source name for the release rows and folders ("synthetic" when absent)
    exhaustive    every object in the video is annotated (default true), so counting is answerable
    objects       [{id, attributes: {name: value}, boxes: {"<frame>": [x0, y0, x1, y1]},
                    masks (optional): {"<frame>": [[[x, y], ...], ...]}}]   # polygons per frame

A frame without a box is a frame where the object is not visible. ``attributes`` may hold
``colour``, ``shape`` (the synthetic world) or ``class`` (an object category); questions that
need an attribute are asked only about objects that have it.

GOT-10k / LaSOT sequence folders (one annotated target per sequence)::

    <seq>/00000001.jpg ...  (LaSOT: <seq>/img/00000001.jpg ...)
    <seq>/groundtruth.txt   one "x,y,w,h" box per frame (pixels; commas, tabs or spaces)
    <seq>/absence.label     GOT-10k: one 0/1 per line, 1 = target absent
    <seq>/full_occlusion.txt, out_of_view.txt, absent.txt   LaSOT-style: 0/1 per frame
    <seq>/meta_info.ini     GOT-10k: ``object_class`` becomes the ``class`` attribute
    (LaSOT: the class is the folder name, <class>/<class>-<n>/)

The frames are written as an mp4 (:func:`core.video_io.write_mp4`) so the rest of the
pipeline, and the release format, sees videos. These sequences are ``exhaustive: false``: only
one object is annotated, so nothing is counted and no object is compared with another.
"""

from __future__ import annotations

import configparser
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from core.checks import is_list_of, is_number
from core.errors import ConfigError, DataError
from core.files import read_json_object, write_json_atomic
from data_builders.sources.registry import call_reader

TRACK_FIELDS = ("video_id", "video_path", "fps", "duration", "width", "height", "objects")
_ABSENCE_FILES = ("absence.label", "absent.txt", "full_occlusion.txt", "out_of_view.txt")
_FRAME_SUFFIXES = (".jpg", ".jpeg", ".png")


def load_generic_track(path: str | Path, root: str | Path) -> dict[str, Any]:
    """Read and check one generic object-track JSON; ``video_path`` is resolved against ``root``.

    Raises:
        DataError: naming the file and the bad field (a missing video included).
    """
    path = Path(path)
    track = read_json_object(path, "track")
    for name in TRACK_FIELDS:
        if name not in track:
            raise DataError(str(path), "missing", field=name)
    if not isinstance(track["objects"], list) or not track["objects"]:
        raise DataError(str(path), "expected a non-empty list", field="objects")
    for i, obj in enumerate(track["objects"]):
        _check_object(path, i, obj)
    video = Path(root) / track["video_path"]
    if not video.is_file():
        raise DataError(str(path), f"video not found: {video}", field="video_path")
    num_frames = track.get("num_frames") or round(float(track["duration"]) * float(track["fps"]))
    return {
        **track,
        "video_path": str(video.resolve()),
        "num_frames": int(num_frames),
        "source": str(track.get("source", "synthetic")),
        "exhaustive": bool(track.get("exhaustive", True)),
    }


def _check_object(path: Path, i: int, obj: Any) -> None:
    where = f"objects[{i}]"
    if not isinstance(obj, dict) or "id" not in obj:
        raise DataError(str(path), "expected an object with an id", field=where)
    attributes, boxes = obj.get("attributes", {}), obj.get("boxes")
    if not isinstance(attributes, dict) or not all(isinstance(v, str) for v in attributes.values()):
        raise DataError(str(path), "expected a {name: text} map", field=f"{where}.attributes")
    if not isinstance(boxes, dict) or not boxes:
        raise DataError(str(path), "expected a non-empty {frame: box} map", field=f"{where}.boxes")
    for frame, box in boxes.items():
        if not (frame.isdigit() and valid_box(box)):
            raise DataError(str(path), f"bad box {box!r}", field=f"{where}.boxes[{frame!r}]")
    for frame, polygons in obj.get("masks", {}).items():
        if not (frame.isdigit() and is_list_of(polygons, _is_polygon) and polygons):
            raise DataError(
                str(path), "expected a list of [[x, y], ...] polygons", field=f"{where}.masks[{frame!r}]"
            )


def valid_box(box: Any) -> bool:
    """``[x0, y0, x1, y1]`` numbers with x1 > x0 and y1 > y0."""
    return is_list_of(box, is_number, 4) and box[2] > box[0] and box[3] > box[1]


def _is_polygon(value: Any) -> bool:
    return isinstance(value, list) and len(value) >= 3 and all(is_list_of(p, is_number, 2) for p in value)


def read_generic_tracks(
    root: str | Path, videos_out: str | Path | None = None
) -> tuple[list[dict], list[str]]:
    """Every ``<root>/tracks/*.json`` (what the synthetic world writes); a bad track is an error.

    Raises:
        DataError: no track files, or the first bad track (file and field).
    """
    files = sorted((Path(root) / "tracks").glob("*.json"))
    if not files:
        raise DataError(str(Path(root) / "tracks"), "no object-track files (*.json)")
    return [load_generic_track(f, root) for f in files], []


def read_got10k(
    root: str | Path, videos_out: str | Path, *, fps: float = 10.0, stride: int = 1, max_side: int = 640
) -> tuple[list[dict], list[str]]:
    """GOT-10k sequences under ``root`` (annotated at 10 frames per second); see the module docstring."""
    return read_sequence_folders(root, videos_out, source="got10k", fps=fps, stride=stride, max_side=max_side)


def read_lasot(
    root: str | Path, videos_out: str | Path, *, fps: float = 30.0, stride: int = 3, max_side: int = 640
) -> tuple[list[dict], list[str]]:
    """LaSOT sequences under ``root`` (30 fps; every 3rd frame kept by default, so videos are 10 fps)."""
    return read_sequence_folders(root, videos_out, source="lasot", fps=fps, stride=stride, max_side=max_side)


def read_sequence_folders(
    root: str | Path, videos_out: str | Path, *, source: str, fps: float, stride: int, max_side: int
) -> tuple[list[dict], list[str]]:
    """Every folder under ``root`` holding a ``groundtruth.txt``, as a one-object track and an mp4.

    Args:
        root: a dataset split (or a single sequence folder).
        videos_out: where the mp4s go (``<video_id>.mp4``; reused when made with the same settings).
        source: source name for the rows.
        fps: the rate the frames were captured (annotated) at.
        stride: keep every ``stride``-th frame; the video plays at ``fps / stride``.
        max_side: frames are shrunk so their longer side is at most this (boxes scaled alike).

    Returns:
        ``(tracks, quarantined)``; a sequence with bad or missing annotations, too few frames or
        unreadable images is quarantined with the reason, not fatal.

    Raises:
        ConfigError: non-positive fps, stride or max_side.
        DataError: no sequence folder under ``root``.
    """
    if fps <= 0 or stride < 1 or max_side < 2:
        raise ConfigError(f"fps, stride and max_side must be positive, got {fps}, {stride}, {max_side}")
    folders = sorted({p.parent for p in Path(root).rglob("groundtruth.txt")})
    if not folders:
        raise DataError(str(root), "no sequence folders (with a groundtruth.txt) found")
    tracks, quarantined = [], []
    for folder in folders:
        try:
            tracks.append(_read_sequence(folder, Path(videos_out), source, fps, stride, max_side))
        except DataError as err:
            quarantined.append(str(err))
    return tracks, quarantined


def _read_sequence(
    folder: Path, videos_out: Path, source: str, fps: float, stride: int, max_side: int
) -> dict:
    frames_dir = folder / "img" if (folder / "img").is_dir() else folder
    frames = sorted(p for p in frames_dir.iterdir() if p.suffix.lower() in _FRAME_SUFFIXES)
    boxes = _read_boxes(folder / "groundtruth.txt")
    if len(boxes) != len(frames):
        raise DataError(str(folder / "groundtruth.txt"), f"{len(boxes)} boxes for {len(frames)} frames")
    absent = np.zeros(len(frames), dtype=bool)
    for name in _ABSENCE_FILES:
        if (folder / name).is_file():
            absent |= _read_flags(folder / name, len(frames))
    kept = list(range(0, len(frames), stride))
    if len(kept) < 2:
        raise DataError(str(folder), f"only {len(kept)} frame(s) after taking every {stride}th")
    size, scaled = _frame_size(frames[0], max_side)
    video = videos_out / f"{folder.name}.mp4"
    _encode_frames([frames[i] for i in kept], video, scaled, fps / stride)
    sx, sy = scaled[0] / size[0], scaled[1] / size[1]
    track_boxes = {}
    for j, i in enumerate(kept):
        x, y, w, h = boxes[i]
        if absent[i] or not (w > 0 and h > 0):  # NaN compares false: a NaN box is absent too
            continue
        box = [max(0.0, x * sx), max(0.0, y * sy), min(scaled[0], (x + w) * sx), min(scaled[1], (y + h) * sy)]
        if valid_box(box):
            track_boxes[str(j)] = [round(v, 2) for v in box]
    if not track_boxes:
        raise DataError(str(folder), "the target is never visible")
    category = _category(folder)
    out_fps = fps / stride
    return {
        "video_id": folder.name,
        "video_path": str(video.resolve()),
        "fps": out_fps,
        "num_frames": len(kept),
        "duration": round(len(kept) / out_fps, 3),
        "width": scaled[0],
        "height": scaled[1],
        "source": source,
        "exhaustive": False,
        "objects": [{"id": 0, "attributes": {"class": category} if category else {}, "boxes": track_boxes}],
    }


def _read_boxes(path: Path) -> list[tuple[float, float, float, float]]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as err:
        raise DataError(str(path), f"cannot read: {err}") from None
    boxes = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        values = [v for v in re.split(r"[,\s]+", line.strip()) if v]
        try:
            numbers = [float(v) for v in values]  # "nan" parses: an absent target
        except ValueError:
            numbers = []
        if len(numbers) != 4:
            raise DataError(str(path), f"expected 'x,y,w,h', got {line.strip()!r}", row=number)
        boxes.append((numbers[0], numbers[1], numbers[2], numbers[3]))
    return boxes


def _read_flags(path: Path, count: int) -> np.ndarray:
    """0/1 flags, one per frame, separated by commas, spaces or newlines."""
    values = [v for v in re.split(r"[,\s]+", path.read_text(encoding="utf-8")) if v]
    if len(values) != count or not set(values) <= {"0", "1"}:
        raise DataError(str(path), f"expected {count} flags of 0 or 1, got {len(values)} values")
    return np.array([v == "1" for v in values], dtype=bool)


def _category(folder: Path) -> str | None:
    """GOT-10k's ``object_class``; else LaSOT's class folder (``<class>/<class>-<n>``)."""
    meta = folder / "meta_info.ini"
    if meta.is_file():
        text = meta.read_text(encoding="utf-8", errors="replace")
        parser = configparser.ConfigParser(interpolation=None)
        # Some copies of meta_info.ini lack the [METAINFO] header line.
        parser.read_string(text if text.lstrip().startswith("[") else "[METAINFO]\n" + text)
        for section in parser.sections():
            value = parser[section].get("object_class", "").strip()
            if value:
                return value
    match = re.fullmatch(r"(.+)-\d+", folder.name)
    if match and folder.parent.name == match.group(1):
        return match.group(1).replace("_", " ")
    return None


def _frame_size(first: Path, max_side: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """The frames' size and the even size (for yuv420p) they are written at, longer side <= max_side."""
    try:
        with Image.open(first) as image:
            width, height = image.size
    except OSError as err:
        raise DataError(str(first), f"cannot read image: {err}") from None
    scale = min(1.0, max_side / max(width, height))
    return (width, height), (max(2, int(width * scale) // 2 * 2), max(2, int(height * scale) // 2 * 2))


def _encode_frames(frames: list[Path], video: Path, size: tuple[int, int], fps: float) -> None:
    """Write the frames as an mp4, unless one made from the same frames and settings is there."""
    from core.video_io import write_mp4  # imported here: av is only needed to encode

    settings = {"frames": [str(f) for f in frames], "size": list(size), "fps": fps}
    sidecar = video.with_suffix(".json")
    if video.is_file() and sidecar.is_file() and json.loads(sidecar.read_text()) == settings:
        return
    array = np.empty((len(frames), size[1], size[0], 3), dtype=np.uint8)
    for i, path in enumerate(frames):
        try:
            with Image.open(path) as image:
                array[i] = np.asarray(image.convert("RGB").resize(size, Image.BILINEAR))
        except OSError as err:
            raise DataError(str(path), f"cannot read image: {err}") from None
    write_mp4(video, array, fps)
    write_json_atomic(sidecar, settings)


TrackReader = Callable[..., tuple[list[dict], list[str]]]
TRACK_FORMATS: dict[str, TrackReader] = {
    "generic": read_generic_tracks,
    "got10k": read_got10k,
    "lasot": read_lasot,
}


def read_tracks(
    source_format: str, root: str | Path, videos_out: str | Path, **options: Any
) -> tuple[list[dict], list[str]]:
    """Read tracks with the reader of ``source_format`` (a key of :data:`TRACK_FORMATS`).

    Raises:
        ConfigError: an unknown format or an option its reader does not take.
    """
    return call_reader(TRACK_FORMATS, "track format", source_format, root, videos_out, **options)


def frames_visible(track: dict[str, Any], obj: dict[str, Any]) -> np.ndarray:
    """``bool[num_frames]``: the frames where ``obj`` has a box."""
    visible = np.zeros(int(track["num_frames"]), dtype=bool)
    frames = [int(f) for f in obj["boxes"] if int(f) < len(visible)]
    visible[frames] = True
    return visible
