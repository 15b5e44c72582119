"""The Qwen-VL family adapter: our conversation samples → processor inputs, label masks, prompts.

One adapter serves training and evaluation, so the prompt a model is trained on is the prompt it is
scored on. Rendering follows the Qwen chat format (``<|im_start|>role\\n … <|im_end|>``) with
``<|vision_start|><|video_pad|><|vision_end|>`` placeholders that the processor expands.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from data_builders.media import FrameCache, MediaSpec, load_image
from data_builders.sample import Sample, Turn

IGNORE_INDEX = -100
SYSTEM_PROMPT = "You are a helpful assistant."
_VIDEO = "<|vision_start|><|video_pad|><|vision_end|>"
_IMAGE = "<|vision_start|><|image_pad|><|vision_end|>"


@dataclass
class Rendered:
    """A sample rendered to text with its decoded media, in placeholder order."""

    text: str
    videos: list = field(default_factory=list)
    video_metadata: list = field(default_factory=list)
    images: list = field(default_factory=list)
    loss_flags: list[bool] = field(default_factory=list)  # one per assistant turn in `text`


class QwenVLAdapter:
    """Turns samples into Qwen2-VL / Qwen2.5-VL processor inputs.

    Args:
        processor: the checkpoint's HF processor.
        media: the run's media spec; frames come from ``cache`` (decoded once per video and spec).
    """

    def __init__(self, processor, media: MediaSpec, cache: FrameCache):
        self.processor = processor
        self.media = media
        self.cache = cache
        tokenizer = processor.tokenizer
        self.pad_id = tokenizer.pad_token_id
        self.im_end_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self._assistant_prefix = tokenizer("<|im_start|>assistant\n", add_special_tokens=False).input_ids

    def render(self, sample: Sample, *, for_generation: bool) -> Rendered:
        """Render a sample; for generation, drop the final assistant turn and open a new one."""
        turns = sample.turns
        if for_generation:
            assert turns[-1].role == "assistant", f"{sample.id}: the last turn must be the reference answer"
            turns = turns[:-1]
        out = Rendered(text=f"<|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n")
        for turn in turns:
            out.text += f"<|im_start|>{turn.role}\n{self._render_parts(turn, out)}<|im_end|>\n"
            if turn.role == "assistant":
                out.loss_flags.append(turn.loss)
        if for_generation:
            out.text += "<|im_start|>assistant\n"
        return out

    def _render_parts(self, turn: Turn, out: Rendered) -> str:
        text = ""
        for part in turn.parts:
            if part.type == "video":
                clip = self.cache.clip(part.path, part.start, part.end, self.media)
                out.videos.append(clip.frames)
                out.video_metadata.append(clip.processor_metadata())
                text += _VIDEO
            elif part.type == "image":
                out.images.append(load_image(part.path, self.media))
                text += _IMAGE
            else:
                text += part.text
        return text

    def batch(self, rendered: list[Rendered], *, padding_side: str) -> dict:
        """Run the processor over a batch of rendered samples (right padding to train, left to generate)."""
        videos = [v for r in rendered for v in r.videos]
        metadata = [m for r in rendered for m in r.video_metadata]
        images = [i for r in rendered for i in r.images]
        kwargs = {"videos": videos, "video_metadata": metadata} if videos else {}
        if images:
            kwargs["images"] = images
        return self.processor(
            text=[r.text for r in rendered],
            padding=True,
            padding_side=padding_side,
            return_tensors="pt",
            **kwargs,
        )

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
        """Token spans of assistant contents, each including its closing <|im_end|> (so the model
        learns to stop) and excluding the ``<|im_start|>assistant\\n`` header."""
        prefix, spans, i = self._assistant_prefix, [], 0
        while i <= len(ids) - len(prefix):
            if ids[i : i + len(prefix)] == prefix:
                start = i + len(prefix)
                end = ids.index(self.im_end_id, start) + 1
                spans.append((start, end))
                i = end
            else:
                i += 1
        return spans

    def decode_generated(self, sequences: torch.Tensor, prompt_length: int) -> list[str]:
        """The generated continuations as text, special tokens removed."""
        return self.processor.tokenizer.batch_decode(sequences[:, prompt_length:], skip_special_tokens=True)
