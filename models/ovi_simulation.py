"""OVIBench's offline interruption simulation: the model answers, is cut off, hears the interruption, reacts.

For one four-turn OVI sample (``core.formats.ovi``: question over video ``[0, t_q]`` → partial
answer → interruption with video ``(t_q, t_i]`` → reaction) the dataset's partial answer is replaced by the
model's own:

(a) the prompt up to the first assistant turn (video ``[0, t_q]`` and the question) is encoded;
(b) the model answers greedily until the interruption point: ``cut_tokens`` answer tokens, or the tokens
    spoken by ``t_i`` at ``tokens_per_second`` from ``t_q`` (an answer that ends earlier is kept whole);
(c) the end-of-turn, the interruption turn with the frames of ``(t_q, t_i]`` and the assistant header are
    appended after the truncated answer;
(d) the model continues greedily: its reaction.

``continue_from_cache=True`` keeps the key/value cache of (a)+(b) and encodes only the appended tokens
(LiveCC-style streaming); ``False`` re-encodes the whole conversation from scratch. Both see the very same
token ids: the truncated answer is fed back as the ids the model produced, never re-tokenised text (a BPE
round trip may split it differently), so the two differ only in what they compute.

Positions are passed explicitly on every forward. In Qwen2.5-VL's multimodal RoPE a video's tokens get
(temporal, height, width) ids starting from the current text position, and text after a video continues
from the video's largest id + 1 (:mod:`models.rope`), not from the token count; so the ids of the appended
video, and of every token after it, depend on the whole conversation. Left alone, the model derives ids
during a cached continuation from ``rope_deltas``, state stored on the model by whichever call came
before. Here they come from the model's own ``get_rope_index`` over the whole conversation (integer work on
the ids, no model compute) and the slice for the tokens being encoded is passed; each decoded token takes
the next text position (the last token's plus one). So the cached and the re-encoded runs use identical
ids by construction, and the ids are those the same tokens get in a teacher-forced (training) forward.
The tests show that ids merely counted on from the cache change the output.

Decoded tokens take the last position + 1, as ``generate`` does. With the released Qwen-VL positions
(:mod:`models.rope`, applied by ``load_model``) the text after any video starts past the video's largest
id, so the last position of a prompt is also its largest. The second span's temporal ids start from the
text position, not from t_q: that is how Qwen2.5-VL places any later video.

Families without ``get_rope_index`` (plain 1-D RoPE) get ``arange`` positions.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from core.sample import Part, Sample, Turn
from models.batch import concat, text_piece, to_device
from models.cached_decoder import CachedDecoder
from models.chat import Rendered, VideoChatAdapter

DEFAULT_TOKENS_PER_SECOND = 3.0  # speech rate after t_q: roughly 2-3 words/s of spoken English
# No answer is cut before this many tokens (an interruption within the first second of speech would leave
# nothing to react to); an answer that ends sooner is kept whole and counted as finished.
MIN_CUT_TOKENS = 3
# Floating-point slack when a time span is turned into whole tokens ((5.4 - 5.0) * 3 = 1.2000000000000028).
_EPS = 1e-6


@dataclass
class SimulationResult:
    """What one simulated interruption produced.

    Attributes:
        truncated_answer: the model's own answer up to the interruption point (special tokens removed).
        reaction: the model's continuation after the interruption turn: the prediction to score.
        answer_ids, reaction_ids: the generated token ids (no end-of-turn token).
        cut_tokens: the interruption point in answer tokens.
        answer_finished: the answer ended (end-of-turn) before the interruption point.
        prompt_tokens: tokens of step (a), the prompt up to the first assistant turn.
        appended_tokens: tokens of step (c): end-of-turn, interruption turn with its video, assistant header.
        appended_video_spans: ``(start, end)`` seconds of each video part of the interruption turn.
        encoded_tokens: tokens run through the model between the cut and the reaction's first token: the
            appended ones (plus the answer's last token) from the cache, or the whole conversation.
        answer_seconds: wall time of steps (a)+(b).
        continuation_seconds: wall time of steps (c)+(d), the part the two implementations differ in.
        first_reaction_seconds: wall time from the cut to the reaction's first token (the encoding of
            step (c)): the user's wait after interrupting.
        continue_from_cache: which implementation ran.
    """

    truncated_answer: str
    reaction: str
    answer_ids: list[int]
    reaction_ids: list[int]
    cut_tokens: int
    answer_finished: bool
    prompt_tokens: int
    appended_tokens: int
    appended_video_spans: list[tuple[float, float]]
    encoded_tokens: int
    answer_seconds: float
    continuation_seconds: float
    first_reaction_seconds: float
    continue_from_cache: bool

    def stats(self) -> dict[str, Any]:
        """Counts and timings for a result record (no texts, no ids)."""
        return {
            "cut_tokens": self.cut_tokens,
            "answer_tokens": len(self.answer_ids),
            "answer_finished": self.answer_finished,
            "reaction_tokens": len(self.reaction_ids),
            "prompt_tokens": self.prompt_tokens,
            "appended_tokens": self.appended_tokens,
            "encoded_tokens": self.encoded_tokens,
            "answer_seconds": round(self.answer_seconds, 4),
            "continuation_seconds": round(self.continuation_seconds, 4),
            "first_reaction_seconds": round(self.first_reaction_seconds, 4),
            "continue_from_cache": self.continue_from_cache,
        }


@dataclass
class SimulationInputs:
    """Processor inputs of the two pieces around the model's answer.

    Attributes:
        prefix: step (a): system, the question turn with video ``[0, t_q]``, the open assistant header.
        appended: step (c): end-of-turn, the interruption turn with its video, the next assistant header.
        prefix_rendered, appended_rendered: the rendered text and decoded media of each.
        appended_video_spans: ``(start, end)`` of each video part of the interruption turn.
    """

    prefix: dict[str, torch.Tensor]
    appended: dict[str, torch.Tensor]
    prefix_rendered: Rendered
    appended_rendered: Rendered
    appended_video_spans: list[tuple[float, float]] = field(default_factory=list)


def interruption_cut(
    sample: Sample, cut_tokens: int | None = None, tokens_per_second: float = DEFAULT_TOKENS_PER_SECOND
) -> int:
    """The interruption point in answer tokens.

    Args:
        sample: an OVI sample whose meta holds ``question_time`` and ``interruption_time`` (seconds).
        cut_tokens: a fixed token offset; overrides the time mapping when given.
        tokens_per_second: speaking rate from ``t_q`` on; the cut is the tokens fully spoken by ``t_i``,
            and at least ``MIN_CUT_TOKENS``.

    Raises:
        ValueError: on a negative offset or rate, or a sample without the two times.
    """
    if cut_tokens is not None:
        if cut_tokens < 0:
            raise ValueError(f"cut_tokens must be >= 0, got {cut_tokens}")
        return int(cut_tokens)
    if tokens_per_second <= 0:
        raise ValueError(f"tokens_per_second must be positive, got {tokens_per_second}")
    meta = sample.meta
    if "question_time" not in meta or "interruption_time" not in meta:
        raise ValueError(f"{sample.id}: meta lacks question_time / interruption_time; pass cut_tokens")
    spoken = (float(meta["interruption_time"]) - float(meta["question_time"])) * tokens_per_second
    return max(MIN_CUT_TOKENS, math.floor(spoken + _EPS))


def prepare_inputs(adapter: VideoChatAdapter, sample: Sample) -> SimulationInputs:
    """Render and process the prompt of step (a) and the appended turn of step (c).

    The adapter renders the conversation with an empty answer; the text before the answer is the prefix
    and the text after it (from the end-of-turn on) is what is appended, with the media that follow.

    Raises:
        ValueError: when the sample is not question → answer → interruption → reaction, or the adapter's
            rendering of the full conversation does not start with its rendering of the prompt.
    """
    question, _, interruption, reference = _check_shape(sample)
    empty_answer = Turn("assistant", [Part.txt("")], loss=False)
    prefix = adapter.render(_with_turns(sample, [question, reference]), for_generation=True)
    full = adapter.render(
        _with_turns(sample, [question, empty_answer, interruption, reference]), for_generation=True
    )
    if not full.text.startswith(prefix.text):
        raise ValueError(f"{sample.id}: the adapter's rendering is not prefix-stable; cannot append a turn")
    appended = Rendered(
        text=full.text[len(prefix.text) :],
        videos=full.videos[len(prefix.videos) :],
        video_metadata=full.video_metadata[len(prefix.video_metadata) :],
        images=full.images[len(prefix.images) :],
    )
    spans = [(float(p.start), float(p.end)) for p in interruption.parts if p.type == "video"]
    return SimulationInputs(
        prefix=dict(adapter.batch([prefix], padding_side="left")),
        appended=dict(adapter.batch([appended], padding_side="left")),
        prefix_rendered=prefix,
        appended_rendered=appended,
        appended_video_spans=spans,
    )


@torch.inference_mode()
def simulate_interruption(
    model,
    adapter: VideoChatAdapter,
    sample: Sample,
    *,
    cut_tokens: int | None = None,
    tokens_per_second: float = DEFAULT_TOKENS_PER_SECOND,
    max_new_tokens: int = 128,
    continue_from_cache: bool = True,
    synced: bool = False,
) -> SimulationResult:
    """Run the offline interruption simulation on one OVI sample (greedy decoding, batch of one).

    Media placeholder tokens are never chosen while decoding: fed back inside the answer they would be read
    as media slots. Otherwise the answer is exactly what ``generate`` gives greedily.

    Args:
        model: a Qwen2.5-VL-style model (a PEFT wrapper is fine), in eval mode.
        adapter: renders and processes the sample (the one used for training and evaluation).
        sample: question → answer → interruption → reaction; the answer and reaction texts are not used.
        cut_tokens: interrupt after this many answer tokens; when None, ``interruption_time`` is mapped to
            tokens at ``tokens_per_second`` (see :func:`interruption_cut`).
        tokens_per_second: the speaking rate of the time mapping.
        max_new_tokens: the reaction's length limit.
        continue_from_cache: reuse the key/value cache of steps (a)+(b) and encode only the appended tokens;
            False re-encodes the whole conversation.
        synced: every rank of a multi-process run steps together (ZeRO-3 gathers the weights on every
            forward pass): a rank whose answer or reaction ended runs idle text-only passes until every
            rank's has. The ranks' items must have the same media in the same turns.

    Returns:
        The truncated answer, the reaction, their ids, token counts and timings.
    """
    cut = interruption_cut(sample, cut_tokens, tokens_per_second)
    decoder = CachedDecoder(model, adapter)
    start = time.perf_counter()
    interrupted = interrupt(
        decoder, adapter, sample, cut, continue_from_cache=continue_from_cache, synced=synced
    )
    encoded_at = time.perf_counter()
    reaction_ids, _ = decoder.decode(interrupted.logits, max_new_tokens, synced)
    end = time.perf_counter()
    answer_seconds = interrupted.answered_at - start
    return SimulationResult(
        truncated_answer=_decode(adapter, interrupted.answer_ids),
        reaction=_decode(adapter, reaction_ids),
        answer_ids=interrupted.answer_ids,
        reaction_ids=reaction_ids,
        cut_tokens=cut,
        answer_finished=interrupted.answer_finished,
        prompt_tokens=interrupted.prompt_tokens,
        appended_tokens=interrupted.appended_tokens,
        appended_video_spans=interrupted.inputs.appended_video_spans,
        encoded_tokens=interrupted.encoded_tokens,
        answer_seconds=answer_seconds,
        continuation_seconds=end - interrupted.answered_at,
        first_reaction_seconds=encoded_at - interrupted.answered_at,
        continue_from_cache=continue_from_cache,
    )


@dataclass
class Interrupted:
    """The conversation up to the reaction, encoded: the model's own answer cut, the interruption appended.

    Attributes:
        full: processor inputs of the whole conversation before the reaction (batch of one).
        logits: the last-token logits the reaction starts from (the decoder's cache holds what came before).
        answer_ids: the model's own answer, as far as it was spoken (no end-of-turn token).
        answer_finished: the answer ended before the interruption point.
        inputs: the prompt and the appended turn, processed.
        prompt_tokens, appended_tokens, encoded_tokens: see :class:`SimulationResult`.
        answered_at: ``time.perf_counter()`` when the answer was cut.
    """

    full: dict[str, torch.Tensor]
    logits: torch.Tensor
    answer_ids: list[int]
    answer_finished: bool
    inputs: SimulationInputs
    prompt_tokens: int
    appended_tokens: int
    encoded_tokens: int
    answered_at: float


# no_grad, not inference_mode: a GRPO rollout interrupts the model it trains, and under ZeRO-3 the weights
# gathered here would otherwise be inference tensors that the next backward cannot use.
@torch.no_grad()
def interrupt(
    decoder: CachedDecoder,
    adapter: VideoChatAdapter,
    sample: Sample,
    cut: int,
    *,
    continue_from_cache: bool = True,
    synced: bool = False,
) -> Interrupted:
    """Steps (a)-(c) of the simulation: the prompt encoded, the model's greedy answer cut after ``cut``
    tokens, the interruption turn appended (to the cache, or re-encoded with everything before it)."""
    inputs = prepare_inputs(adapter, sample)
    prefix = to_device(inputs.prefix, decoder.device)
    logits = decoder.encode(prefix, positions=decoder.positions(prefix), cache=None)
    answer_ids, finished = decoder.decode(logits, cut, synced)
    return append_interruption(
        decoder, inputs, answer_ids, finished, time.perf_counter(), continue_from_cache=continue_from_cache
    )


@torch.no_grad()
def append_interruption(
    decoder: CachedDecoder,
    inputs: SimulationInputs,
    answer_ids: list[int],
    finished: bool,
    answered_at: float,
    *,
    continue_from_cache: bool = True,
) -> Interrupted:
    """Step (c): the interruption turn appended after the model's own answer, which ``decoder`` encoded
    the prompt of (``inputs.prefix``) and decoded (``answer_ids``; ``finished``: it ended with an
    end-of-turn, else its last token was never fed). The live demo (``demo/``) cuts its streamed answer
    where the user interrupts and enters the interruption here, as the simulation does."""
    prefix = to_device(inputs.prefix, decoder.device)
    appended = to_device(inputs.appended, decoder.device)
    ids = prefix["input_ids"]
    full = concat([prefix, text_piece(_row(answer_ids, ids)), appended])
    all_positions = decoder.positions(full)
    if continue_from_cache:
        # A cut answer's last token was sampled but never fed; an answer that ended was fed whole (its
        # end-of-turn token is dropped: the appended piece starts with one).
        unfed = [] if finished else answer_ids[-1:]
        pending = concat([text_piece(_row(unfed, ids)), appended])
        cached = full["input_ids"].shape[1] - pending["input_ids"].shape[1]
        positions = _slice_positions(all_positions, cached)
        logits = decoder.encode(pending, positions=positions, cache=decoder.cache)
        encoded = pending["input_ids"].shape[1]
    else:
        logits = decoder.encode(full, positions=all_positions, cache=None)
        encoded = full["input_ids"].shape[1]
    return Interrupted(
        full=full,
        logits=logits,
        answer_ids=answer_ids,
        answer_finished=finished,
        inputs=inputs,
        prompt_tokens=prefix["input_ids"].shape[1],
        appended_tokens=appended["input_ids"].shape[1],
        encoded_tokens=encoded,
        answered_at=answered_at,
    )


def _check_shape(sample: Sample) -> list[Turn]:
    roles = [turn.role for turn in sample.turns]
    if roles != ["user", "assistant", "user", "assistant"]:
        raise ValueError(
            f"{sample.id}: the simulation needs question, answer, interruption, reaction turns; got {roles}"
        )
    return sample.turns


def _with_turns(sample: Sample, turns: list[Turn]) -> Sample:
    return Sample(sample.id, sample.task, turns, sample.source, sample.source_id, sample.segment, sample.meta)


def _row(ids: list[int], like: torch.Tensor) -> torch.Tensor:
    """Generated token ids as a one-row tensor of ``like``'s dtype and device."""
    return torch.tensor([ids], dtype=like.dtype, device=like.device)


def _slice_positions(positions: torch.Tensor, start: int) -> torch.Tensor:
    """The position ids of the tokens from ``start`` on (the last axis is the sequence)."""
    return positions[..., start:]


def _decode(adapter: VideoChatAdapter, ids: list[int]) -> str:
    return adapter.decode_generated(torch.tensor([ids], dtype=torch.long), 0)[0]
