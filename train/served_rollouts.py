"""GRPO's rollouts through an OpenAI-compatible server (``stage.grpo.server``), instead of in process.

Before each step's rollouts the policy's weights, the LoRA adapter merged, are written as a whole checkpoint
(:func:`save_policy`) and handed to the server (``stage.grpo.weight_sync``): ``restart`` starts its command
again on them (any server: vLLM, SGLang, ``transformers serve``), ``by_path`` keeps one server and names the
new directory in every request (a server that loads the model a request names from its path, as
``transformers serve`` started without a model does). So every step samples from the policy it trains, as
the in-process loop does (one update per rollout: the old policy is the current one).

The server is asked what the evaluation asks it (``eval.served.ServedModel``: the same messages, frames and
clips): a prompt's G completions as G seeded requests (a server with prefix caching, as vLLM has, encodes
the prompt once for them); an OVI item in open form through the served simulation, the model's own greedy
answer cut at the interruption point and sent back as the assistant turn, then G sampled reactions. The
completions come back as text and are tokenized again for the loss, whose log-probabilities are computed in
process (``train.rollouts.completion_logps``) on the conversation as the in-process adapter renders it.
What the served engine changes (its kernels; ``transformers serve``'s own Qwen-VL positions after a video,
docs/serving.md; a BPE round trip) makes the sampler differ slightly from the policy scored: the rollouts
are then slightly off policy, which the clipped ratio does not see (its old policy is the one scored).

Multi-process: rank 0 writes the weights and runs the server, every rank sends its own items to it. ZeRO-3
is refused: its weights are partitioned, and no rank holds a whole copy to write.
"""

from __future__ import annotations

import shutil
import zlib
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import torch

from core import distributed
from core.config import GrpoConfig, WeightSync
from core.errors import ConfigError
from core.files import atomic_dir
from core.sample import Sample
from eval.served import ServedModel
from eval.server_process import launched_server
from models.chat import VideoChatAdapter
from models.sampling import Group
from train.rollouts import Rollout, is_interruption


def check_served_rollouts(settings: GrpoConfig) -> None:
    """Refuse, before any work, what served rollouts cannot do.

    Raises:
        ConfigError: ZeRO-3, or ``weight_sync=restart`` without a command to restart.
    """
    if distributed.zero3_enabled():
        raise ConfigError(
            "stage.grpo.server: rollouts through a server need the policy's whole weights on rank 0 every "
            "step, which ZeRO-3 partitions; use ZeRO-2 (trainer.deepspeed=zero2) or roll out in process"
        )
    if settings.weight_sync is WeightSync.restart and not settings.server.command:
        raise ConfigError(
            "stage.grpo.weight_sync=restart starts stage.grpo.server.command again on each step's weights; "
            "a server at stage.grpo.server.endpoint.base_url cannot be restarted: give the command, or "
            "weight_sync=by_path for a server that loads the directory each request names"
        )


class ServedRollouts:
    """Each step's rollouts from a server given the policy's current weights (module docstring).

    Args:
        settings: ``stage.grpo`` (its ``server``, ``weight_sync`` and sampling settings).
        chat: the model's chat adapter (the messages sent, the conversation scored).
        weights_root: where each step's weights are written (``<run_dir>/rollout_weights``).
    """

    def __init__(self, settings: GrpoConfig, chat: VideoChatAdapter, weights_root: Path):
        check_served_rollouts(settings)
        self.settings, self.chat, self.weights_root = settings, chat, weights_root
        self._synced_step: int | None = None
        self._served: ServedModel | None = None
        self._server = ExitStack()  # the launched server, if any
        self._base_url: str | None = None

    def rollouts(self, policy, items: list[Sample], step: int) -> list[Rollout]:
        """The items' rollouts at training step ``step`` (the weights are handed over once per step)."""
        if step != self._synced_step:
            self.sync(policy, step)
        return [self._rollout(item, step) for item in items]

    def close(self) -> None:
        """Stop the server this started (if any)."""
        self._server.close()

    # -- the weights --------------------------------------------------------------------------------

    def sync(self, policy, step: int) -> None:
        """Write the policy's weights for step ``step`` and hand them to the server (rank 0; every rank
        then asks the server they are at)."""
        weights = self.weights_root / f"step-{step}"
        if distributed.is_main():
            save_policy(policy, self.chat.processor, weights)
            self._hand_over(weights)
            for old in self.weights_root.iterdir():  # only the served weights are kept
                if old != weights:
                    shutil.rmtree(old, ignore_errors=True)
        base_url, name = distributed.broadcast((self._base_url, self._served_name(weights)))
        clips = self.weights_root.parent / "eval" / "served_clips"
        self._served = ServedModel(base_url, name, self.chat, self.settings.server, clips)
        self._synced_step = step
        distributed.barrier()

    def _hand_over(self, weights: Path) -> None:
        server = self.settings.server
        if self.settings.weight_sync is WeightSync.by_path:
            if self._base_url is None:
                self._base_url = self._launch(weights) if server.command else server.endpoint.base_url
            return
        self._server.close()
        self._base_url = self._launch(weights)

    def _launch(self, weights: Path) -> str:
        server = self.settings.server
        log = self.weights_root.parent / "rollout_server.log"
        return self._server.enter_context(
            launched_server(server.command, weights, log, server.startup_timeout_s)
        )

    def _served_name(self, weights: Path) -> str:
        if self.settings.weight_sync is WeightSync.by_path:
            return str(weights.resolve())
        return self.settings.server.model or str(weights)

    # -- one prompt's group ----------------------------------------------------------------------------

    def _rollout(self, item: Sample, step: int) -> Rollout:
        settings, served = self.settings, self._served
        if is_interruption(item):
            item, answer = served.interrupted(item)
            item = replace(item, meta={**item.meta, "spoken": answer.content})
        seeds = [_seed(step, item.id, k) for k in range(settings.num_generations)]
        replies = served.sampled(item, seeds, settings.temperature, settings.max_completion_length)
        rendered = self.chat.render(item, for_generation=True)
        context = dict(self.chat.batch([rendered], padding_side="left"))
        tokens, ended = zip(*(self._tokens(r.content, r.finish_reason) for r in replies), strict=True)
        group = Group(list(tokens), list(ended), [[] for _ in replies])
        return Rollout(item, {k: v.cpu() for k, v in context.items()}, group, [r.content for r in replies])

    def _tokens(self, text: str, finish_reason: str | None) -> tuple[list[int], bool]:
        """A served completion as the token ids the loss scores: its text tokenized again, the end of turn
        after it where the model ended it (stopping is an action too), at most the length limit."""
        tokenizer = self.chat.processor.tokenizer
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        ended = finish_reason == "stop"
        if ended:
            ids.append(tokenizer.eos_token_id)
        limit = self.settings.max_completion_length
        return (ids[:limit], False) if len(ids) > limit else (ids, ended)


def _seed(step: int, item_id: str, index: int) -> int:
    """A request's seed: the same for the same step, item and completion, so a resumed run asks again what
    it asked (a server that honours seeds, as vLLM does, then samples the same)."""
    return zlib.crc32(f"{step}|{item_id}|{index}".encode())


@torch.no_grad()
def save_policy(policy, processor, out: Path) -> None:
    """The policy as a whole checkpoint at ``out`` (written atomically): a LoRA adapter's deltas added to
    fresh copies of its base weights, and its ``modules_to_save`` in place of the originals, so the live
    weights are never merged and unmerged in place (which would drift them by rounding); a fully trained
    model as it is. With the processor and its chat template: what any loader or server takes."""
    with atomic_dir(out) as tmp:
        if hasattr(policy, "peft_config"):
            base = policy.get_base_model()
            base.save_pretrained(tmp, state_dict=merged_state_dict(policy))
        else:
            policy.save_pretrained(tmp)
        processor.save_pretrained(tmp)


def merged_state_dict(policy) -> dict[str, torch.Tensor]:
    """A PEFT model's weights under its base model's own names, the active LoRA adapter merged into copies
    of the layers it wraps and each ``modules_to_save`` copy standing for its original (on the CPU)."""
    from peft.tuners.lora import LoraLayer

    adapter = policy.active_adapter
    merged = {}
    for name, module in policy.get_base_model().named_modules():
        if isinstance(module, LoraLayer) and adapter in (*module.lora_A, *module.lora_embedding_A):
            weight = module.get_base_layer().weight
            merged[f"{name}.weight"] = (weight + module.get_delta_weight(adapter).to(weight.dtype)).cpu()
    state = {}
    for key, value in policy.get_base_model().state_dict().items():
        if ".lora_" in key or ".original_module." in key:
            continue
        key = key.replace(f".modules_to_save.{adapter}.", ".").replace(".base_layer.", ".")
        state[key] = merged.get(key, value.detach().cpu())
    return state
