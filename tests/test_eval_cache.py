"""What is generated again and what is not: the shared results cache evaluates the same weights under the
same settings once, wherever their files lie; other weights, other settings, a changed item, a new benchmark
version or a changed chat format are generated again; a changed scorer re-scores what is stored."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from eval.results_cache import FileHashes, Weights, checkpoint_fingerprint, item_fingerprint


class Killed(RuntimeError):
    """Stands for a SIGKILL in the middle of an evaluation."""


@pytest.fixture(scope="module")
def base_and_adapters(synthetic_build, tiny_checkpoint, tmp_path_factory):
    """The tiny base, two different LoRA adapters saved on it, and small evaluation settings."""
    import torch
    from peft import LoraConfig, get_peft_model

    from core.config import EvalConfig, ModelConfig
    from eval.benchmarks.v2p import V2PSettings
    from models.loading import load_model

    adapters = tmp_path_factory.mktemp("adapters")
    for seed in (0, 1):
        torch.manual_seed(seed)
        model, _ = load_model(ModelConfig(name_or_path=str(tiny_checkpoint)))
        lora = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
        get_peft_model(model, lora).save_pretrained(adapters / f"adapter-{seed}")
    v2p = V2PSettings(root=str(synthetic_build.v2p_bench), max_new_tokens=3)
    cfg = EvalConfig(benchmarks=["v2p"], settings={"v2p": v2p}, limit=3, batch_size=1, bootstrap_resamples=20)
    return str(tiny_checkpoint), adapters, cfg


@pytest.fixture()
def cfg(base_and_adapters, tmp_path):
    """The evaluation settings with a results cache of this test's own."""
    return replace(base_and_adapters[2], results_cache=str(tmp_path / "results_cache"))


def _evaluate(cfg, run_dir: Path, weights: Weights, media=None, kill_after: int | None = None):
    """Evaluate ``weights`` (the base, or the base with a LoRA adapter applied) as checkpoint-2.

    Returns:
        The per-sample records, the number of items generated, and the summary.
    """
    from peft import PeftModel

    import eval.predictor
    from core.config import EvalRunConfig, ModelConfig
    from core.decoding import MediaSpec
    from core.media import FrameCache
    from core.metric_logging import NullLogger
    from core.run import Run
    from core.rundir import RunDir
    from eval.benchmarks import resolve_settings
    from eval.evaluation import Evaluation
    from eval.predictor import InProcess
    from models.chat import make_adapter
    from models.loading import load_model

    media = media or MediaSpec()
    model, processor = load_model(ModelConfig(name_or_path=weights.base))
    if weights.checkpoint:
        model = PeftModel.from_pretrained(model, weights.checkpoint)
    run_cfg = EvalRunConfig(
        model=ModelConfig(name_or_path=weights.base), media=media, eval=resolve_settings(cfg)
    )
    evaluation = Evaluation(Run(run_cfg, RunDir(run_dir)), NullLogger(), FrameCache(None))
    generated = []
    real_generate = eval.predictor.generate

    def counting_generate(model, chat, samples, max_new_tokens):
        if kill_after is not None and len(generated) == kill_after:
            raise Killed()
        generated.extend(s.id for s in samples)
        return real_generate(model, chat, samples, max_new_tokens)

    eval.predictor.generate = counting_generate
    try:
        predictor = InProcess(model, make_adapter("qwen2_5_vl", processor, media, FrameCache(None)))
        summary = evaluation.evaluate(predictor, "checkpoint-2", step=2, checkpoint=weights.checkpoint)
    finally:
        eval.predictor.generate = real_generate
    return _records(run_dir), len(generated), summary


def _records(run_dir: Path) -> dict[str, dict]:
    path = run_dir / "eval" / "checkpoint-2" / "v2p.jsonl"
    return {r["id"]: r for r in map(json.loads, path.read_text().splitlines())}


@pytest.mark.slow
def test_the_same_adapter_under_another_path_is_not_evaluated_again(base_and_adapters, cfg, tmp_path):
    base, adapters, _ = base_and_adapters
    first, n_first, _ = _evaluate(cfg, tmp_path / "run_a", Weights(base, adapters / "adapter-0"))
    moved = shutil.copytree(adapters / "adapter-0", tmp_path / "elsewhere" / "checkpoint-9")
    second, n_second, _ = _evaluate(cfg, tmp_path / "run_b", Weights(base, moved))
    assert n_first == cfg.limit and n_second == 0
    assert second == first  # copied into the second run's own results, which the reports read


@pytest.mark.slow
def test_the_same_untuned_base_in_two_runs_is_evaluated_once(base_and_adapters, cfg, tmp_path):
    base = base_and_adapters[0]
    _, n_first, _ = _evaluate(cfg, tmp_path / "run_a", Weights(base))
    _, n_second, _ = _evaluate(cfg, tmp_path / "run_b", Weights(base))
    assert (n_first, n_second) == (cfg.limit, 0)


@pytest.mark.slow
def test_other_weights_or_other_media_are_evaluated_again(base_and_adapters, cfg, tmp_path):
    from core.decoding import MediaSpec

    base, adapters, _ = base_and_adapters
    _evaluate(cfg, tmp_path / "run_a", Weights(base, adapters / "adapter-0"))
    _, n_other_weights, _ = _evaluate(cfg, tmp_path / "run_b", Weights(base, adapters / "adapter-1"))
    _, n_other_base, _ = _evaluate(cfg, tmp_path / "run_c", Weights(base))
    fewer_frames = MediaSpec(num_frames=MediaSpec().num_frames // 2)
    _, n_other_media, _ = _evaluate(
        cfg, tmp_path / "run_d", Weights(base, adapters / "adapter-0"), fewer_frames
    )
    assert n_other_weights == n_other_base == n_other_media == cfg.limit


@pytest.mark.slow
def test_a_killed_evaluation_with_the_cache_generates_only_the_missing_items(
    base_and_adapters, cfg, tmp_path
):
    base, adapters, _ = base_and_adapters
    weights = Weights(base, adapters / "adapter-1")
    straight, _, _ = _evaluate(cfg, tmp_path / "straight", weights)  # fills the cache...
    shutil.rmtree(cfg.results_cache)  # ...which is then lost: only the killed run's own items remain
    with pytest.raises(Killed):
        _evaluate(cfg, tmp_path / "killed", weights, kill_after=1)
    resumed, n_resumed, _ = _evaluate(cfg, tmp_path / "killed", weights)
    assert n_resumed == cfg.limit - 1
    assert {i: r["prediction"] for i, r in resumed.items()} == {
        i: r["prediction"] for i, r in straight.items()
    }


def test_file_hashes_are_computed_once_per_file_version(tmp_path, monkeypatch):
    import eval.results_cache as results_cache

    hashed = []
    real_hash = results_cache._hash_file
    monkeypatch.setattr(results_cache, "_hash_file", lambda path: hashed.append(path) or real_hash(path))
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"a" * 100)
    sidecar = tmp_path / "cache" / "file_hashes.json"
    first = FileHashes(sidecar).sha256(weights)
    assert FileHashes(sidecar).sha256(weights) == first and len(hashed) == 1  # a new process: no re-read
    weights.write_bytes(b"b" * 101)
    assert FileHashes(sidecar).sha256(weights) != first and len(hashed) == 2


def test_a_lora_checkpoint_is_identified_by_its_adapter_not_by_where_its_base_lay(tmp_path):
    hashes = FileHashes(tmp_path / "file_hashes.json")
    checkpoint = tmp_path / "checkpoint-4"
    checkpoint.mkdir()
    (checkpoint / "adapter_model.safetensors").write_bytes(b"lora")
    (checkpoint / "optimizer.pt").write_bytes(b"state")

    def fingerprint(**config) -> str:
        (checkpoint / "adapter_config.json").write_text(json.dumps({"r": 4, **config}))
        return checkpoint_fingerprint("base", checkpoint, hashes)

    here = fingerprint(base_model_name_or_path="/old/place")
    assert fingerprint(base_model_name_or_path="/new/place") == here
    assert fingerprint(base_model_name_or_path="/old/place", r=8) != here
    (checkpoint / "optimizer.pt").write_bytes(b"other state")  # does not change what the model computes
    assert fingerprint(base_model_name_or_path="/old/place") == here
    assert checkpoint_fingerprint("another base", checkpoint, hashes) != here


def test_a_changed_item_or_a_replaced_video_changes_the_item_fingerprint(tmp_path):
    from core.sample import Part, Sample, Turn

    video = tmp_path / "v.mp4"
    video.write_bytes(b"video")

    def sample(question: str) -> Sample:
        turn = Turn("user", [Part.video(str(video), 0.0, 2.0), Part.txt(question)])
        return Sample("q1", "v2p", [turn], "synthetic", "v", (0.0, 2.0))

    before = item_fingerprint(sample("What is marked?"))
    assert item_fingerprint(sample("What is marked?")) == before
    assert item_fingerprint(sample("What moved?")) != before
    video.write_bytes(b"another video")
    os.utime(video, ns=(1, 1))
    assert item_fingerprint(sample("What is marked?")) != before


@pytest.mark.slow
def test_a_new_benchmark_version_generates_again_and_a_new_scorer_only_rescores(
    base_and_adapters, cfg, tmp_path, monkeypatch
):
    from eval.benchmarks import BENCHMARKS

    weights = Weights(base_and_adapters[0], base_and_adapters[1] / "adapter-0")
    run_dir = tmp_path / "run"
    v2p = BENCHMARKS["v2p"]
    first, n_first, summary = _evaluate(cfg, run_dir, weights)
    assert n_first == cfg.limit and summary["benchmarks"]["v2p"]["version"] == v2p.version
    accuracy = summary["benchmarks"]["v2p"]["metrics"]["accuracy"]["baseline"]  # the one model so far

    # A fixed scorer (here: every answer right) changes the numbers of what is on disk, generating nothing.
    always_right = replace(v2p, score=lambda prediction, meta: {"accuracy": 1.0})
    monkeypatch.setitem(BENCHMARKS, "v2p", always_right)
    _, n_rescored, summary = _evaluate(cfg, run_dir, weights)
    assert n_rescored == 0 and accuracy < 1.0
    assert summary["benchmarks"]["v2p"]["metrics"]["accuracy"]["baseline"] == 1.0

    # A new version of the benchmark: every item is generated again, in this run and through the cache.
    monkeypatch.setitem(BENCHMARKS, "v2p", replace(v2p, version=v2p.version + 1))
    _, n_new_version, summary = _evaluate(cfg, run_dir, weights)
    _, n_elsewhere, _ = _evaluate(cfg, tmp_path / "another_run", weights)
    assert (n_new_version, n_elsewhere) == (cfg.limit, 0)  # the second run finds the new version's results
    assert summary["benchmarks"]["v2p"]["version"] == v2p.version + 1


@pytest.mark.slow
def test_a_changed_chat_format_generates_again(base_and_adapters, cfg, tmp_path, monkeypatch):
    from models.chat import CHAT_FORMATS

    weights = Weights(base_and_adapters[0])
    _, n_first, _ = _evaluate(cfg, tmp_path / "run", weights)
    monkeypatch.setitem(CHAT_FORMATS, "qwen2_5_vl", replace(CHAT_FORMATS["qwen2_5_vl"], system="Be brief."))
    _, n_same_run, _ = _evaluate(cfg, tmp_path / "run", weights)
    _, n_other_run, _ = _evaluate(cfg, tmp_path / "other", weights)
    assert n_first == n_same_run == cfg.limit and n_other_run == 0
