"""What each sample puts into the model, in tokens, read from the media files' headers without decoding.

The plan (train/plan.py) counts, for every sample of the run's training and evaluation sets that exist on
disk, the frames of each video span as decode would sample them (``core.decoding.sample_indices`` on the
header's frame count and rate, with each span's spec as ``core.media.span_specs`` gives it), the size those
frames reach the processor at (``core.decoding.frame_size``, the function decode resizes with), and the
visual tokens the family's processor makes of them (``models.released``). Text is counted with the
checkpoint's tokenizer where its directory holds one, else estimated (and said so). A file whose header
cannot be read is counted and named; the rest of the plan goes on.

The worst case by the media limits is counted always, with or without data: every span at its most frames,
every frame and image at the largest size the spec lets through.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from core.decoding import MediaSpec, frame_size, sample_indices
from core.media import span_specs
from core.sample import Sample

CHARS_PER_TOKEN = 4.0  # the estimate without a tokenizer: English text through Qwen's BPE is ~4 characters
# The shapes of a still the worst case tries at the image pixel limit (landscape, portrait, square, wide).
WORST_IMAGE_ASPECTS = ((9, 16), (16, 9), (1, 1), (1, 3), (3, 1))
# When no dataset is on disk, the worst case takes the heavier of our two item shapes, as (video spans,
# stills): a V2P item (one span and its prompt frame) and an OVI item (the history and the interruption's
# span of one video).
ITEM_SHAPES = ((1, 1), (2, 0))
DEFAULT_TEXT_TOKENS = 300


@dataclass(frozen=True)
class VideoHeader:
    height: int
    width: int
    fps: float
    frames: int


@dataclass
class SampleTokens:
    """One sample's tokens: the visual ones per video span and per image, the text, the labelled part."""

    sample_id: str
    video: list[int]
    images: list[int]
    text: int
    labelled: int
    # (frames, height, width) per span and (height, width) per image, as the processor receives them
    video_frames: list[tuple[int, int, int]] = field(default_factory=list)
    image_sizes: list[tuple[int, int]] = field(default_factory=list)

    @property
    def visual(self) -> int:
        return sum(self.video) + sum(self.images)

    @property
    def total(self) -> int:
        return self.visual + self.text


@dataclass
class TokenCounts:
    """Every readable sample's tokens, and the media that could not be read (path -> reason)."""

    samples: list[SampleTokens] = field(default_factory=list)
    unreadable: dict[str, str] = field(default_factory=dict)
    skipped_samples: int = 0  # samples left out because a file of theirs is unreadable


@lru_cache(maxsize=100_000)
def video_header(path: str) -> VideoHeader:
    """The video's frame size, rate and frame count from its container header (nothing decoded).

    Raises:
        OSError / ValueError: the file is missing or not a video PyAV can open.
    """
    import av

    with av.open(path) as container:
        if not container.streams.video:
            raise ValueError("no video stream")
        stream = container.streams.video[0]
        fps = float(stream.average_rate or stream.guessed_rate or 0)
        frames = stream.frames
        if not frames and stream.duration and stream.time_base:
            frames = int(float(stream.duration * stream.time_base) * fps)
        if not frames or fps <= 0:
            raise ValueError("the header gives no frame count or frame rate")
        return VideoHeader(stream.codec_context.height, stream.codec_context.width, fps, int(frames))


@lru_cache(maxsize=100_000)
def image_size(path: str) -> tuple[int, int]:
    """``(height, width)`` from the image's header (PIL reads no pixels until asked)."""
    from PIL import Image

    with Image.open(path) as image:
        width, height = image.size
    return height, width


class TokenCounter:
    """Counts samples' tokens for one family, media spec, processor and tokenizer.

    Args:
        video_tokens: ``(frames, height, width) -> tokens`` for one span as the processor receives it, the
            chat format's markers around it included (``models.visual_tokens``).
        image_tokens: ``(height, width) -> tokens`` for one still, likewise.
        chat: the family's chat format (``models.chat.chat_format_for``): its system turn and turn markers
            are text the sample's sequence holds too.
        tokenizer: the checkpoint's tokenizer, or None to estimate text at ``CHARS_PER_TOKEN``.
        follow_on: whether later spans of a video are sampled at its first span's rate
            (``models.chat.follows_on``).
    """

    def __init__(self, spec: MediaSpec, video_tokens, image_tokens, chat, tokenizer, *, follow_on: bool):
        self.spec, self.chat, self.follow_on, self.tokenizer = spec, chat, follow_on, tokenizer
        self.video_tokens, self.image_tokens = video_tokens, image_tokens

    def count(self, samples: list[Sample]) -> TokenCounts:
        counts = TokenCounts()
        for sample in samples:
            try:
                counts.samples.append(self.sample(sample))
            except _Unreadable as bad:
                counts.unreadable.setdefault(bad.path, bad.reason)
                counts.skipped_samples += 1
        return counts

    def sample(self, sample: Sample) -> SampleTokens:
        videos = [p for turn in sample.turns for p in turn.parts if p.type == "video"]
        specs = span_specs(sample, self.spec, follow_on=self.follow_on)
        spans = [self._span(part, spec) for part, spec in zip(videos, specs, strict=True)]
        stills = [p for turn in sample.turns for p in turn.parts if p.type == "image"]
        sizes = [self._still(part.path) for part in stills]
        return SampleTokens(
            sample_id=sample.id,
            video=[self.video_tokens(*span) for span in spans],
            images=[self.image_tokens(*size) for size in sizes],
            text=self.text_tokens(self._text(sample)),
            labelled=sum(self.text_tokens(turn.text) + 1 for turn in sample.turns if turn.loss),  # + turn end
            video_frames=spans,
            image_sizes=sizes,
        )

    def _text(self, sample: Sample) -> str:
        """The sample's text as ``models.chat`` renders it, without the media placeholders (counted apart)."""
        chat = self.chat
        turns = [(turn.role, turn.text) for turn in sample.turns]
        if chat.system:
            turns.insert(0, ("system", chat.system))
        return "".join(f"{chat.turn_start}{role}\n{text}{chat.turn_end}\n" for role, text in turns)

    def text_tokens(self, text: str) -> int:
        if self.tokenizer is None:
            return math.ceil(len(text) / CHARS_PER_TOKEN)
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _span(self, part, spec: MediaSpec) -> tuple[int, int, int]:
        try:
            header = video_header(str(part.path))
        except Exception as exc:  # any reader failure: the file is named and counted, the plan goes on
            raise _Unreadable(str(part.path), _reason(exc)) from None
        frames = len(sample_indices(header.frames, header.fps, part.start, part.end, spec))
        return (frames, *frame_size(spec, header.height, header.width, image=False))

    def _still(self, path: str) -> tuple[int, int]:
        try:
            height, width = image_size(str(path))
        except Exception as exc:
            raise _Unreadable(str(path), _reason(exc)) from None
        return frame_size(self.spec, height, width, image=True)

    def worst_case(self, counts: TokenCounts) -> SampleTokens:
        """A sample at the media limits: of the item shapes the samples have (``ITEM_SHAPES`` without
        data), the one with the most tokens when each span has its most frames and every frame and still the
        largest size the spec lets through; with the most text and labelled tokens any sample has."""
        if counts.samples:
            shapes = {(len(s.video), len(s.images)) for s in counts.samples}
            text = max(s.text for s in counts.samples)
            labelled = max(s.labelled for s in counts.samples)
        else:
            shapes, text, labelled = set(ITEM_SHAPES), DEFAULT_TEXT_TOKENS, DEFAULT_TEXT_TOKENS // 10
        frames = self.spec.num_frames or self.spec.max_frames
        frames = max(self.spec.min_frames, min(self.spec.max_frames, frames))
        video = max(
            ((frames, *frame_size(self.spec, h, w, image=False)) for h, w in _at_limit(self.spec.max_pixels)),
            key=lambda span: self.video_tokens(*span),
        )
        image = max(
            (frame_size(self.spec, h, w, image=True) for h, w in _at_limit(self.spec.image_max_pixels)),
            key=lambda size: self.image_tokens(*size),
        )
        spans, stills = max(
            shapes, key=lambda s: s[0] * self.video_tokens(*video) + s[1] * self.image_tokens(*image)
        )
        return SampleTokens(
            sample_id=f"worst case by the media limits: {spans} video span(s), {stills} still(s)",
            video=[self.video_tokens(*video)] * spans,
            images=[self.image_tokens(*image)] * stills,
            text=text,
            labelled=labelled,
            video_frames=[video] * spans,
            image_sizes=[image] * stills,
        )

    def samples_to_measure(self, counts: TokenCounts) -> list[tuple[str, SampleTokens]]:
        """The samples activations are measured at: the set's p95 sample by total tokens (when there is a
        set) and the worst case by the media limits."""
        samples = [("worst", self.worst_case(counts))]
        if counts.samples:
            p95 = percentiles([s.total for s in counts.samples])["p95"]
            samples.insert(0, ("p95", next(s for s in counts.samples if s.total == p95)))
        return samples


def _at_limit(pixels: int) -> list[tuple[int, int]]:
    """Source sizes of ``pixels`` pixels in each of ``WORST_IMAGE_ASPECTS`` (and 4K UHD, a common largest)."""
    sizes = [(2160, 3840)]
    for h, w in WORST_IMAGE_ASPECTS:
        scale = math.sqrt(pixels / (h * w))
        sizes.append((max(1, int(h * scale)), max(1, int(w * scale))))
    return sizes


def percentiles(values: list[int]) -> dict[str, int]:
    """min / p50 / p95 / max of ``values`` (nearest rank, so each is a value some sample has)."""
    if not values:
        return {}
    ordered = np.sort(np.asarray(values))
    rank = {name: int(math.ceil(q * len(ordered))) - 1 for name, q in (("p50", 0.5), ("p95", 0.95))}
    return {
        "min": int(ordered[0]),
        "p50": int(ordered[max(0, rank["p50"])]),
        "p95": int(ordered[max(0, rank["p95"])]),
        "max": int(ordered[-1]),
    }


class _Unreadable(Exception):
    def __init__(self, path: str, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = path, reason


def _reason(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
