"""GRPO's rollouts through a server (train/served_rollouts.py): the policy written as a whole checkpoint (the
LoRA adapter merged without touching the live weights), handed to a real ``transformers serve`` before
every step (restarted, or named by path), and sampling what the policy in process samples; the refusals;
a served GRPO run end to end."""

from __future__ import annotations

import json
import math
import re
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from core.config import ModelConfig, ServerConfig, VideoTransport
from core.errors import ConfigError
from core.rundir import RunDir
from core.text_models import Reply
from train.grpo_config import GrpoConfig, WeightSync
from train.policy_weights import save_policy
from train.served_rollouts import ServedSampler, check_served_rollouts


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
    from models.cached_decoder import CachedDecoder
    from models.sampling import sample_group

    decoder = CachedDecoder(model, adapter)
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


def test_the_served_weights_sample_from_the_tempered_distribution_alone(tiny_checkpoint, adapter, tmp_path):
    """Whatever the checkpoint's own sampling settings (here Qwen-VL Instruct's near-greedy ones), the
    weights handed to a server sample as the loss scores: temperature only, and sampling at all."""
    from transformers import GenerationConfig

    from train.policy_weights import plain_sampling

    policy = _lora_policy(tiny_checkpoint)
    own = policy.get_base_model().generation_config
    own.update(do_sample=True, temperature=0.01, top_k=1, top_p=0.001, repetition_penalty=1.05)
    save_policy(policy, adapter.processor, tmp_path / "step-0", plain_sampling(policy))
    written = GenerationConfig.from_pretrained(tmp_path / "step-0")
    names = ("do_sample", "temperature", "top_k", "top_p", "repetition_penalty")
    assert [getattr(written, name) for name in names] == [True, 1.0, 0, 1.0, 1.0]
    assert written.eos_token_id == own.eos_token_id
    assert own.top_k == 1  # the policy's own is left as it is


def test_a_fully_trained_policy_is_written_as_it_is(tiny_checkpoint, adapter, items, tmp_path):
    from models.loading import load_model

    model, _ = load_model(ModelConfig(name_or_path=str(tiny_checkpoint)))
    save_policy(model, adapter.processor, tmp_path / "full")
    written, _ = load_model(ModelConfig(name_or_path=str(tmp_path / "full")))
    item = items["v2p"]
    torch.testing.assert_close(_logits(written, adapter, item), _logits(model.eval(), adapter, item))


def test_served_rollouts_refuse_what_they_cannot_do():
    running = ServerConfig(endpoint=replace(ServerConfig().endpoint, base_url="http://127.0.0.1:1/v1"))
    with pytest.raises(ConfigError, match="weight_sync=reload"):
        check_served_rollouts(GrpoConfig(server=running, weight_sync=WeightSync.restart))
    check_served_rollouts(GrpoConfig(server=running, weight_sync=WeightSync.by_path))
    with pytest.raises(ConfigError, match="stage.grpo.server.model"):
        check_served_rollouts(GrpoConfig(server=running, weight_sync=WeightSync.reload))
    check_served_rollouts(GrpoConfig(server=replace(running, model="policy"), weight_sync=WeightSync.reload))


def _vllm_control(failing: str | None = None, status: int = 500):
    """A respond function answering vLLM's control endpoints as vLLM 0.32 does, ``failing`` (a path) with
    ``status`` and an error body."""
    from fake_openai import error_body

    answers = {"/collective_rpc": {"results": [None]}, "/reset_prefix_cache": {"success": True}}

    def respond(handler, body):
        path = handler.path.split("?")[0]
        if path == failing:
            return status, error_body("Cannot copy out of meta tensor")
        return 200, json.dumps(answers.get(path, {})).encode()

    return respond


def _reloading(base_url: str, model: str | None = "policy") -> GrpoConfig:
    endpoint = replace(ServerConfig().endpoint, base_url=base_url)
    return GrpoConfig(server=ServerConfig(endpoint=endpoint, model=model), weight_sync=WeightSync.reload)


def test_a_vllm_server_re_reads_each_steps_weights_in_place(chat_server, tiny_checkpoint, adapter, tmp_path):
    """weight_sync=reload: before each step the engine is paused, re-reads the step's directory, empties its
    prefix cache (else the old weights' keys and values are reused) and resumes, in that order; requests
    keep the name the server started under."""
    server = chat_server(_vllm_control())
    engine = ServedSampler(_reloading(server.url), adapter, RunDir(tmp_path))
    policy = _lora_policy(tiny_checkpoint)
    for step in range(2):
        engine.sync(policy, step)
    weights = [str((tmp_path / "rollout_weights" / f"step-{step}").resolve()) for step in range(2)]
    calls = [(r["path"], r["body"]) for r in server.requests]
    assert calls == [
        call
        for path in weights
        for call in (
            ("/pause?mode=wait", {}),
            ("/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": path}}),
            ("/reset_prefix_cache", {}),
            ("/resume", {}),
        )
    ]
    assert engine._served.client.model == "policy"
    assert [p.name for p in (tmp_path / "rollout_weights").iterdir()] == ["step-1"]


@pytest.mark.parametrize(
    ("failing", "status", "said"),
    [("/collective_rpc", 500, "meta tensor"), ("/pause", 404, "VLLM_SERVER_DEV_MODE=1")],
)
def test_a_failed_reload_stops_with_the_server_left_paused(
    chat_server, tiny_checkpoint, adapter, tmp_path, failing, status, said
):
    """A reload that fails leaves vLLM's weights half replaced: the run stops naming the endpoint and what
    the server said, and never resumes the engine on them."""
    from models.server_process import ServerError

    server = chat_server(_vllm_control(failing, status))
    engine = ServedSampler(_reloading(server.url), adapter, RunDir(tmp_path))
    with pytest.raises(ServerError, match=f"{failing}.* answered {status}.*{said}"):
        engine.sync(_lora_policy(tiny_checkpoint), 0)
    assert "/resume" not in [r["path"] for r in server.requests]


def test_a_launched_server_to_reload_is_started_once_in_vllms_dev_mode(adapter, tmp_path, monkeypatch):
    """The launched server serves vLLM's control endpoints (VLLM_SERVER_DEV_MODE=1) and is started once, on
    the first step's weights, which it then serves without a reload; restart starts it each step, as it is."""
    from contextlib import contextmanager

    import train.served_rollouts as served_rollouts

    launches, reloads = [], []

    @contextmanager
    def launched(command, model, log, timeout_s, env=None):
        launches.append((Path(model).name, env))
        yield "http://127.0.0.1:1/v1"

    monkeypatch.setattr(served_rollouts, "launched_server", launched)
    monkeypatch.setattr(
        served_rollouts, "reload_weights", lambda url, weights, timeout_s: reloads.append(weights.name)
    )
    monkeypatch.setattr(
        served_rollouts, "save_policy", lambda policy, processor, out, generation: out.mkdir(parents=True)
    )
    monkeypatch.setattr(served_rollouts, "plain_sampling", lambda policy: None)
    for sync in (WeightSync.reload, WeightSync.restart):
        launches.clear()
        server = ServerConfig(command="vllm serve {model} --port {port}")
        settings = GrpoConfig(server=server, weight_sync=sync)
        engine = ServedSampler(settings, adapter, RunDir(tmp_path / str(sync)))
        for step in range(3):
            engine.sync(None, step)
        engine.close()
        if sync is WeightSync.reload:
            assert launches == [("step-0", {"VLLM_SERVER_DEV_MODE": "1"})] and reloads == ["step-1", "step-2"]
            assert engine._served.client.model == str(RunDir(tmp_path / "reload").rollout_weights(0))
        else:
            assert launches == [(f"step-{step}", None) for step in range(3)]


def test_a_served_completion_is_scored_as_the_servers_tokens_or_its_text_tokenized_again(adapter, tmp_path):
    server = ServerConfig(command="serve {model} --port {port}")
    settings = GrpoConfig(server=server, weight_sync=WeightSync.restart, max_completion_length=4)
    engine = ServedSampler(settings, adapter, RunDir(tmp_path))
    tokenizer = adapter.processor.tokenizer
    eos, nan = tokenizer.eos_token_id, math.nan
    ids = tokenizer("red", add_special_tokens=False)["input_ids"]
    assert _same(_scored(engine, Reply("red", "stop")), ([*ids, eos], True, [nan] * (len(ids) + 1)))
    assert _same(_scored(engine, Reply("red", "length")), (ids, False, [nan] * len(ids)))
    # A media placeholder sampled: the completion ends before it, and the rewards read what is kept.
    word = tokenizer(" red", add_special_tokens=False)["input_ids"]
    engine._placeholders = {7}
    assert _same(_scored(engine, Reply("?", "length", [*word, 7, 6], [-1.0] * (len(word) + 2))),
                 (word, False, [-1.0] * len(word)))  # fmt: skip
    assert engine.placeholder_cuts == 1
    assert engine._completion(Reply("? ?", "stop", [*word, 7], [0.0] * (len(word) + 1))).text == " red"
    # The server's own ids and log-probabilities, as vLLM returns them: never tokenized again.
    assert _same(
        _scored(engine, Reply("?", "stop", [5, 6], [-1.0, -2.0])), ([5, 6, eos], True, [-1.0, -2.0, nan])
    )
    assert _same(_scored(engine, Reply("?", "stop", [5, eos], [-1.0, -0.5])), ([5, eos], True, [-1.0, -0.5]))


def _scored(engine, reply):
    completion = engine._completion(reply)
    return completion.ids, completion.ended, completion.logps


def _same(got, expected) -> bool:
    """Token ids, ended and log-probabilities equal, NaN equal to NaN."""
    (ids, ended, logps), (ids2, ended2, logps2) = got, expected
    same_logps = len(logps) == len(logps2) and all(
        (math.isnan(a) and math.isnan(b)) or a == b for a, b in zip(logps, logps2, strict=True)
    )
    return ids == ids2 and ended == ended2 and same_logps


def test_a_reply_carries_the_sampled_tokens_only_when_the_server_gives_them_as_ids():
    from core.text_models import _sampled_tokens

    as_ids = {
        "logprobs": {
            "content": [{"token": "token_id:7", "logprob": -0.5}, {"token": "token_id:12", "logprob": -1.5}]
        }
    }
    assert _sampled_tokens(as_ids) == ([7, 12], [-0.5, -1.5])
    as_text = {"logprobs": {"content": [{"token": "red", "logprob": -0.5}]}}
    assert _sampled_tokens(as_text) == (None, None)  # text tokens: no ids to score
    assert _sampled_tokens({"logprobs": None}) == _sampled_tokens({}) == (None, None)


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
    engine = ServedSampler(settings, adapter, RunDir(tmp_path))
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
@pytest.mark.parametrize("stage", [2, 3])
def test_served_grpo_under_zero_on_two_processes(serving, tmp_path, stage):
    """Two ranks, one server: rank 0 writes each step's weights (under ZeRO-3 gathered from both ranks'
    partitions) and hands them over, both ranks roll out through it, and the run trains to its end. The
    weights served last are the whole model: the frozen ones equal the base checkpoint's, and the adapted
    ones carry what training moved."""
    import runs
    from safetensors.torch import load_file

    overrides = [f"trainer=zero{stage}" if o == "trainer=zero2" else o for o in runs.DEEPSPEED_OVERRIDES]
    # Weight decay moves the trained weights at every step. Without it only a group whose two completions
    # earn different rewards moves them, and the tiny model's rarely do (rank 0's groups: none in 8 steps
    # here); a run with none on either rank served the base weights, failing the test, not the hand-over.
    overrides += ["trainer.weight_decay=0.01"]
    launch = runs.Launch(runs.DEEPSPEED_LAUNCH, overrides + SERVED_GRPO, runs.DEEPSPEED_ENV)
    runs.train(tmp_path, "zero", launch)
    run_dir = tmp_path / "zero"
    assert json.loads((run_dir / "deepspeed.json").read_text())["zero_optimization"]["stage"] == stage
    last = run_dir / "checkpoints" / f"checkpoint-{runs.MAX_STEPS}"
    assert len(runs.logged(last, "reward")) == runs.MAX_STEPS
    log = (run_dir / "rollout_server.log").read_text()
    assert all(f"step-{step}" in log for step in range(runs.MAX_STEPS))

    served = load_file(run_dir / "rollout_weights" / f"step-{runs.MAX_STEPS - 1}" / "model.safetensors")
    base = load_file(tmp_path / "models" / "tiny-qwen2.5-vl" / "model.safetensors")  # the run's own
    assert set(served) == set(base)
    assert all(served[key].shape == base[key].shape for key in base)
    moved = {key for key in base if not served[key].equal(base[key])}
    assert moved, "training moved no served weight"
    # What the quickstart's LoRA trains: the language model's projections, and its modules_to_save.
    trained = re.compile(r"model\.layers\..*_proj\.weight|(lm_head|model\.embed_tokens|visual\.merger)\..*")
    assert all(trained.fullmatch(key) for key in moved), sorted(moved)


@pytest.mark.slow
def test_a_servers_own_tokens_are_scored_as_sampled_and_corrected_for(
    chat_server, preference_after_sft, tiny_checkpoint, tmp_path
):
    """A server that returns its sampled tokens as ids with their log-probabilities (scripted: vLLM's
    reply to ``return_tokens_as_token_ids``, which transformers serve refuses): the loss scores those very
    ids, corrected by the policy-to-sampler ratio (logged every step); a completion with a media
    placeholder (a server samples the whole vocabulary) is cut before it and counted, and one spelt out in
    an interruption's cut answer is left out of the conversation fed back."""
    from transformers import AutoConfig, AutoTokenizer

    placeholder = AutoConfig.from_pretrained(tiny_checkpoint).video_token_id
    spelt = AutoTokenizer.from_pretrained(tiny_checkpoint).convert_ids_to_tokens(placeholder)

    def respond(handler, body):
        if "logprobs" not in body:  # the greedy answer an interruption cuts, a placeholder spelt out in it
            return 200, _reply({"message": {"content": f"a red{spelt}"}, "finish_reason": "length"})
        ids = [40 + body["seed"] % 7, 50 + body["seed"] % 3, 60 + body["seed"] % 5]
        if body["seed"] % 4 == 0:
            ids[2] = placeholder
        tokens = [{"token": f"token_id:{i}", "logprob": -4.0} for i in ids]
        choice = {"message": {"content": "x"}, "finish_reason": "length", "logprobs": {"content": tokens}}
        return 200, _reply(choice)

    server = chat_server(respond)
    overrides = [
        "trainer.logging_steps=1",
        "stage.method=grpo",
        "stage.grpo.num_generations=2",
        "stage.grpo.max_completion_length=3",
        f"stage.grpo.server.endpoint.base_url={server.url}",
        "stage.grpo.server.sampled_tokens=true",
        "stage.grpo.weight_sync=by_path",
        "stage.grpo.vllm_importance_sampling_mode=token_truncate",
    ]
    cfg, _ = preference_after_sft(tmp_path, "served_ids", *overrides)
    steps = [json.loads(line) for line in (Path(cfg.run_dir) / "metrics.jsonl").read_text().splitlines()]
    steps = [s for s in steps if "train/reward" in s]
    assert len(steps) == cfg.trainer.max_steps
    assert all(math.isfinite(s["train/loss"]) for s in steps), [s["train/loss"] for s in steps]
    ratios = [s["train/sampling/importance_sampling_ratio/mean"] for s in steps]
    assert all(0.0 < r <= 3.0 for r in ratios) and any(r != 1.0 for r in ratios), ratios
    cut = [s["train/completions/placeholder_cut_ratio"] for s in steps]
    assert all(0.0 <= c < 1.0 for c in cut) and any(c > 0 for c in cut), cut
    sampled = [r["body"] for r in server.requests if "logprobs" in r["body"]]
    assert sampled and all(b["return_tokens_as_token_ids"] for b in sampled)
    assert {r["body"]["model"].rsplit("/", 1)[-1] for r in server.requests} == {
        f"step-{n}" for n in range(cfg.trainer.max_steps)
    }


def _reply(choice: dict) -> bytes:
    return json.dumps({"choices": [{"index": 0, **choice}]}).encode()


@pytest.mark.slow
def test_a_killed_served_grpo_run_resumes_with_equal_losses(serving, tmp_path):
    """Killed after a checkpoint and resumed, a run rolling out through a server asks it the same seeded
    requests after handing it the restored weights, and ends as a run never killed (one request at a time:
    transformers serve seeds its one global generator per request)."""
    import runs

    served = [*SERVED_GRPO, "stage.grpo.server.endpoint.workers=1"]
    served += ["stage.grpo.num_generations=4", "stage.grpo.max_completion_length=24"]  # groups that differ
    runs.check_resume_after_kill(tmp_path, runs.Launch([sys.executable], served, {}))
    losses = runs.logged(tmp_path / "killed" / "checkpoints" / f"checkpoint-{runs.MAX_STEPS}")
    assert any(loss != 0.0 for loss in losses), "the sampled groups must carry some signal"
