"""GRPO's rollouts through an OpenAI-compatible server (``stage.grpo.server``), instead of in process: the
``train.sampler.Sampler`` :class:`ServedSampler`.

Before each step's rollouts the policy is written as a whole checkpoint, the LoRA adapter merged
(``train.policy_weights``), and handed to the server (``stage.grpo.weight_sync``; by default as the server's
kind takes it, ``train.grpo_config.HAND_OVER``: reload for vLLM, else restart): ``restart`` starts its
command again on it (any server: vLLM, SGLang, ``transformers serve``), ``by_path`` keeps one server and
names the new directory in every request (a server that loads the model a request names from its path, as
``transformers serve`` started without a model does), ``reload`` keeps one vLLM server and has it re-read
the new directory in place (``train.weight_reload``). So every step samples from the policy it trains, as
the in-process loop does (one update per rollout: the old policy is the current one).

The server is asked what the evaluation asks it (``models.served.ServedModel``: the same messages, frames
and clips): a prompt's G completions as G seeded requests (a server with prefix caching, as vLLM has, encodes
the prompt once for them); an OVI item in open form through the served simulation, the model's own greedy
answer cut at the interruption point and sent back as the assistant turn, then G sampled reactions. The
loss scores each completion in process (``train.rollouts.completion_logps``) on the conversation as the
adapter renders it: as the server's own token ids where it returns them (``server.sampled_tokens``, vLLM),
else as its text tokenized again. What the served engine changes (its kernels; ``transformers serve``'s
Qwen-VL positions after a video, docs/serving.md; a text round trip) makes the sampler differ slightly from
the policy scored; with the server's log-probabilities the trainer corrects for it as TRL does
(``train.grpo_loss.sampler_correction``), without them the rollouts are slightly off policy.

Multi-process: rank 0 writes the weights and runs the server, every rank sends its own items to it. Under
ZeRO-3 every rank takes part in writing them (each weight gathered whole in turn, ``train.policy_weights``).
"""

from __future__ import annotations

import math
import shutil
import zlib
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from core import distributed
from core.errors import ConfigError
from core.rundir import RunDir
from core.sample import Part, Sample, Turn
from core.text_models import Reply
from eval.benchmarks.ovi import is_open_item
from models.cached_decoder import placeholder_ids
from models.chat import VideoChatAdapter
from models.sampling import Group
from models.served import ServedModel
from models.server_process import launched_server
from train.grpo_config import GrpoConfig, WeightSync
from train.policy_weights import plain_sampling, save_policy
from train.rollouts import Rollout, sampler_logps
from train.weight_reload import DEV_MODE, reload_weights


def check_served_rollouts(settings: GrpoConfig) -> None:
    """Refuse, before any work, what served rollouts cannot do.

    Raises:
        ConfigError: ``weight_sync=restart`` without a command to restart; ``reload`` on a running server
            without the name it serves the model under.
    """
    server = settings.server
    if settings.weight_sync is WeightSync.restart and not server.command:
        raise ConfigError(
            "stage.grpo.weight_sync=restart starts stage.grpo.server.command again on each step's weights; "
            "a server at stage.grpo.server.endpoint.base_url cannot be restarted: give the command, or "
            "weight_sync=reload (vLLM) or by_path for a server that loads the directory each request names"
        )
    if settings.weight_sync is WeightSync.reload and not server.command and not server.model:
        raise ConfigError(
            "stage.grpo.weight_sync=reload on the server at stage.grpo.server.endpoint.base_url: give "
            "stage.grpo.server.model, the name it serves the model under (a reload keeps it)"
        )


class ServedSampler:
    """Each step's rollouts from a server given the policy's current weights (module docstring): a
    ``train.sampler.Sampler``.

    Args:
        settings: ``stage.grpo``, resolved (its ``server``, ``weight_sync`` and sampling settings).
        chat: the model's chat adapter (the messages sent, the conversation scored).
        run_dir: the run: each step's weights are written there (``RunDir.rollout_weights``), with the
            server's log and the clips sent to it.
    """

    def __init__(self, settings: GrpoConfig, chat: VideoChatAdapter, run_dir: RunDir):
        check_served_rollouts(settings)
        self.settings, self.chat, self.run_dir = settings, chat, run_dir
        self._synced_step: int | None = None
        self._served: ServedModel | None = None
        self._server = ExitStack()  # the launched server, if any
        self._base_url: str | None = None
        self._launched: Path | None = None  # the weights the running server was started on
        self._placeholders: set[int] | None = None  # the media placeholders' ids, from the policy's config
        self.placeholder_cuts = 0
        self._completions = 0

    def rollouts(self, policy, items: list[Sample], step: int) -> list[Rollout]:
        """The items' rollouts at training step ``step`` (the weights are handed over once per step);
        ``placeholder_cuts`` then counts their completions cut before a media placeholder."""
        if step != self._synced_step:
            self.sync(policy, step)
        if self._placeholders is None:  # the model's, which no step changes
            self._placeholders = set(placeholder_ids(policy).tolist())
        self.placeholder_cuts = 0
        self._completions = len(items) * self.settings.num_generations
        return [self._rollout(item, step) for item in items]

    def suppressed(self, policy) -> None:
        return None  # a server samples from the whole vocabulary, so its completions are scored on all of it

    def sampled_logps(self, rollouts: list[Rollout], like: torch.Tensor) -> torch.Tensor:
        """The server's log-probabilities of its tokens, as it returned them (NaN where it gave none)."""
        return sampler_logps(rollouts, like)

    def logged(self) -> dict[str, float]:
        """The share of the last rollouts' completions cut before a media placeholder the server sampled."""
        return {"completions/placeholder_cut_ratio": self.placeholder_cuts / max(1, self._completions)}

    def close(self) -> None:
        """Stop the server this started (if any)."""
        self._server.close()

    # -- the weights --------------------------------------------------------------------------------

    def sync(self, policy, step: int) -> None:
        """Write the policy's weights for step ``step`` and hand them to the server (rank 0, with every
        rank's help under ZeRO-3; every rank then asks the server they are at)."""
        weights = self.run_dir.rollout_weights(step)
        if distributed.is_main() or distributed.zero3_enabled():
            save_policy(policy, self.chat.processor, weights, plain_sampling(policy))
        if distributed.is_main():
            self._hand_over(weights)
            for old in self.run_dir.rollout_weights_dir.iterdir():  # only the served weights are kept
                if old != weights:
                    shutil.rmtree(old, ignore_errors=True)
        base_url, name = distributed.broadcast((self._base_url, self._served_name(weights)))
        clips = self.run_dir.served_clips_dir
        self._served = ServedModel(base_url, name, self.chat, self.settings.server, clips)
        self._synced_step = step
        distributed.barrier()

    def _hand_over(self, weights: Path) -> None:
        server, sync = self.settings.server, self.settings.weight_sync
        if sync is WeightSync.restart:
            self._server.close()
            self._base_url = self._launch(weights)
            return
        if self._base_url is None:  # by_path, reload: one server for the run
            if server.command:
                self._base_url = self._launch(weights)
                return  # started on these weights
            self._base_url = server.endpoint.base_url
        if sync is WeightSync.reload:
            reload_weights(self._base_url, weights, server.startup_timeout_s)

    def _launch(self, weights: Path) -> str:
        server = self.settings.server
        log = self.run_dir.rollout_server_log_file
        env = DEV_MODE if self.settings.weight_sync is WeightSync.reload else None
        url = self._server.enter_context(
            launched_server(server.command, weights, log, server.startup_timeout_s, env)
        )
        self._launched = weights
        return url

    def _served_name(self, weights: Path) -> str:
        """The model's name in requests: the directory itself for ``by_path``; else the name the server
        was started under (a reload keeps it), its weights' directory unless ``server.model`` says."""
        if self.settings.weight_sync is WeightSync.by_path:
            return str(weights.resolve())
        return self.settings.server.model or str(self._launched)

    # -- one prompt's group ----------------------------------------------------------------------------

    def _rollout(self, item: Sample, step: int) -> Rollout:
        settings, served = self.settings, self._served
        if is_open_item(item):  # the served simulation: the model's own answer cut, then interrupted
            item, answer = served.interrupted(item)
            spoken = self._without_placeholders(answer.content)
            question, _, interruption, reference = item.turns
            turns = [question, Turn("assistant", [Part.txt(spoken)]), interruption, reference]
            item = replace(item, turns=turns, meta={**item.meta, "spoken": spoken})
        seeds = [_seed(step, item.id, k) for k in range(settings.num_generations)]
        replies = served.sampled(item, seeds, settings.temperature, settings.max_completion_length)
        rendered = self.chat.render(item, for_generation=True)
        context = dict(self.chat.batch([rendered], padding_side="left"))
        done = [self._completion(reply) for reply in replies]
        group = Group([c.ids for c in done], [c.ended for c in done], [c.logps for c in done])
        return Rollout(item, {k: v.cpu() for k, v in context.items()}, group, [c.text for c in done])

    def _without_placeholders(self, text: str) -> str:
        """A served answer without media placeholders spelt out (a server that keeps special tokens in its
        text): fed back, each would be taken for a frame's slot."""
        for token in self.chat.processor.tokenizer.convert_ids_to_tokens(sorted(self._placeholders or ())):
            text = text.replace(token, "")
        return text

    def _completion(self, reply: Reply) -> Completion:
        """A served completion as the loss scores it (module docstring): the server's own ids where it
        returned them, else its text tokenized again (a round trip may give a token more or fewer than the
        server sampled); the end of turn after it where the model ended it (stopping is an action too); cut
        before a media placeholder (counted, not ended), its text then the tokens kept (the rewards judge
        what the loss scores)."""
        tokenizer = self.chat.processor.tokenizer
        ended = reply.finish_reason == "stop"
        if reply.token_ids is not None:
            ids, logps = list(reply.token_ids), list(reply.logprobs)
        else:
            ids = tokenizer(reply.content, add_special_tokens=False)["input_ids"]
            logps = [math.nan] * len(ids)
        if ended and (not ids or ids[-1] != tokenizer.eos_token_id):
            ids, logps = [*ids, tokenizer.eos_token_id], [*logps, math.nan]
        # A server samples the whole vocabulary; a media placeholder fed back would be taken for a frame's
        # slot (the model matches them to the media's features), so the completion ends before it.
        placeholders = self._placeholders or set()
        keep = next((i for i, token in enumerate(ids) if token in placeholders), None)
        if keep is None:
            return Completion(ids, ended, logps, reply.content)
        self.placeholder_cuts += 1
        text = tokenizer.decode(ids[:keep], skip_special_tokens=True)
        return Completion(ids[:keep], False, logps[:keep], text)


@dataclass
class Completion:
    """One served completion: the token ids scored, whether it ended its turn, the sampler's log-probability
    of each (NaN: not given), and the text the rewards read."""

    ids: list[int]
    ended: bool
    logps: list[float]
    text: str


def _seed(step: int, item_id: str, index: int) -> int:
    """A request's seed: the same for the same step, item and completion, so a resumed run asks again what
    it asked (a server that honours seeds, as vLLM does, then samples the same)."""
    return zlib.crc32(f"{step}|{item_id}|{index}".encode())
