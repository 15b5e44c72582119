"""One live exchange: the answer streamed token by token, cut where the user interrupts, the interruption
entered into the running generation, the reaction streamed.

The answer is decoded greedily by ``models.cached_decoder.CachedDecoder`` one token at a time from the
prompt OVIBench's simulation encodes (``models.ovi_simulation.prepare_inputs``); between two tokens the
session looks for an interruption. When one came, the answer is cut there (its last token sampled, never
fed) and ``models.ovi_simulation.append_interruption`` appends the interruption turn to the same key/value
cache, exactly as the offline simulation does after ``cut_tokens`` answer tokens. So an exchange saved as
an OVIBench item and replayed by ``python -m eval`` (cut at the same token: ``demo.saving``) gives the same
answer and the same reaction, as the tests check.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from core.sample import Part, Sample, Turn
from core.vocab import InterruptionType
from models.batch import to_device
from models.cached_decoder import CachedDecoder
from models.chat import VideoChatAdapter
from models.ovi_simulation import MIN_CUT_TOKENS, append_interruption, prepare_inputs

# The words of an interruption the user does not type (a typed correction brings its own).
SPOKEN = {
    InterruptionType.cancellation: "Stop, that's enough.",
    InterruptionType.false_trigger: "Hmm.",
}
KINDS = {  # the page's buttons
    "cancel": InterruptionType.cancellation,
    "false_alarm": InterruptionType.false_trigger,
    "correction": InterruptionType.correction,
}


@dataclass(frozen=True)
class Question:
    """What the user asks: the question turn's parts (the video up to ``until_s``, the question text, the
    drawn frame when there is one), as a V2P-Bench item orders them (video, question, visual prompt)."""

    video: str
    until_s: float
    text: str
    prompt_frame: str | None = None

    def turn(self) -> Turn:
        parts = [Part.video(self.video, 0.0, self.until_s), Part.txt(self.text)]
        if self.prompt_frame:
            parts.append(Part.image(self.prompt_frame))
        return Turn("user", parts)


@dataclass
class Interruption:
    kind: InterruptionType
    words: str


@dataclass
class Exchange:
    """What one exchange produced (the page and the saved item read it)."""

    question: Question
    answer_ids: list[int] = field(default_factory=list)
    answer: str = ""
    answer_finished: bool = False
    interruption: Interruption | None = None
    reaction_ids: list[int] = field(default_factory=list)
    reaction: str = ""
    done: bool = False
    error: str | None = None


def conversation(question: Question, words: str, sample_id: str = "demo") -> Sample:
    """The four turns the simulation takes: question, (the model's own) answer, interruption, reaction; the
    answer and reaction texts are not used."""
    turns = [
        question.turn(),
        Turn("assistant", [Part.txt("")], loss=False),
        Turn("user", [Part.txt(words)]),
        Turn("assistant", [Part.txt("")], loss=True),
    ]
    return Sample(sample_id, "ovi", turns, "demo", sample_id, (0.0, question.until_s))


class LiveSession:
    """Streams one exchange at a time on a model; :meth:`interrupt` may come from another thread.

    Args:
        model: the model (eval mode is set here).
        adapter: the family's chat adapter (``models.chat``), as the evaluation renders prompts.
        max_new_tokens, max_new_tokens_reaction: the answer's and the reaction's limits.
        token_delay_s: a pause after each streamed token (a tiny model is otherwise done before a click).
    """

    def __init__(
        self,
        model,
        adapter: VideoChatAdapter,
        max_new_tokens: int = 64,
        max_new_tokens_reaction: int = 128,
        token_delay_s: float = 0.0,
    ):
        self.model, self.adapter = model.eval(), adapter
        self.max_new_tokens, self.max_new_tokens_reaction = max_new_tokens, max_new_tokens_reaction
        self.token_delay_s = token_delay_s
        self._pending: queue.Queue[Interruption | None] = queue.Queue()  # None: stop waiting
        self._lock = threading.Lock()  # one exchange at a time
        self.exchange: Exchange | None = None

    def interrupt(self, kind: str, words: str | None = None) -> Interruption:
        """Ask the running answer to stop here (or the finished one: the reaction follows it).

        Raises:
            ValueError: an unknown kind, or a correction without words.
        """
        if kind not in KINDS:
            raise ValueError(f"interruption kind {kind!r} not in {sorted(KINDS)}")
        kind_ = KINDS[kind]
        words = (words or "").strip() or SPOKEN.get(kind_, "")
        if not words:
            raise ValueError("a correction needs its words")
        interruption = Interruption(kind_, words)
        self._pending.put(interruption)
        return interruption

    def stop_waiting(self) -> None:
        """End the wait of a finished answer for an interruption (the user asks something else)."""
        self._pending.put(None)

    @torch.inference_mode()
    def run(
        self, question: Question, emit: Callable[[dict[str, Any]], None], wait_s: float = 300.0
    ) -> Exchange:
        """Answer ``question``, streaming to ``emit`` ``{"event": ..., ...}`` (``answer``, ``answered``,
        ``cut``, ``reaction``, ``done``); after the answer, wait up to ``wait_s`` for an interruption
        (none: the exchange ends)."""
        with self._lock:
            while not self._pending.empty():  # an interruption left from the exchange before
                self._pending.get_nowait()
            exchange = self.exchange = Exchange(question)
            decoder = CachedDecoder(self.model, self.adapter)
            # The prompt as the simulation encodes it; the interruption's words do not change it.
            inputs = prepare_inputs(self.adapter, conversation(question, "…"))
            prefix = to_device(inputs.prefix, decoder.device)
            logits = decoder.encode(prefix, positions=decoder.positions(prefix), cache=None)
            interruption = self._answer(decoder, logits, exchange, emit)
            if interruption is None:  # the answer ended: an interruption may still come (after the end)
                emit(
                    {
                        "event": "answered",
                        "tokens": len(exchange.answer_ids),
                        "finished": exchange.answer_finished,
                    }
                )
                interruption = self._wait(wait_s)
            if interruption is None:
                exchange.done = True
                emit({"event": "done", "interrupted": False})
                return exchange
            exchange.interruption = interruption
            emit(self._cut_event(exchange))
            inputs = prepare_inputs(self.adapter, conversation(question, interruption.words))
            interrupted = append_interruption(
                decoder, inputs, exchange.answer_ids, exchange.answer_finished, time.perf_counter()
            )
            self._react(decoder, interrupted.logits, exchange, emit)
            exchange.done = True
            emit({"event": "done", "interrupted": True, "reaction": exchange.reaction})
            return exchange

    def _answer(self, decoder: CachedDecoder, logits, exchange: Exchange, emit) -> Interruption | None:
        """Decode the answer a token at a time until it ends, reaches its limit or is interrupted (after at
        least ``MIN_CUT_TOKENS``, as the simulation never cuts sooner); the interruption, if any."""
        while len(exchange.answer_ids) < self.max_new_tokens:
            tokens, stopped = decoder.decode(logits, 1)  # one greedy token, not fed yet
            if stopped:
                exchange.answer_finished = True  # every token was fed: the cache holds the whole answer
                return None
            exchange.answer_ids += tokens
            exchange.answer = self._text(exchange.answer_ids)
            emit({"event": "answer", "text": exchange.answer, "tokens": len(exchange.answer_ids)})
            self._pause()
            if len(exchange.answer_ids) >= MIN_CUT_TOKENS and not self._pending.empty():
                # Cut here: the last token stays unfed, as the simulation leaves it.
                return self._pending.get_nowait()
            if len(exchange.answer_ids) < self.max_new_tokens:
                logits = decoder.step(torch.tensor(tokens))
        return None  # the limit: the last token stays unfed, like an answer cut there

    @staticmethod
    def _cut_event(exchange: Exchange) -> dict[str, Any]:
        return {
            "event": "cut",
            "answer": exchange.answer,
            "tokens": len(exchange.answer_ids),
            "finished": exchange.answer_finished,
            "kind": exchange.interruption.kind.value,
            "words": exchange.interruption.words,
        }

    def _react(self, decoder: CachedDecoder, logits, exchange: Exchange, emit) -> None:
        # Token by token, as CachedDecoder.decode steps (the simulation decodes the reaction in one call).
        while len(exchange.reaction_ids) < self.max_new_tokens_reaction:
            tokens, stopped = decoder.decode(logits, 1)
            if stopped:
                return
            exchange.reaction_ids += tokens
            exchange.reaction = self._text(exchange.reaction_ids)
            emit({"event": "reaction", "text": exchange.reaction, "tokens": len(exchange.reaction_ids)})
            self._pause()
            logits = decoder.step(torch.tensor(tokens))

    def _wait(self, wait_s: float) -> Interruption | None:
        try:
            return self._pending.get(timeout=wait_s)
        except queue.Empty:
            return None

    def _pause(self) -> None:
        if self.token_delay_s:
            time.sleep(self.token_delay_s)

    def _text(self, ids: list[int]) -> str:
        return self.adapter.decode_generated(torch.tensor([ids], dtype=torch.long), 0)[0]
