"""A model behind an OpenAI-compatible server, asked exactly what the in-process model is asked: the
evaluation's served predictor (the ``eval.predictor.Predictor`` face: ``generate``, ``loglikelihood``) and
GRPO's served sampler (``train.served_rollouts``: ``interrupted``, ``sampled``). It stands below both, with
its launcher (``models.server_process``).

Each sample becomes chat messages with the chat format's system turn and part order; each video span is
decoded by our media spec (the frame cache's very frames) and written as a lossless MP4 (``libx264rgb``,
QP 0) at the rate its frames were sampled at, so the server's processor decodes the same pixels and derives
the same frame rate (Qwen2.5-VL's temporal positions depend on it); images go as PNG. The server must
take every frame as given: ``chat_template_kwargs`` asks ``transformers serve`` not to resample (vLLM needs
``--media-io-kwargs '{"video": {"num_frames": -1}}'``, see docs/serving.md).

OVIBench's simulated protocol runs as two requests: the answer, limited to the interruption point's token
count (``finish_reason`` tells whether it ended first), then the conversation with that answer as the
assistant turn, the interruption and a new assistant turn. Unlike the in-process simulation, the answer
goes back as text, which the server tokenizes again, and media placeholder tokens are not kept out of it.

What the served engine cannot reproduce is named in every result's setting (``engine: served``): served and
in-process results are never compared with each other.
"""

from __future__ import annotations

import base64
import hashlib
import io
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from core.config import ModelConfig, OviProtocol, RunConfig, ServerConfig, VideoTransport
from core.decoding import Clip
from core.errors import UserError
from core.files import atomic_dir, atomic_path
from core.media import load_image, span_specs
from core.rundir import RunDir
from core.sample import Part, Sample, Turn
from core.text_models import EndpointTextModel, Reply, TextModelConfig
from models.chat import VideoChatAdapter
from models.loading import is_adapter, save_merged
from models.ovi_simulation import interruption_cut
from models.server_process import launched_server

ENGINE = "served"
NOT_SERVED = (
    "a model served through an OpenAI-compatible API (eval.server) gives no log-probabilities of given "
    "completions: evaluate in process to score this benchmark"
)
# transformers serve samples 32 frames from any video unless told otherwise; our frames are already sampled.
_TAKE_EVERY_FRAME = {"chat_template_kwargs": {"num_frames": None, "do_sample_frames": False}}
# vLLM's extension for the sampled tokens as ids, with their log-probabilities
_SAMPLED_TOKENS = {"logprobs": True, "top_logprobs": 0, "return_tokens_as_token_ids": True}
_CLIP_FORMAT_VERSION = 1  # bump when the written clips change


class NotServed(UserError, RuntimeError):
    """What a predictor cannot compute: a served model gives no log-probabilities of given text."""


class ServedModel:
    """A model behind an OpenAI-compatible server, answering benchmark samples (an ``eval.predictor``
    ``Predictor`` that generates only) and sampling GRPO's groups.

    Args:
        base_url: the server's ``/v1`` URL; model: the served model's name.
        chat: the adapter of the model's family (its chat format, media spec and frame cache).
        cfg: ``eval.server`` (request concurrency, timeouts, how videos travel).
        clip_dir: where the MP4 clips sent to the server are kept (reused across models and runs).
    """

    def __init__(self, base_url: str, model: str, chat: VideoChatAdapter, cfg: ServerConfig, clip_dir: Path):
        endpoint = replace(cfg.endpoint, base_url=base_url)
        text = TextModelConfig(model=model, temperature=0.0, endpoint=endpoint)
        self.client = EndpointTextModel(text, setting="eval.server.endpoint.base_url")
        self.chat, self.cfg, self.clip_dir = chat, cfg, clip_dir
        self.workers = max(1, cfg.endpoint.workers)
        self.quantization = str(None)  # whatever the server does with the weights, it is not ours to key

    # -- the two ways an item is answered ------------------------------------------------------------

    def answers(self, samples: list[Sample], max_new_tokens: int) -> list[str]:
        """Greedy answers to the samples' given turns, ``workers`` requests in flight."""
        with ThreadPoolExecutor(self.workers) as pool:
            return list(pool.map(lambda s: self._answer(s, max_new_tokens), samples))

    def simulations(self, samples: list[Sample], max_new_tokens: int) -> list[dict[str, Any]]:
        """The simulated interruption of each sample: its reaction, cut answer and counts."""
        with ThreadPoolExecutor(self.workers) as pool:
            return list(pool.map(lambda s: self._simulate(s, max_new_tokens), samples))

    def _answer(self, sample: Sample, max_new_tokens: int) -> str:
        turns = sample.turns[:-1]  # the last turn is the reference
        messages = self.messages(replace(sample, turns=turns))
        return self.client.reply(
            messages, seed=None, max_tokens=max_new_tokens, extra=_TAKE_EVERY_FRAME
        ).content

    def interrupted(self, sample: Sample) -> tuple[Sample, Reply]:
        """OVIBench's simulation up to the interruption: the sample with the model's own answer (greedy, cut
        at the interruption point) in place of the dataset's partial answer, and that answer's reply (its
        ``finish_reason`` says whether it ended first). The last turn, the reference reaction, is kept."""
        question, _, interruption, reference = sample.turns
        prefix = self.messages(replace(sample, turns=[question]))
        cut = interruption_cut(sample)
        answer = self.client.reply(prefix, seed=None, max_tokens=cut, extra=_TAKE_EVERY_FRAME)
        spoken = Turn("assistant", [Part.txt(answer.content)])
        return replace(sample, turns=[question, spoken, interruption, reference]), answer

    def sampled(
        self, sample: Sample, seeds: list[int], temperature: float, max_new_tokens: int
    ) -> list[Reply]:
        """Replies to the sample's given turns (its last, the reference, left out) sampled at
        ``temperature``, one request per seed (a server given the same prompt again reuses its cache where it
        has prefix caching, as vLLM does; ``n`` is not every server's); with ``sampled_tokens``, each with
        its tokens' ids and log-probabilities."""
        messages = self.messages(replace(sample, turns=sample.turns[:-1]))
        extra = {**_TAKE_EVERY_FRAME, "temperature": temperature}
        if self.cfg.sampled_tokens:
            extra |= _SAMPLED_TOKENS
        with ThreadPoolExecutor(min(self.workers, len(seeds))) as pool:
            replies = pool.map(
                lambda seed: self.client.reply(messages, seed=seed, max_tokens=max_new_tokens, extra=extra),
                seeds,
            )
            return list(replies)

    def _simulate(self, sample: Sample, max_new_tokens: int) -> dict[str, Any]:
        start = time.perf_counter()
        interrupted, answer = self.interrupted(sample)
        middle = time.perf_counter()
        full = self.messages(replace(interrupted, turns=interrupted.turns[:-1]))
        reaction = self.client.reply(full, seed=None, max_tokens=max_new_tokens, extra=_TAKE_EVERY_FRAME)
        end = time.perf_counter()
        return {
            "prediction": reaction.content,
            "truncated_answer": answer.content,
            "simulation": {
                "engine": ENGINE,
                "cut_tokens": interruption_cut(sample),
                "answer_finished": answer.finish_reason == "stop",
                "answer_seconds": round(middle - start, 4),
                "continuation_seconds": round(end - middle, 4),
            },
        }

    def generate(self, samples: list[Sample], protocol: OviProtocol, max_new_tokens: int) -> list[dict]:
        """Result fields (``prediction``, and a simulation's extras) per sample, in order."""
        if protocol == OviProtocol.simulated:
            return self.simulations(samples, max_new_tokens)
        return [{"prediction": p} for p in self.answers(samples, max_new_tokens)]

    def loglikelihood(self, samples: list[Sample]) -> list[float]:
        raise NotServed(NOT_SERVED)

    # -- what is sent --------------------------------------------------------------------------------

    def messages(self, sample: Sample) -> list[dict[str, Any]]:
        """The sample's turns as OpenAI chat messages: the chat format's system turn, each turn's parts in
        the format's order, every video span sampled as the in-process adapter samples it."""
        chat = self.chat
        specs = iter(span_specs(sample, chat.media, follow_on=chat.follow_on))
        messages = [{"role": "system", "content": chat.chat.system}] if chat.chat.system else []
        for turn in sample.turns:
            content = []
            for part in chat.parts_in_order(turn):
                if part.type == "video":
                    clip = chat.cache.clip(part.path, part.start, part.end, next(specs))
                    content.append({"type": "video_url", "video_url": {"url": self._video(part, clip)}})
                elif part.type == "image":
                    url = _data_url("image/png", _png(load_image(part.path, chat.media)))
                    content.append({"type": "image_url", "image_url": {"url": url}})
                else:
                    content.append({"type": "text", "text": part.text or ""})
            messages.append({"role": turn.role, "content": content})
        return messages

    def _video(self, part: Part, clip: Clip) -> str:
        """A URL the server reads the clip from: a data: URI, or the path of the clip's file."""
        # The server derives the model's timing from the file's rate: Qwen2.5-VL's temporal positions
        # take the media spec's position_fps where it sets one, as the in-process adapter gives them.
        position_fps = self.chat.media.position_fps
        by_rate = position_fps is not None and self.chat.positions_by_rate
        rate = Fraction(position_fps).limit_denominator(1_000_000) if by_rate else sampled_rate(clip)
        key = f"{_CLIP_FORMAT_VERSION}|{part.path}|{part.start}|{part.end}|{clip.indices}|{clip.frames.shape}"
        file = self.clip_dir / f"{hashlib.sha1(f'{key}|{rate}'.encode()).hexdigest()}.mp4"
        if not file.exists():
            with atomic_path(file) as tmp:
                write_lossless_mp4(tmp, clip.frames, rate)
        if self.cfg.video is VideoTransport.path:
            return str(file.resolve())
        return _data_url("video/mp4", file.read_bytes())


def sampled_rate(clip: Clip) -> Fraction:
    """The rate the clip's frames were taken at, as the processors derive it (frames / span frames × fps)."""
    rate = len(clip.indices) / clip.span_frames * clip.fps
    return Fraction(rate).limit_denominator(1_000_000)


def write_lossless_mp4(path: Path, frames: np.ndarray, rate: Fraction) -> None:
    """Frames (uint8 T×H×W×3) as an MP4 that decodes to the same pixels, with a silent audio track:
    ``transformers serve`` reads audio from every video of a model it counts as multimodal, and a video
    without an audio stream fails there."""
    import av

    with av.open(str(path), "w", format="mp4") as container:
        video = container.add_stream("libx264rgb", rate=rate)
        video.height, video.width = frames.shape[1:3]
        video.pix_fmt = "rgb24"
        video.options = {"qp": "0", "preset": "ultrafast"}
        audio = container.add_stream("aac", rate=16000)
        audio.layout = "mono"
        for frame in frames:
            container.mux(
                video.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24"))
            )
        container.mux(video.encode())
        seconds = max(1, round(len(frames) / float(rate)))
        silence = av.AudioFrame.from_ndarray(
            np.zeros((1, 16000 * seconds), np.float32), format="fltp", layout="mono"
        )
        silence.sample_rate = 16000
        container.mux(audio.encode(silence))
        container.mux(audio.encode())


def _png(image: np.ndarray) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return buffer.getvalue()


def _data_url(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


@contextmanager
def serving(
    cfg: RunConfig, weights: Path | str, chat: VideoChatAdapter, run_dir: RunDir
) -> Iterator[ServedModel]:
    """The model at ``weights`` behind a server: launched by ``eval.server.command`` for the block (its
    log in ``<run_dir>/eval/server.log``), or the running server at ``eval.server.endpoint.base_url``."""
    server = cfg.eval.server
    name = server.model or str(weights)
    clip_dir = run_dir.served_clips_dir
    if not server.command:
        yield ServedModel(server.endpoint.base_url, name, chat, server, clip_dir)
        return
    log = run_dir.server_log_file
    with launched_server(server.command, weights, log, server.startup_timeout_s) as base_url:
        yield ServedModel(base_url, name, chat, server, clip_dir)


def served_weights(cfg: ModelConfig, checkpoint: Path | None, processor, out_root: Path) -> Path:
    """A directory a server can load for the model evaluated: the base, a full checkpoint, or a LoRA
    checkpoint merged into its base (written once under ``out_root``, with the processor and its chat
    template). A LoRA adapter is always merged: vLLM would ignore its vision-tower, projector and
    ``modules_to_save`` weights, and a merged model needs no adapter support from the server."""
    if checkpoint is None:
        return Path(cfg.name_or_path)
    out = out_root / checkpoint.name
    if (out / "config.json").exists():
        return out
    if is_adapter(checkpoint):
        save_merged(cfg, checkpoint, out)
        return out
    with atomic_dir(out) as tmp:  # the training saved weights and config; the server also needs the processor
        processor.save_pretrained(tmp)
        for file in checkpoint.iterdir():  # linked beside it, never written through
            if file.is_file() and not (tmp / file.name).exists():
                (tmp / file.name).symlink_to(file.resolve())
    return out
