"""How a span of video becomes model frames: the one media spec, frame sampling, resizing (as the Qwen-VL
processors round) and the two video readers, in this process.

The same ``MediaSpec`` is used by the data builders, the trainer and the evaluator, and its
``fingerprint`` is recorded with every dataset and result, so a mismatch is visible rather than a
silent drift. Frames are resized to the spec's pixel budget at decode time (to a multiple of the
vision patch grid) so the cache stays small and the model processor's own resize is a no-op.
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

# Qwen-VL style models see frames as 14-px patches merged 2x2, so sides are multiples of 28.
PATCH_GRID = 28
# 2: frames resized as the Qwen-VL processors round (smart_resize), with a minimum; 3: a later span of a
# video in the same sample sampled at the first span's frame rate (follow_on_spec); 4: frame indices as the
# official sampler picks them (evenly spaced, first and last frame included), not segment midpoints
SPEC_VERSION = 4


class Decoder(Choice):
    """The video reader."""

    decord = "decord"  # the default: fastest here
    pyav = "pyav"  # the fallback reader


@dataclass
class MediaSpec:
    """How a video span becomes model frames.

    Attributes:
        decoder: the video reader.
        num_frames: frames sampled uniformly over a span; when ``None``, ``fps`` is used.
        fps: sampling rate in frames per second (bounded by ``max_frames``), used when ``num_frames`` is None.
        max_frames: upper bound on frames per span.
        min_frames: lower bound on frames per span (Qwen-VL groups frames in pairs, so keep it even).
        min_pixels, max_pixels: pixel range of a video frame after resizing (height * width), resized as
            the Qwen-VL processors resize (:func:`smart_resize`).
        image_min_pixels, image_max_pixels: pixel range of a still image (a visual-prompt frame): its own
            budget, as V2P-Bench's official script gives the prompt frame the processor's limits while it
            shrinks the video.
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

    def __post_init__(self) -> None:
        self.decoder = Decoder(self.decoder)  # a spec built in code may name it as a string
        if self.num_frames is None and self.fps is None:
            raise ValueError("media: set num_frames or fps")
        for low, high in ((self.min_pixels, self.max_pixels), (self.image_min_pixels, self.image_max_pixels)):
            if not PATCH_GRID**2 <= low <= high:
                raise ValueError(
                    f"media: pixel ranges must satisfy {PATCH_GRID**2} <= min <= max, got {low}, {high}"
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
        positions (not the timeout)."""
        fields = {k: v for k, v in self.to_dict().items() if k != "timeout_s"}
        return hashlib.sha1(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:12]


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


def smart_resize(height: int, width: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """The (h, w) a Qwen-VL processor resizes an image to: each side rounded to the nearest multiple of the
    patch grid, then scaled down (rounding down) to fit ``max_pixels`` or up (rounding up) to reach
    ``min_pixels``, keeping the aspect ratio. Resizing to it here makes the processor's own resize a
    no-op, and a frame comes out as the official pipelines make it (720p at 336*336: 252 x 448)."""
    grid = PATCH_GRID
    h, w = max(grid, round(height / grid) * grid), max(grid, round(width / grid) * grid)
    if h * w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h = max(grid, math.floor(height / beta / grid) * grid)
        w = max(grid, math.floor(width / beta / grid) * grid)
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h, w = math.ceil(height * beta / grid) * grid, math.ceil(width * beta / grid) * grid
    return h, w


def resize_frames(frames: np.ndarray, min_pixels: int, max_pixels: int) -> np.ndarray:
    """Resize uint8[T, H, W, 3] frames to :func:`smart_resize`'s size (bicubic)."""
    h, w = smart_resize(frames.shape[1], frames.shape[2], min_pixels, max_pixels)
    if (h, w) == frames.shape[1:3]:
        return frames
    return np.stack([np.asarray(Image.fromarray(f).resize((w, h), Image.BICUBIC)) for f in frames])


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
    """Decode the spec's frames of a span in this process, resized to the pixel budget (no time bound:
    the decode worker runs this in its child, which the caller can kill)."""
    clip = _DECODERS[spec.decoder](path, start, end, spec)
    clip.frames = resize_frames(clip.frames, spec.min_pixels, spec.max_pixels)
    return clip
