"""The chat adapter: our conversation samples → a model family's processor inputs, label masks and
generation prompts.

One adapter serves training and evaluation, so the prompt a model is trained on is the prompt it is
scored on. All five supported families (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, LLaVA-OneVision, InternVL3) speak
ChatML (``<|im_start|>role\\n … <|im_end|>\\n``); they differ only in the system prompt and in the
placeholder each puts where a video or an image goes, which its processor then expands into vision
tokens. So one adapter class, parameterised by a small per-family ``ChatFormat``, covers them all.

``model.chat_format`` picks between the format a family's weights were trained with (``trained``, the
default and the lmms-eval convention) and its checkpoint's released HF chat template (``released``). Only
LLaVA-OneVision's differ: the released template has no system turn and puts a turn's media before its text.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace

import torch

from core.config import SYSTEM_PROMPTS, ChatFormatVariant
from core.decoding import MediaSpec
from core.errors import ConfigError
from core.media import FrameCache, load_image, span_specs
from core.sample import Part, Sample, Turn

IGNORE_INDEX = -100
# Bump when VideoChatAdapter.render changes how it writes a conversation (the formats' fields are hashed
# as they are): stored evaluation predictions are then generated again.
RENDER_VERSION = 1
_QWEN_VIDEO = "<|vision_start|><|video_pad|><|vision_end|>"
_QWEN_IMAGE = "<|vision_start|><|image_pad|><|vision_end|>"


@dataclass(frozen=True)
class ChatFormat:
    """How one model family writes a conversation, following the format its checkpoints were tuned on.

    Attributes:
        system: the system turn's text, or None for no system turn.
        video: what stands for one video span in a user turn (the processor expands it).
        image: what stands for one still image in a user turn (the processor expands it).
        turn_start: opens a turn, followed by the role and a newline.
        turn_end: closes a turn; supervised with each trained assistant turn, so the model learns to stop.
        media_first: within each turn, every image placeholder, then every video placeholder, then the
            text; False keeps the parts where the sample puts them.
    """

    system: str | None
    video: str
    image: str
    turn_start: str = "<|im_start|>"
    turn_end: str = "<|im_end|>"
    media_first: bool = False

    @property
    def fingerprint(self) -> str:
        """A short hash of how prompts are rendered: part of every evaluation result's setting, so a change
        to a chat format (or to ``RENDER_VERSION``) makes stored predictions be generated again."""
        fields = {"render_version": RENDER_VERSION, **asdict(self)}
        if not self.media_first:  # added later: the formats without it keep their stored predictions
            del fields["media_first"]
        return hashlib.sha1(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:12]


CHAT_FORMATS = {
    # Qwen2-VL and Qwen2.5-VL: the default system prompt of their chat templates.
    "qwen2_vl": ChatFormat(SYSTEM_PROMPTS["qwen2_vl"], _QWEN_VIDEO, _QWEN_IMAGE),
    "qwen2_5_vl": ChatFormat(SYSTEM_PROMPTS["qwen2_5_vl"], _QWEN_VIDEO, _QWEN_IMAGE),
    # Qwen3-VL: no default system turn. A bare <|video_pad|>: its processor expands it into
    # "<t seconds><|vision_start|>…<|vision_end|>" per frame pair, so wrapping it would nest the markers.
    "qwen3_vl": ChatFormat(SYSTEM_PROMPTS["qwen3_vl"], "<|video_pad|>", _QWEN_IMAGE),
    # LLaVA-OneVision (Qwen2 LM): the ChatML "qwen_1_5" format it was trained with, media then a newline.
    "llava_onevision": ChatFormat(SYSTEM_PROMPTS["llava_onevision"], "<video>\n", "<image>\n"),
    # InternVL (HF-native conversion): "<video>" becomes "Frame1: <img>…</img>\nFrame2: …" and
    # "<IMG_CONTEXT>" one "<img>…</img>" run per tile; no system turn, as in the -hf chat template.
    "internvl": ChatFormat(SYSTEM_PROMPTS["internvl"], "<video>\n", "<IMG_CONTEXT>\n"),
}

# model.chat_format=released: the released HF chat templates, where they write a conversation otherwise than
# CHAT_FORMATS. Qwen2-VL, Qwen2.5-VL, Qwen3-VL and InternVL3 are absent: their released templates give the
# same model inputs as the format they were trained with, so both choices render them alike.
RELEASED_CHAT_FORMATS = {
    # llava-hf/llava-onevision-qwen2-*-ov-hf: no system turn; in each turn "<image>\n" per image, then
    # "<video>\n" per video, then the text.
    "llava_onevision": ChatFormat(None, "<video>\n", "<image>\n", media_first=True),
}
# How a media_first format orders a turn's parts.
_MEDIA_FIRST_ORDER = {"image": 0, "video": 1, "text": 2}


@dataclass
class Rendered:
    """A sample rendered to text with its decoded media, in placeholder order."""

    text: str
    videos: list = field(default_factory=list)
    video_metadata: list = field(default_factory=list)
    images: list = field(default_factory=list)
    loss_flags: list[bool] = field(default_factory=list)  # one per assistant turn in `text`


class VideoChatAdapter:
    """Turns samples into a model family's processor inputs, training labels and generation prompts.

    Args:
        processor: the checkpoint's HF processor.
        media: the run's media spec; frames come from ``cache`` (decoded once per video and spec).
        cache: the frame cache shared by training and evaluation.
        chat: the family's chat format (``chat_format_for(family, variant)``); Qwen2.5-VL's by default.
        follow_on: sample a later span of a video the sample already showed (an OVI interruption's clip)
            at its first span's frame rate (``core.media.follow_on_spec``); False for a family
            whose processor needs one frame count for every span.
    """

    def __init__(
        self,
        processor,
        media: MediaSpec,
        cache: FrameCache,
        chat: ChatFormat | None = None,
        *,
        follow_on: bool = True,
    ):
        self.processor = processor
        self.media = media
        self.cache = cache
        self.chat = chat or CHAT_FORMATS["qwen2_5_vl"]
        self.follow_on = follow_on
        tokenizer = processor.tokenizer
        self.pad_id = tokenizer.pad_token_id
        self.turn_end_id = tokenizer.convert_tokens_to_ids(self.chat.turn_end)
        self._assistant_prefix = tokenizer(self._header("assistant"), add_special_tokens=False).input_ids

    def _header(self, role: str) -> str:
        return f"{self.chat.turn_start}{role}\n"

    def render(self, sample: Sample, *, for_generation: bool) -> Rendered:
        """Render a sample; for generation, drop the final assistant turn and open a new one."""
        turns = sample.turns
        if for_generation:
            assert turns[-1].role == "assistant", f"{sample.id}: the last turn must be the reference answer"
            turns = turns[:-1]
        chat = self.chat
        # Each video span's spec, in order (media_first keeps the videos' order within a turn).
        specs = iter(span_specs(replace(sample, turns=turns), self.media, follow_on=self.follow_on))
        out = Rendered(text=f"{self._header('system')}{chat.system}{chat.turn_end}\n" if chat.system else "")
        for turn in turns:
            out.text += f"{self._header(turn.role)}{self._render_parts(turn, out, specs)}{chat.turn_end}\n"
            if turn.role == "assistant":
                out.loss_flags.append(turn.loss)
        if for_generation:
            out.text += self._header("assistant")
        return out

    @property
    def positions_by_rate(self) -> bool:
        """Whether the model's temporal positions follow the seconds per temporal patch (Qwen2.5-VL), which
        ``media.position_fps`` then sets."""
        return "second_per_grid_ts" in getattr(self.processor, "model_input_names", ())

    def parts_in_order(self, turn: Turn) -> list[Part]:
        """A turn's parts in the order the chat format puts them (media first where it says so)."""
        if self.chat.media_first:  # a stable sort: images, videos and texts each keep their own order
            return sorted(turn.parts, key=lambda part: _MEDIA_FIRST_ORDER[part.type])
        return list(turn.parts)

    def _render_parts(self, turn: Turn, out: Rendered, specs: Iterator[MediaSpec]) -> str:
        text = ""
        for part in self.parts_in_order(turn):
            if part.type == "video":
                clip = self.cache.clip(part.path, part.start, part.end, next(specs))
                out.videos.append(clip.frames)
                out.video_metadata.append(clip.processor_metadata())
                text += self.chat.video
            elif part.type == "image":
                out.images.append(load_image(part.path, self.media))
                text += self.chat.image
            else:
                text += part.text
        return text

    def batch(self, rendered: list[Rendered], *, padding_side: str) -> dict:
        """Run the processor over a batch of rendered samples (right padding to train, left to generate)."""
        videos = [v for r in rendered for v in r.videos]
        metadata = [m for r in rendered for m in r.video_metadata]
        images = [i for r in rendered for i in r.images]
        # The media spec already sampled the frames: a processor that samples by default (Qwen3-VL)
        # must not sample again.
        kwargs = {"videos": videos, "video_metadata": metadata, "do_sample_frames": False} if videos else {}
        if images:
            kwargs["images"] = images
        batch = self.processor(
            text=[r.text for r in rendered],
            padding=True,
            padding_side=padding_side,
            return_tensors="pt",
            **kwargs,
        )
        if "second_per_grid_ts" in batch and self.media.position_fps is not None:
            # Qwen2.5-VL spaces a video's temporal positions by the seconds per temporal patch; the
            # official V2P script passes no rate, so its processor takes every video at position_fps.
            patch = self.processor.video_processor.temporal_patch_size
            batch["second_per_grid_ts"] = torch.full_like(
                batch["second_per_grid_ts"], patch / self.media.position_fps
            )
        return batch

    def training_batch(self, rendered: list[Rendered]) -> dict:
        """Processor inputs plus ``labels``: only assistant turns that carry loss are supervised."""
        batch = self.batch(rendered, padding_side="right")
        labels = torch.full_like(batch["input_ids"], IGNORE_INDEX)
        for row, r in enumerate(rendered):
            ids = batch["input_ids"][row].tolist()
            spans = self._assistant_spans(ids)
            assert len(spans) == len(r.loss_flags), "assistant turns and rendered spans disagree"
            for (start, end), trained in zip(spans, r.loss_flags, strict=True):
                if trained:
                    labels[row, start:end] = batch["input_ids"][row, start:end]
        batch["labels"] = labels
        return batch

    def _assistant_spans(self, ids: list[int]) -> list[tuple[int, int]]:
        """Token spans of assistant contents, each including its closing end-of-turn token (so the model
        learns to stop) and excluding the ``<|im_start|>assistant\\n`` header."""
        prefix, spans, i = self._assistant_prefix, [], 0
        while i <= len(ids) - len(prefix):
            if ids[i : i + len(prefix)] == prefix:
                start = i + len(prefix)
                end = ids.index(self.turn_end_id, start) + 1
                spans.append((start, end))
                i = end
            else:
                i += 1
        return spans

    def decode_generated(self, sequences: torch.Tensor, prompt_length: int) -> list[str]:
        """The generated continuations as text, special tokens removed."""
        return self.processor.tokenizer.batch_decode(sequences[:, prompt_length:], skip_special_tokens=True)


def chat_format_for(family: str, variant: str = ChatFormatVariant.trained) -> ChatFormat:
    """How a family's prompts are written under ``model.chat_format=variant`` (trained | released).

    Raises:
        ConfigError: the family or the variant is unknown.
    """
    if family not in CHAT_FORMATS:
        raise ConfigError(f"model.family={family!r} is not one of {', '.join(CHAT_FORMATS)}")
    if variant not in ChatFormatVariant.__members__:
        raise ConfigError(f"model.chat_format={variant!r} is not one of {', '.join(ChatFormatVariant)}")
    if variant == ChatFormatVariant.released:
        return RELEASED_CHAT_FORMATS.get(family, CHAT_FORMATS[family])
    return CHAT_FORMATS[family]


# Their processors stack all videos of a batch into one tensor, so every span needs the same frame count.
_FIXED_FRAME_COUNT = {"llava_onevision", "internvl"}


def make_adapter(
    family: str, processor, media: MediaSpec, cache: FrameCache, chat_format: str = ChatFormatVariant.trained
) -> VideoChatAdapter:
    """The adapter for a model family (``model.family``: a key of ``CHAT_FORMATS``) and its prompt format
    (``model.chat_format``).

    Raises:
        ConfigError: the family or the chat format is unknown, or the family needs a fixed frame count and
            ``media.num_frames`` is unset.
    """
    chat = chat_format_for(family, chat_format)
    if family in _FIXED_FRAME_COUNT and media.num_frames is None:
        raise ConfigError(
            f"model.family={family} needs media.num_frames: its processor stacks the videos of a batch into "
            f"one tensor, so every span must have the same frame count (media.fps sampling varies it)"
        )
    return VideoChatAdapter(processor, media, cache, chat, follow_on=follows_on(family))


def follows_on(family: str) -> bool:
    """Whether a family samples a later span of a video at its first span's frame rate (its processor
    takes spans of different frame counts); the media check warms the frame cache the same way."""
    return family not in _FIXED_FRAME_COUNT
