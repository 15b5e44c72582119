"""GRPO's rollouts through a server (train/served_rollouts.py): the policy written as a whole checkpoint (the
LoRA adapter merged without touching the live weights), handed to a real ``transformers serve`` before
every step (restarted, or named by path), and sampling what the policy in process samples; the refusals;
a served GRPO run end to end."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from core.config import GrpoConfig, ModelConfig, ServerConfig, VideoTransport, WeightSync
from core.errors import ConfigError
from train.served_rollouts import ServedRollouts, check_served_rollouts, save_policy


def _lora_policy(tiny_checkpoint: Path):
    """The tiny model with a random (non-zero) LoRA adapter on the language model and the vision tower, and
    trained copies of its output layer and embeddings (the quickstart's modules_to_save)."""
    from peft import LoraConfig, get_peft_model

    from models.loading import load_model

    model, _ = load_model(ModelConfig(name_or_path=str(tiny_checkpoint)))
    torch.manual_seed(0)
    targets = r".*(language_model.*\.(q_proj|v_proj)|visual.*\.qkv)"
    config = LoraConfig(
        r=4, target_modules=targets, modules_to_save=["lm_head", "embed_tokens"], init_lora_weights=False
    )
    policy = get_peft_model(model, config)
    _perturb(policy, "modules_to_save", 0.05)  # the copies trained away from the originals
    return policy.eval()


def _perturb(policy, part: str, scale: float) -> None:
    """Add noise to the weights of the adapter named by ``part`` (a stand-in for an optimizer step)."""
    generator = torch.Generator().manual_seed(len(part) + int(scale * 1000))
    with torch.no_grad():
        for name, param in policy.named_parameters():
            if part in name:
                param.add_(scale * torch.randn(param.shape, generator=generator))


def _greedy(model, adapter, context) -> list[str]:
    """The model's greedy reply (8 tokens at most) to an encoded conversation."""
    from models.greedy import GreedyDecoder
    from models.sampling import sample_group

    decoder = GreedyDecoder(model, adapter)
    with torch.no_grad():
        logits = decoder.encode(context, positions=decoder.positions(context), cache=None)
        group = sample_group(decoder, logits, 1, 8, 0.0)
    return [adapter.decode_generated(torch.tensor([group.tokens[0]]), 0)[0]]


def _logits(model, adapter, item) -> torch.Tensor:
    batch = adapter.batch([adapter.render(item, for_generation=True)], padding_side="left")
    with torch.no_grad():
        return model(**batch).logits


@pytest.fixture(scope="module")
def items(synthetic_build):
    from train.data import load_dataset_samples

    v2p = load_dataset_samples(str(synthetic_build.v2p_sft))[0]
    ovi = next(
        s
        for s in load_dataset_samples(str(synthetic_build.ovi_train))
        if s.meta.get("format") == "open" and s.meta["interruption_type"] == "Correction"
    )
    return {"v2p": v2p, "Correction": ovi}


def test_the_policy_is_written_whole_with_its_adapter_merged_and_the_live_weights_untouched(
    tiny_checkpoint, adapter, items, tmp_path
):
    from models.loading import load_model

    policy = _lora_policy(tiny_checkpoint)
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    save_policy(policy, adapter.processor, tmp_path / "step-0")
    assert all(before[k].equal(v) for k, v in policy.state_dict().items()), "the live weights moved"

    written, _ = load_model(ModelConfig(name_or_path=str(tmp_path / "step-0")))
    for item in items.values():  # a video and an image (the vision tower's adapter counts)
        mine, theirs = _logits(policy, adapter, item), _logits(written.eval(), adapter, item)
        torch.testing.assert_close(theirs, mine, atol=1e-5, rtol=1e-5)
        with policy.disable_adapter():  # the check can fail: the base alone answers otherwise
            assert not torch.allclose(_logits(policy, adapter, item), mine, atol=1e-3)
    assert (tmp_path / "step-0" / "chat_template.jinja").exists()


def test_a_fully_trained_policy_is_written_as_it_is(tiny_checkpoint, adapter, items, tmp_path):
    from models.loading import load_model

    model, _ = load_model(ModelConfig(name_or_path=str(tiny_checkpoint)))
    save_policy(model, adapter.processor, tmp_path / "full")
    written, _ = load_model(ModelConfig(name_or_path=str(tmp_path / "full")))
    item = items["v2p"]
    torch.testing.assert_close(_logits(written, adapter, item), _logits(model.eval(), adapter, item))


def test_served_rollouts_refuse_what_they_cannot_do(monkeypatch):
    running = ServerConfig(endpoint=replace(ServerConfig().endpoint, base_url="http://127.0.0.1:1/v1"))
    with pytest.raises(ConfigError, match="weight_sync=by_path"):
        check_served_rollouts(GrpoConfig(server=running, weight_sync=WeightSync.restart))
    check_served_rollouts(GrpoConfig(server=running, weight_sync=WeightSync.by_path))

    import core.distributed

    monkeypatch.setattr(core.distributed, "zero3_enabled", lambda: True)
    with pytest.raises(ConfigError, match="ZeRO-3"):
        check_served_rollouts(GrpoConfig(server=running, weight_sync=WeightSync.by_path))


def test_a_served_completion_is_scored_as_tokens_with_its_end_of_turn(adapter, tmp_path):
    settings = GrpoConfig(server=ServerConfig(command="serve {model} --port {port}"), max_completion_length=4)
    engine = ServedRollouts(settings, adapter, tmp_path)
    tokenizer = adapter.processor.tokenizer
    ids = tokenizer("red", add_special_tokens=False)["input_ids"]
    assert engine._tokens("red", "stop") == ([*ids, tokenizer.eos_token_id], True)
    assert engine._tokens("red", "length") == (ids, False)
    long = tokenizer("one two three four five", add_special_tokens=False)["input_ids"]
    assert engine._tokens("one two three four five", "stop") == (long[:4], False)  # cut: not ended


# -- against a real transformers serve -------------------------------------------------------------------


def _serve_command(by_path: bool) -> str:
    serve = f"{sys.executable} -m transformers.cli.transformers serve"
    # by_path: no model given, so the server loads whichever directory a request names
    return serve + ("" if by_path else " {model}") + " --device cpu --host 127.0.0.1 --port {port}"


@pytest.mark.slow
@pytest.mark.parametrize("sync", [WeightSync.restart, WeightSync.by_path])
def test_served_rollouts_sample_what_the_policy_samples_after_every_update(
    serving, tiny_checkpoint, adapter, items, tmp_path, monkeypatch, sync
):
    """Greedy, the served group is the in-process group of the policy as it is at that step: so the server
    was given the new weights (step 1's replies differ from step 0's), V2P and an interruption alike."""
    import models.loading
    from train.rollouts import rollout

    # transformers serve places Qwen-VL text after a video as transformers does (docs/serving.md)
    monkeypatch.setattr(models.loading, "use_released_positions", lambda model: False)
    policy = _lora_policy(tiny_checkpoint)
    server = ServerConfig(command=_serve_command(sync is WeightSync.by_path), video=VideoTransport.path)
    settings = GrpoConfig(server=server, weight_sync=sync, num_generations=2, temperature=0.0)
    settings.max_completion_length = 8
    engine = ServedRollouts(settings, adapter, tmp_path / "rollout_weights")
    texts = {}
    try:
        for step in (0, 1):
            if step:
                _perturb(policy, "lora_B", 0.5)
            served = engine.rollouts(policy, list(items.values()), step)
            for item, group in zip(items.values(), served, strict=True):
                mine = rollout(policy, adapter, item, generations=2, temperature=0.0, max_tokens=8)
                # The conversation the loss scores is the one the server answered: greedy from it in
                # process gives the served replies (but for the leading whitespace the server's Qwen
                # response template drops). For an interruption it holds the model's own cut answer as
                # text, tokenized again (a random model's broken UTF-8 may not survive the round trip, so
                # it is compared as the server got it, not with the in-process rollout's ids).
                assert group.texts == [t.lstrip() for t in _greedy(policy, adapter, group.context)] * 2
                if "spoken" in mine.item.meta:
                    assert group.item.meta["spoken"] == mine.item.meta["spoken"].lstrip()
                else:
                    assert group.texts == [t.lstrip() for t in mine.texts], (step, item.id)
                    assert group.context["input_ids"].equal(mine.context["input_ids"])
                texts[step, item.id] = group.texts
            assert [p.name for p in (tmp_path / "rollout_weights").iterdir()] == [f"step-{step}"]
    finally:
        engine.close()
    assert any(texts[0, i.id] != texts[1, i.id] for i in items.values()), "the update changed no reply"


# A small GRPO through one transformers serve that loads each step's weights by path.
SERVED_GRPO = [
    "stage.method=grpo",
    "stage.grpo.num_generations=2",
    "stage.grpo.max_completion_length=8",
    f"stage.grpo.server.command='{_serve_command(by_path=True)}'",
    "stage.grpo.server.video=path",
    "stage.grpo.weight_sync=by_path",
]


@pytest.mark.slow
def test_a_grpo_run_rolls_out_through_a_server(serving, preference_after_sft, tmp_path):
    """python -m train's GRPO with stage.grpo.server: trained, evaluated and logged as in process, every
    step's weights handed to the server (its log shows a request naming each)."""
    cfg, result = preference_after_sft(tmp_path, "served", "trainer.logging_steps=1", *SERVED_GRPO)
    run_dir = Path(cfg.run_dir)
    steps = [e for e in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())]
    rewards = [e for e in steps if "train/reward" in e]
    assert len(rewards) == cfg.trainer.max_steps
    log = (run_dir / "rollout_server.log").read_text()
    for step in range(cfg.trainer.max_steps):
        assert f"step-{step}" in log, step
    assert [p.name for p in (run_dir / "rollout_weights").iterdir()] == [f"step-{cfg.trainer.max_steps - 1}"]
    assert result.summary["benchmarks"]


@pytest.mark.slow
def test_served_grpo_under_zero2_on_two_processes(serving, tmp_path):
    """Two ranks, one server: rank 0 writes each step's weights and hands them over, both ranks roll out
    through it, and the run trains to its end."""
    import runs

    launch = runs.Launch(runs.DEEPSPEED_LAUNCH, runs.DEEPSPEED_OVERRIDES + SERVED_GRPO, runs.DEEPSPEED_ENV)
    runs.train(tmp_path, "zero", launch)
    run_dir = tmp_path / "zero"
    last = run_dir / "checkpoints" / f"checkpoint-{runs.MAX_STEPS}"
    assert len(runs.logged(last, "reward")) == runs.MAX_STEPS
    log = (run_dir / "rollout_server.log").read_text()
    assert all(f"step-{step}" in log for step in range(runs.MAX_STEPS))
