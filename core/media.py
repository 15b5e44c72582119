"""Media as samples use it: the spec of each video span of a sample, decodes bounded in time (in the decode
worker), still images, the per-(video, spec) frame cache, and the media check that quarantines what does
not decode. How a span becomes frames is ``core.decoding``.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
from PIL import Image

from core import decode_worker
from core.decoding import Clip, MediaSpec, frame_size, resize_to
from core.errors import DecodeError
from core.files import atomic_path
from core.sample import Sample


def follow_on_spec(spec: MediaSpec, shown_s: float, span_s: float) -> MediaSpec:
    """The spec for a later span of a video already shown for ``shown_s`` seconds in the same sample.

    An OVI interruption brings the frames since the question, often under a second: sampled like the
    history it would get as many frames as all of it (``num_frames`` over 0.4 s is a dozen distinct frames
    repeated). It is sampled at the history's frame rate instead, at least ``min_frames`` and at most
    ``num_frames``, an even count (the Qwen-VL towers merge frames in pairs). A spec that samples by
    ``fps`` already does this, and is returned as it is.
    """
    if spec.num_frames is None or shown_s <= 0:
        return spec
    count = math.ceil(span_s * spec.num_frames / shown_s - 1e-9)
    count += count % 2
    return replace(spec, num_frames=max(spec.min_frames, min(spec.num_frames, count)))


def span_specs(sample: Sample, spec: MediaSpec, *, follow_on: bool = True) -> list[MediaSpec]:
    """The spec each video span of ``sample`` is sampled with, in turn order: ``spec`` for a video's first
    span, :func:`follow_on_spec` for its later ones (or ``spec`` again when ``follow_on`` is False: a
    family whose processor needs one frame count for every span)."""
    shown: dict[str, float] = {}
    specs = []
    for part in (p for turn in sample.turns for p in turn.parts if p.type == "video"):
        length = float(part.end) - float(part.start)
        if part.path in shown and follow_on:
            specs.append(follow_on_spec(spec, shown[part.path], length))
        else:
            specs.append(spec)
            shown.setdefault(part.path, length)
    return specs


def decode_span(path: str | Path, start: float, end: float, spec: MediaSpec) -> Clip:
    """Decode the spec's frames of ``[start, end]`` seconds of a video, resized to the pixel budget.

    The decode runs in this process's decode worker (``core.decode_worker``), a child process
    that is killed, with the hung decode, when it takes longer than ``spec.timeout_s``.

    Raises:
        DecodeError: the file is missing, empty, corrupt, crashed the decoder, or decoding exceeded
            ``spec.timeout_s``.
    """
    path = str(path)
    if not os.path.isfile(path):
        raise DecodeError(path, "file not found")
    if os.path.getsize(path) == 0:
        raise DecodeError(path, "file is empty (0 bytes)")
    if end < start:
        raise DecodeError(path, f"span end {end} s is before start {start} s")
    return Clip(*decode_worker.decode(path, start, end, spec))


def load_image(path: str | Path, spec: MediaSpec) -> np.ndarray:
    """Load a still image (a visual-prompt frame) as uint8[H, W, 3], resized once to the spec's image size
    (``core.decoding.frame_size``: within the image pixel budget, on the family's grid).

    Decoded once per process, file version and spec: every epoch and checkpoint evaluation reuses it
    (each caller gets its own copy, so nothing can alter the cached frame).
    """
    path = str(path)
    try:
        stat = os.stat(path)
    except OSError as exc:
        raise DecodeError(path, f"cannot read image: {exc}") from exc
    return _load_image(path, stat.st_size, stat.st_mtime_ns, spec).copy()


@functools.lru_cache(maxsize=4096)
def _load_image(path: str, size: int, mtime_ns: int, spec: MediaSpec) -> np.ndarray:
    try:
        with Image.open(path) as img:
            array = np.asarray(img.convert("RGB"))
    except (OSError, ValueError) as exc:
        raise DecodeError(path, f"cannot read image: {exc}") from exc
    image = resize_to(array[None], frame_size(spec, *array.shape[:2], image=True))[0]
    image.flags.writeable = False
    return image


class FrameCache:
    """Decoded clips on disk, keyed by (file identity, span, media spec fingerprint).

    A second epoch or another checkpoint evaluation loads ``.npz`` files instead of decoding.
    The key includes the file's size and mtime so a replaced video is decoded again.
    """

    def __init__(self, root: str | Path | None):
        self.root = Path(root) if root else None

    def _key(self, path: str, start: float, end: float, spec: MediaSpec) -> str:
        stat = os.stat(path)
        file_id = f"{os.path.abspath(path)}|{stat.st_size}|{stat.st_mtime_ns}"
        ident = f"{file_id}|{start:.3f}|{end:.3f}|{spec.fingerprint}"
        return hashlib.sha1(ident.encode()).hexdigest()

    def clip(self, path: str | Path, start: float, end: float, spec: MediaSpec) -> Clip:
        """The clip for a span, from the cache when present, else decoded and stored."""
        path = str(path)
        if self.root is None or not os.path.isfile(path):
            return decode_span(path, start, end, spec)
        key = self._key(path, start, end, spec)
        file = self.root / key[:2] / f"{key}.npz"
        if file.exists():
            with np.load(file) as data:
                return Clip(
                    data["frames"], float(data["fps"]), data["indices"].tolist(), int(data["span_frames"])
                )
        clip = decode_span(path, start, end, spec)
        with atomic_path(file) as tmp, tmp.open("wb") as out:  # a killed run leaves no half entry
            np.savez(
                out,
                frames=clip.frames,
                fps=clip.fps,
                indices=np.asarray(clip.indices),
                span_frames=clip.span_frames,
            )
        return clip


def check_media(
    samples: list[Sample], spec: MediaSpec, cache: FrameCache, desc: str, *, follow_on: bool = True
) -> tuple[list[Sample], list[dict[str, str]]]:
    """Decode every sample's media once (warming the cache); split off the samples whose media fail.

    ``follow_on``: whether the model samples a later span of a video as :func:`span_specs` says (so the
    frames warmed here are the ones it reads).

    Returns:
        (usable samples, quarantined entries ``{"id", "file", "reason"}``).
    """
    from tqdm import tqdm

    usable, quarantined = [], []
    for sample in tqdm(samples, desc=f"decode {desc}", unit="sample"):
        try:
            specs = iter(span_specs(sample, spec, follow_on=follow_on))
            for turn in sample.turns:
                for part in turn.parts:
                    if part.type == "video":
                        cache.clip(part.path, part.start, part.end, next(specs))
                    elif part.type == "image":
                        load_image(part.path, spec)
            usable.append(sample)
        except DecodeError as exc:
            quarantined.append({"id": sample.id, "file": exc.path, "reason": exc.reason})
    return usable, quarantined
