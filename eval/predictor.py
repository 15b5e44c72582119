"""The one seam between the evaluation and a model: a :class:`Predictor` generates answers and gives the
log-likelihood of completions. The model in this process (:class:`InProcess`) does both; a model behind an
OpenAI-compatible server (``eval.served.ServedModel``) generates only, and says so with :class:`NotServed`.
``eval.evaluation.Evaluation`` never asks which one it has.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Protocol

import torch

from core import distributed
from core.config import OviProtocol
from core.errors import UserError
from core.sample import Sample
from models.chat import VideoChatAdapter
from models.ovi_simulation import simulate_interruption
from models.pairs import completion_batch, completion_logps


class NotServed(UserError, RuntimeError):
    """What the predictor cannot compute: a served model gives no log-probabilities of given text."""


class Predictor(Protocol):
    """What answers a benchmark's items."""

    quantization: str  # the weights' quantization ("None": none): part of the results cache's key

    def generate(self, samples: list[Sample], protocol: OviProtocol, max_new_tokens: int) -> list[dict]:
        """Result fields per sample, in order: ``prediction`` (the answer), and under the interruption
        simulation ``truncated_answer`` and ``simulation`` (its counts)."""
        ...

    def loglikelihood(self, samples: list[Sample]) -> list[float]:
        """Each sample's summed log-probability of its final turn, given the turns before it.

        Raises:
            NotServed: the predictor cannot compute it.
        """
        ...


@torch.no_grad()
def generate(model, chat: VideoChatAdapter, samples: list[Sample], max_new_tokens: int) -> list[str]:
    """Greedy answers for a batch of samples, from their given turns."""
    batch = chat.batch([chat.render(s, for_generation=True) for s in samples], padding_side="left")
    batch = batch.to(model.device)
    out = model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=chat.pad_id)
    return chat.decode_generated(out, batch["input_ids"].shape[1])


class InProcess:
    """The model in this process: batched ``generate``, the simulation from its key/value cache, and the
    log-likelihood of completions, each in eval mode (the model's mode is put back after)."""

    def __init__(self, model, chat: VideoChatAdapter):
        self.model, self.chat = model, chat
        self.quantization = str(getattr(model, "quantization_method", None))  # a QLoRA base: 4-bit

    def generate(self, samples: list[Sample], protocol: OviProtocol, max_new_tokens: int) -> list[dict]:
        with self._evaluating():
            if protocol == OviProtocol.simulated:
                return [self._simulated(sample, max_new_tokens) for sample in samples]
            return [{"prediction": p} for p in generate(self.model, self.chat, samples, max_new_tokens)]

    def loglikelihood(self, samples: list[Sample]) -> list[float]:
        with self._evaluating():
            return completion_logps(self.model, completion_batch(self.chat, samples)).tolist()

    def _simulated(self, sample: Sample, length: int) -> dict[str, Any]:
        """The model answers in its own words, is cut at the interruption and reacts: the reaction is the
        prediction, the cut answer is kept for the judge."""
        synced = distributed.world_size() > 1 and distributed.zero3_enabled()
        result = simulate_interruption(self.model, self.chat, sample, max_new_tokens=length, synced=synced)
        return {
            "prediction": result.reaction,
            "truncated_answer": result.truncated_answer,
            "simulation": result.stats(),
        }

    @contextmanager
    def _evaluating(self):
        was_training = self.model.training
        self.model.eval()
        try:
            yield
        finally:
            self.model.train(was_training)
