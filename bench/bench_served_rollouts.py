"""GRPO rollouts through a server (``stage.grpo.server``) against rollouts in process, and what handing the
policy's weights to the server costs per step.

The tiny Qwen2.5-VL with a LoRA adapter (random, non-zero) and trained output layer and embeddings, as the
quickstart trains it. Per step a served run first writes the policy, merged (``save_policy``), and hands it
over: ``restart`` starts the server's command again on it, ``by_path`` names the new directory to one server
that loads it on the first request, ``reload`` (vLLM, ``--reload``) has one server re-read it in place.
Then one group per item kind (a question on a 20 s video, and an OVI Correction rolled out through the
served simulation), G completions at temperature 1 up to 32 tokens, is sampled in process (the prompt's
cache shared, ``train.rollouts``) and through the server (G requests).

    python bench/bench_served_rollouts.py                        # transformers serve, on this machine
    # vLLM's CPU build (docs/serving.md: its own venv, a tiny model of head size 32):
    VLLM_CPU_KVCACHE_SPACE=1 python bench/bench_served_rollouts.py --checkpoint outputs/models/tiny-head32 \\
        --by-path-command "" --reload --video inline --sampled-tokens --command "../vllm-cpu/bin/python -m \\
        vllm.entrypoints.openai.api_server --model {model} --port {port} --dtype float32 \\
        --max-model-len 4096 --logprobs-mode processed_logprobs \\
        --media-io-kwargs '{\\"video\\": {\\"num_frames\\": -1}}'"
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from bench_grpo_rollouts import COMPLETION_TOKENS, MEDIA, video_question
from bench_kv_continuation import ovi_item
from common import median, print_table, tiny_model_for_inference

from core.config import ServerConfig, VideoTransport
from core.media import FrameCache
from core.rundir import RunDir
from models.chat import VideoChatAdapter
from train.grpo_config import GrpoConfig, WeightSync
from train.rollouts import completion_logps, rollout, sampler_logps
from train.served_rollouts import ServedSampler

GENERATIONS = 8
SERVE = f"{sys.executable} -m transformers.cli.transformers serve {{model}} --device cpu --host 127.0.0.1 "
SERVE += "--port {port}"


def lora_policy(checkpoint: str | None):
    """The tiny model with the quickstart's kind of adapter, its weights moved off their initial values."""
    from peft import LoraConfig, get_peft_model

    from core.config import ModelConfig
    from models.loading import load_model

    torch.manual_seed(0)
    if checkpoint is None:
        model, processor = tiny_model_for_inference()
    else:
        model, processor = load_model(ModelConfig(name_or_path=checkpoint))
    config = LoraConfig(r=8, target_modules=["q_proj", "v_proj"], modules_to_save=["lm_head", "embed_tokens"])
    policy = get_peft_model(model, config)
    update(policy)
    return policy.eval(), processor


@torch.no_grad()
def update(policy) -> None:
    """Move the trained weights (a stand-in for an optimizer step)."""
    for name, param in policy.named_parameters():
        if "lora_B" in name or "modules_to_save" in name:
            param.add_(0.02 * torch.randn_like(param))


def served_steps(
    engine: ServedSampler, policy, items, steps: int
) -> tuple[list[float], list[float], list[float]]:
    """Per timed step: seconds to hand the weights over and to roll out the items' groups, and each token's
    |log-probability| difference between the server's and ours (where the server returns them). The policy
    moves before every step, so the agreement also shows each hand-over took."""
    syncs, rollouts, differences = [], [], []
    for step in range(steps + 1):  # step 0 warms up: the server's first start, the clip files
        if step:
            update(policy)
        start = time.perf_counter()
        engine.sync(policy, step)
        middle = time.perf_counter()
        groups = engine.rollouts(policy, items, step)
        end = time.perf_counter()
        if step:
            syncs.append(middle - start)
            rollouts.append(end - middle)
        differences += sampler_differences(policy, groups)
    return syncs, rollouts, differences


def sampler_differences(policy, groups) -> list[float]:
    """|ours - the server's| log-probability of each sampled token the server gave one for (scored as the
    training scores served completions: at the temperature, on the whole vocabulary)."""
    with torch.no_grad():
        ours, mask = completion_logps(policy, groups, 1.0, None)
    differences = (ours - sampler_logps(groups, ours)).abs()[mask.bool()]
    return differences[~differences.isnan()].tolist()


def in_process(policy, adapter, items, steps: int) -> float:
    """Median seconds to roll out the items' groups in process."""
    times = []
    for repeat in range(steps + 1):
        start = time.perf_counter()
        for item in items:
            rollout(
                policy, adapter, item, generations=GENERATIONS, temperature=1.0, max_tokens=COMPLETION_TOKENS
            )
        if repeat:
            times.append(time.perf_counter() - start)
    return median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--command", default=SERVE, help="the server's command ({model}, {port})")
    by_path_help = "a server that loads the model each request names; empty: skip by_path"
    parser.add_argument("--by-path-command", default=SERVE.replace(" {model}", ""), help=by_path_help)
    parser.add_argument("--reload", action="store_true", help="also weight_sync=reload (--command is vLLM)")
    parser.add_argument("--video", default="path", choices=["path", "inline"])
    parser.add_argument("--sampled-tokens", action="store_true", help="ask for the sampled ids (vLLM)")
    parser.add_argument("--checkpoint", default=None, help="the model (default: the quickstart's tiny one)")
    parser.add_argument("--steps", type=int, default=3, help="steps timed per setting, after one to warm up")
    args = parser.parse_args()
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")  # the server is on this machine

    policy, processor = lora_policy(args.checkpoint)
    completions = GENERATIONS * 2
    with tempfile.TemporaryDirectory() as tmp:
        adapter = VideoChatAdapter(processor, MEDIA, FrameCache(Path(tmp) / "frames"))
        ovi = ovi_item(Path(tmp))
        items = [video_question(ovi), ovi]
        local = in_process(policy, adapter, items, args.steps)
        rate = f"{completions / local:.1f}"
        rows = [["in process (shared prompt cache)", "-", f"{local:.2f}", rate, "1.00", "-"]]
        ways = {WeightSync.restart: args.command, WeightSync.by_path: args.by_path_command}
        ways[WeightSync.reload] = args.command if args.reload else ""
        for sync, command in ways.items():
            if not command:
                continue
            server = ServerConfig(command=command, video=VideoTransport(args.video), startup_timeout_s=600)
            server.sampled_tokens = args.sampled_tokens
            settings = GrpoConfig(server=server, weight_sync=sync, num_generations=GENERATIONS)
            settings.max_completion_length = COMPLETION_TOKENS
            engine = ServedSampler(settings, adapter, RunDir(Path(tmp) / f"run-{sync}"))
            try:
                syncs, times, differences = served_steps(engine, policy, items, args.steps)
            finally:
                engine.close()
            seconds = median(times)
            agreement = (
                f"{statistics.mean(differences):.4f} / {max(differences):.4f} ({len(differences)} tokens)"
                if differences
                else "no log-probabilities returned"
            )
            rows.append([f"served, weight_sync={sync}", f"{median(syncs):.2f}", f"{seconds:.2f}",
                         f"{completions / seconds:.1f}", f"{local / seconds:.2f}", agreement])  # fmt: skip
    print_table(
        f"GRPO rollouts, tiny Qwen2.5-VL with LoRA: one step's weight hand-over and rollouts, median of "
        f"{args.steps} steps",
        [
            "rollouts",
            "weights handed over, s",
            "rollouts, s",
            "completions/s",
            "vs in process",
            "|log-prob| ours vs server's: mean / max",
        ],  # fmt: skip
        rows,
        notes=[
            f"a step: a 20 s video question and an OVI Correction item, G={GENERATIONS} each, temperature 1, "
            f"up to {COMPLETION_TOKENS} tokens; 16 frames of 112x112 per span",
            "log-probabilities: of the tokens the server sampled, ours scored at temperature 1 on the whole "
            "vocabulary (as the training scores served completions), where the server returns them; the "
            "adapter moved before every step (each hand-over is checked by this agreement)",
            "hand-over: the merged policy written, then the server restarted on it (restart), named it in "
            "the next requests (by_path: the load falls in the rollouts' time) or re-read it in place "
            "(reload: paused, reloaded, prefix cache emptied, resumed)",
            "server: " + args.command.replace(sys.executable, "python"),
        ],
    )


if __name__ == "__main__":
    main()
