"""The one seam between the evaluation and a model: a :class:`Predictor` generates answers and gives the
log-likelihood of completions. The model in this process (:class:`InProcess`) does both; a model behind an
OpenAI-compatible server (``models.served.ServedModel``) generates only, and says so with ``NotServed``.
``eval.evaluation.Evaluation`` never asks which one it has.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from core.config import OviProtocol
from core.sample import Sample
from models.cached_decoder import ranks_in_step
from models.chat import VideoChatAdapter
from models.eval_mode import eval_mode
from models.ovi_simulation import simulate_interruption
from models.pairs import completion_batch, completion_logps


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
            models.served.NotServed: the predictor cannot compute it.
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
        with eval_mode(self.model):
            if protocol == OviProtocol.simulated:
                return [self._simulated(sample, max_new_tokens) for sample in samples]
            return [{"prediction": p} for p in generate(self.model, self.chat, samples, max_new_tokens)]

    def loglikelihood(self, samples: list[Sample]) -> list[float]:
        with eval_mode(self.model):
            return completion_logps(self.model, completion_batch(self.chat, samples)).tolist()

    def _simulated(self, sample: Sample, length: int) -> dict[str, Any]:
        """The model answers in its own words, is cut at the interruption and reacts: the reaction is the
        prediction, the cut answer is kept for the judge."""
        result = simulate_interruption(
            self.model, self.chat, sample, max_new_tokens=length, synced=ranks_in_step()
        )
        return {
            "prediction": result.reaction,
            "truncated_answer": result.truncated_answer,
            "simulation": result.stats(),
        }
