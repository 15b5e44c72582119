"""How a span of video becomes model frames: the one media spec, frame sampling, resizing (once, as the
model family's processor sizes its input) and the two video readers, in this process.

The same ``MediaSpec`` is used by the data builders, the trainer and the evaluator, and its
``fingerprint`` is recorded with every dataset and result, so a mismatch is visible rather than a
silent drift. Frames are resized at decode time, straight from the source, to the size the family's
processor would give them (:func:`frame_size`: a multiple of the Qwen-VL patch grid within the pixel
budget, or a tiled family's tile), so the cache stays small and the processor's own resize is a no-op.
``core.media`` runs these decodes in the decode worker, under the spec's time bound.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass

import numpy as np
from PIL import Image

from core.choice import Choice

# Qwen2-VL and Qwen2.5-VL see frames as 14-px patches merged 2x2, so sides are multiples of 28: the default
# grid (Qwen3-VL's 16-px patches make it 32).
PATCH_GRID = 28
# 2: frames resized as the Qwen-VL processors round (smart_resize), with a minimum; 3: a later span of a
# video in the same sample sampled at the first span's frame rate (follow_on_spec); 4: frame indices as the
# official sampler picks them (evenly spaced, first and last frame included), not segment midpoints
SPEC_VERSION = 4


class Decoder(Choice):
    """The video reader."""

    decord = "decord"  # the default: fastest here
    pyav = "pyav"  # the fallback reader


# Hashable (a spec is never changed in place: ``replace`` makes a new one), so a decode can be cached by it.
@dataclass(unsafe_hash=True)
class MediaSpec:
    """How a video span becomes model frames.

    Attributes:
        decoder: the video reader.
        num_frames: frames sampled uniformly over a span; when ``None``, ``fps`` is used.
        fps: sampling rate in frames per second (bounded by ``max_frames``), used when ``num_frames`` is None.
        max_frames: upper bound on frames per span.
        min_frames: lower bound on frames per span (Qwen-VL groups frames in pairs, so keep it even).
        min_pixels, max_pixels: pixel range of a video frame after resizing (height * width), resized as
            the Qwen-VL processors resize (:func:`smart_resize`); ``tile**2`` both when ``tile`` is set.
        image_min_pixels, image_max_pixels: pixel range of a still image (a visual-prompt frame): its own
            budget, as V2P-Bench's official script gives the prompt frame the processor's limits while it
            shrinks the video.
        grid: the multiple each side of a resized frame or image is rounded to, as the family's processor
            rounds it: 28 for Qwen2-VL and Qwen2.5-VL (14-px patches merged 2x2), 32 for Qwen3-VL (16-px
            patches); 1 for a tiled family, whose processor tiles an image of any size itself, so the
            image keeps its source size within its pixel range.
        tile: the side of the square every video frame of a tiled family's processor is resized to (384
            LLaVA-OneVision, 448 InternVL3): frames go there straight from the source, so the processor's
            resize is a no-op. None: frames are resized by :func:`smart_resize`.
        timeout_s: a decode that takes longer is killed (with its worker process) and the video
            quarantined.
        position_fps: the frame rate Qwen2.5-VL's temporal positions take a video to be sampled at.
            2.0: as V2P-Bench's official script gets them (it passes no rate, so the processor assumes
            its default of 2 fps, whatever the video); None: the rate the frames were really sampled at
            (time-scaled positions, what we did before). The other families' positions do not use it.
    """

    decoder: Decoder = Decoder.decord
    num_frames: int | None = 8
    fps: float | None = None
    max_frames: int = 64
    min_frames: int = 2
    min_pixels: int = PATCH_GRID**2
    max_pixels: int = 84 * 84
    image_min_pixels: int = PATCH_GRID**2
    image_max_pixels: int = 84 * 84
    timeout_s: float = 60.0
    position_fps: float | None = 2.0
    grid: int = PATCH_GRID
    tile: int | None = None

    def __post_init__(self) -> None:
        self.decoder = Decoder(self.decoder)  # a spec built in code may name it as a string
        if self.num_frames is None and self.fps is None:
            raise ValueError("media: set num_frames or fps")
        if self.grid < 1:
            raise ValueError(f"media.grid must be positive, got {self.grid}")
        least = max(self.grid, PATCH_GRID) ** 2  # a frame holds at least one grid cell (and 28 x 28 px)
        for low, high in ((self.min_pixels, self.max_pixels), (self.image_min_pixels, self.image_max_pixels)):
            if not least <= low <= high:
                raise ValueError(f"media: pixel ranges must satisfy {least} <= min <= max, got {low}, {high}")
        # A tiled spec's pixel range is its tile, so every reader of the range (token counts, exports,
        # outputs naming the media) sees the frames' real size.
        if self.tile is not None and (self.min_pixels, self.max_pixels) != (self.tile**2, self.tile**2):
            raise ValueError(
                f"media.tile={self.tile} sizes every frame {self.tile}x{self.tile}: set media.min_pixels and "
                f"media.max_pixels to {self.tile**2}, got {self.min_pixels}, {self.max_pixels}"
            )
        if self.timeout_s <= 0:
            raise ValueError(f"media.timeout_s must be positive, got {self.timeout_s}")
        if self.position_fps is not None and self.position_fps <= 0:
            raise ValueError(f"media.position_fps must be positive or null, got {self.position_fps}")

    def to_dict(self) -> dict:
        return {"version": SPEC_VERSION, **asdict(self)}

    @property
    def fingerprint(self) -> str:
        """A short hash of every field that changes what the model sees: the frames and their temporal
        positions (not the timeout). A field added after specs were first fingerprinted counts only when it
        differs from its default, so the specs made before it keep their fingerprints (and their stored
        results and cached frames)."""
        fields = {
            k: v
            for k, v in self.to_dict().items()
            if k != "timeout_s" and not (k in _LATER_FIELDS and v == _LATER_FIELDS[k])
        }
        return hashlib.sha1(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:12]


# Fields added to MediaSpec after its fingerprint was first recorded, with their defaults.
_LATER_FIELDS = {"grid": PATCH_GRID, "tile": None}


@dataclass
class Clip:
    """Decoded frames of one span: ``frames`` uint8[T, H, W, 3], source ``fps``, the source frame
    indices that were taken, and how many source frames the span holds."""

    frames: np.ndarray
    fps: float
    indices: list[int]
    span_frames: int

    def processor_metadata(self) -> dict:
        """Metadata in the form HF video processors take (they derive the sampling rate from it)."""
        return {"fps": self.fps, "total_num_frames": self.span_frames, "frames_indices": self.indices}


def smart_resize(
    height: int, width: int, min_pixels: int, max_pixels: int, grid: int = PATCH_GRID
) -> tuple[int, int]:
    """The (h, w) a Qwen-VL processor resizes an image to: each side rounded to the nearest multiple of
    ``grid``, then scaled down (rounding down) to fit ``max_pixels`` or up (rounding up) to reach
    ``min_pixels``, keeping the aspect ratio. Resizing to it here makes the processor's own resize a
    no-op, and a frame comes out as the official pipelines make it (720p at 336*336: 252 x 448; at grid 32,
    as Qwen3-VL's: 224 x 448). ``grid=1``: the size itself, scaled only to fit the range."""
    h, w = max(grid, round(height / grid) * grid), max(grid, round(width / grid) * grid)
    if h * w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h = max(grid, math.floor(height / beta / grid) * grid)
        w = max(grid, math.floor(width / beta / grid) * grid)
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h, w = math.ceil(height * beta / grid) * grid, math.ceil(width * beta / grid) * grid
    return h, w


def frame_size(spec: MediaSpec, height: int, width: int, *, image: bool) -> tuple[int, int]:
    """The (h, w) decoding hands the processor for a source frame of ``height`` x ``width``: a video frame,
    or a still image (``image``) such as a visual-prompt frame. Decoding resizes by this very function, so
    a frame's size (and its visual tokens) can be known from a file's header without decoding it.

    A video frame goes to the spec's tile when it has one, else to :func:`smart_resize`'s size on
    ``spec.grid`` within ``min_pixels`` .. ``max_pixels``; an image to :func:`smart_resize`'s size on
    ``spec.grid`` within its own range (its source size on a grid of 1, when the range holds it)."""
    if image:
        return smart_resize(height, width, spec.image_min_pixels, spec.image_max_pixels, spec.grid)
    if spec.tile is not None:
        return spec.tile, spec.tile
    return smart_resize(height, width, spec.min_pixels, spec.max_pixels, spec.grid)


def resize_to(frames: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """uint8[T, H, W, 3] frames resized (bicubic) to ``size`` (h, w) in one step; as they are when they
    already have it."""
    h, w = size
    if (h, w) == frames.shape[1:3]:
        return frames
    return np.stack([np.asarray(Image.fromarray(f).resize((w, h), Image.BICUBIC)) for f in frames])


def resize_frames(frames: np.ndarray, min_pixels: int, max_pixels: int) -> np.ndarray:
    """Resize uint8[T, H, W, 3] frames to :func:`smart_resize`'s size (bicubic) on the default grid."""
    return resize_to(frames, smart_resize(frames.shape[1], frames.shape[2], min_pixels, max_pixels))


def sample_indices(total_frames: int, fps: float, start: float, end: float, spec: MediaSpec) -> list[int]:
    """Source frame indices sampled uniformly over ``[start, end]`` seconds, first and last frame included,
    as V2P-Bench's official pipeline (qwen_vl_utils) picks them: ``linspace(first, last, count)`` rounded
    (half to even, as torch rounds)."""
    first = min(max(0, int(math.floor(start * fps))), total_frames - 1)
    last = min(total_frames - 1, max(first, int(math.ceil(end * fps)) - 1))
    span = last - first + 1
    if spec.num_frames is not None:
        count = spec.num_frames
    else:
        count = round((span / fps) * spec.fps)
    count = max(spec.min_frames, min(spec.max_frames, count))
    # Repeats are fine when the span is shorter than `count`.
    return np.round(np.linspace(first, last, count)).astype(int).tolist()


def _decode_decord(path: str, start: float, end: float, spec: MediaSpec) -> Clip:
    import decord

    reader = decord.VideoReader(path, num_threads=1)
    fps = float(reader.get_avg_fps())
    indices = sample_indices(len(reader), fps, start, end, spec)
    frames = reader.get_batch(indices).asnumpy()
    return Clip(frames, fps, indices, indices[-1] - indices[0] + 1)


def _decode_pyav(path: str, start: float, end: float, spec: MediaSpec) -> Clip:
    import av

    with av.open(path) as container:
        stream = container.streams.video[0]
        fps = float(stream.average_rate)
        all_frames = [f.to_ndarray(format="rgb24") for f in container.decode(stream)]
    indices = sample_indices(len(all_frames), fps, start, end, spec)
    return Clip(np.stack([all_frames[i] for i in indices]), fps, indices, indices[-1] - indices[0] + 1)


_DECODERS = {"decord": _decode_decord, "pyav": _decode_pyav}


def decode_clip(path: str, start: float, end: float, spec: MediaSpec) -> Clip:
    """Decode the spec's frames of a span in this process, resized once to :func:`frame_size` (no time
    bound: the decode worker runs this in its child, which the caller can kill)."""
    clip = _DECODERS[spec.decoder](path, start, end, spec)
    clip.frames = resize_to(clip.frames, frame_size(spec, *clip.frames.shape[1:3], image=False))
    return clip
