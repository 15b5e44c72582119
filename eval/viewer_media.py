"""The frames a model saw, as the small inline JPEG thumbnails of the results viewer (``eval.viewer``).

Each video span of an item is decoded as the evaluation decoded it (the run's media spec, through the frame
cache, a later span of the same video at its follow-on rate) and each image (a visual-prompt frame) is
loaded within the image pixel budget: the pixels the model was given, shrunk. Spans and images shared by
many items (six V2P questions on one video) are stored once in the page, under a key.
"""

from __future__ import annotations

import base64
import hashlib
import io
from dataclasses import dataclass, field

import numpy as np
from PIL import Image

from core.decoding import MediaSpec
from core.errors import DecodeError
from core.media import FrameCache, load_image, span_specs
from core.sample import Sample

FRAME_PX = 96  # the long side of a video frame's thumbnail
IMAGE_PX = 224  # the long side of a visual-prompt frame's thumbnail: the drawing must stay legible
MAX_FRAMES_SHOWN = 8  # frames shown per span, evenly taken from those the model saw
JPEG_QUALITY = 60


def jpeg_base64(frame: np.ndarray, longest: int, quality: int = JPEG_QUALITY) -> str:
    """``uint8[H, W, 3]`` as a base64 JPEG whose long side is at most ``longest`` pixels."""
    image = Image.fromarray(np.asarray(frame, dtype=np.uint8))
    scale = longest / max(image.size)
    if scale < 1:
        image = image.resize((max(1, round(image.width * scale)), max(1, round(image.height * scale))))
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=quality, optimize=True)
    return base64.b64encode(out.getvalue()).decode("ascii")


def evenly(count: int, limit: int) -> list[int]:
    """At most ``limit`` indices of ``range(count)``, evenly spread, first and last included."""
    if count <= limit:
        return list(range(count))
    return sorted({round(i * (count - 1) / (limit - 1)) for i in range(limit)})


@dataclass
class Thumbnails:
    """The media table of a viewer page: key -> thumbnails (base64 JPEGs), and what could not be shown.

    Args:
        spec: the run's media spec (the frames the model saw).
        cache: the run's frame cache (decoded clips are read from it, not decoded again).
        follow_on: the family samples a video's later spans at its first span's rate
            (``models.chat.follows_on``).
    """

    spec: MediaSpec
    cache: FrameCache
    follow_on: bool = True
    table: dict[str, list[str]] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)  # key -> why it has no thumbnails

    def of_sample(self, sample: Sample) -> list[dict]:
        """The media parts of ``sample`` in turn order: ``{"kind", "key", "turn", "start", "end"}`` each,
        their thumbnails added to the table."""
        specs = iter(span_specs(sample, self.spec, follow_on=self.follow_on))
        parts = []
        for turn_index, turn in enumerate(sample.turns):
            for part in turn.parts:
                if part.type == "video":
                    start, end = float(part.start), float(part.end)
                    key = self._video(part.path, start, end, next(specs))
                    parts.append(
                        {"kind": "video", "key": key, "turn": turn_index, "start": start, "end": end}
                    )
                elif part.type == "image":
                    parts.append({"kind": "image", "key": self._image(part.path), "turn": turn_index})
        return parts

    def _video(self, path: str, start: float, end: float, spec: MediaSpec) -> str:
        key = _key("v", path, f"{start:.3f}", f"{end:.3f}", spec.fingerprint)
        if key not in self.table and key not in self.missing:
            try:
                frames = self.cache.clip(path, start, end, spec).frames
                self.table[key] = [
                    jpeg_base64(frames[i], FRAME_PX) for i in evenly(len(frames), MAX_FRAMES_SHOWN)
                ]
            except DecodeError as err:
                self.missing[key] = str(err)
        return key

    def _image(self, path: str) -> str:
        key = _key("i", path)
        if key not in self.table and key not in self.missing:
            try:
                self.table[key] = [jpeg_base64(load_image(path, self.spec), IMAGE_PX, quality=75)]
            except DecodeError as err:
                self.missing[key] = str(err)
        return key


def _key(*fields: str) -> str:
    # Short keys: a 10,000-item page names them tens of thousands of times.
    return hashlib.sha1("|".join(fields).encode()).hexdigest()[:12]
