"""DeepSpeed ZeRO-2 and ZeRO-3 on two CPU processes (gloo), with sharded checkpoint evaluation.

The slow tests launch ``torchrun --nproc_per_node 2 -m train`` on the tiny model: LoRA, two steps, one
save, both benchmarks on the baseline and the checkpoint (ZeRO-3 with offload: training only), with the
projector's learning rate at 0. The first run on a machine compiles DeepSpeed's CPU communication op
(~45 s) and, for offload, its CPU Adam into ``outputs/torch_extensions`` (gitignored); later runs reuse them.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from configs import compose
from paths import REPO
from runs import logged

from core.config import TrainerConfig
from core.errors import ConfigError
from train.deepspeed import deepspeed_config

EVAL_LIMIT = 5  # odd, so two ranks get unequal shards and the shorter one is padded


def _trainer(name: str) -> TrainerConfig:
    """``conf/trainer/<name>.yaml`` as the training composes it."""
    return compose("train", f"trainer={name}").trainer


@pytest.mark.parametrize(
    ("name", "stage", "offload"), [("zero2", 2, False), ("zero3", 3, False), ("zero3_offload", 3, True)]
)
def test_trainer_files_derive_the_deepspeed_config(name, stage, offload):
    trainer = _trainer(name)
    config = deepspeed_config(trainer)
    assert config["zero_optimization"]["stage"] == stage
    assert ("offload_optimizer" in config["zero_optimization"]) is offload
    # Everything the Trainer also knows is left to it, so there is one source of truth.
    for key in ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "gradient_clipping"):
        assert config[key] == "auto"
    assert config["bf16"] == {"enabled": "auto"} and config["fp16"] == {"enabled": "auto"}
    assert "optimizer" not in config, "the Trainer builds the optimizer, grouped by tower (train/optim.py)"
    assert trainer.batch_size == _trainer("gpu").batch_size  # the GPU settings, extended


def test_no_zero_means_no_deepspeed_and_bad_settings_fail():
    assert deepspeed_config(_trainer("cpu")) is None
    with pytest.raises(ConfigError, match="trainer.zero"):
        deepspeed_config(TrainerConfig(zero=1))
    with pytest.raises(ConfigError, match="offload"):
        deepspeed_config(TrainerConfig(offload=True))


@pytest.mark.parametrize("world", [1, 2, 3])
def test_shards_cover_every_item_once_in_equal_rounds(monkeypatch, world):
    from core import distributed
    from eval.benchmarks.ovi import OVI, OviSettings
    from eval.generation import Generation

    items = [SimpleNamespace(id=f"mcq{i}", meta={"format": "mcq"}, turns=[]) for i in range(5)]
    items += [SimpleNamespace(id=f"open{i}", meta={"format": "open"}, turns=[]) for i in range(2)]
    generation = Generation(OVI, items, OviSettings(), batch_size=2, setting="s", items={})
    monkeypatch.setattr(distributed, "world_size", lambda: world)
    rounds = {}
    for r in range(world):
        monkeypatch.setattr(distributed, "rank", lambda r=r: r)
        rounds[r] = list(generation._shard_batches(items))
    shapes = {r: [(group, len(chunk)) for group, chunk, _ in rs] for r, rs in rounds.items()}
    assert all(shape == shapes[0] for shape in shapes.values()), "every rank must run the same rounds"
    kept = [
        s.id for rs in rounds.values() for _, chunk, real in rs for s, k in zip(chunk, real, strict=True) if k
    ]
    assert sorted(kept) == sorted(s.id for s in items)


def _torchrun(output_root: Path, run_name: str, *overrides: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "DS_ACCELERATOR": "cpu",  # DeepSpeed's CPU accelerator (gloo), even where a GPU is visible
        "CUDA_VISIBLE_DEVICES": "",
        "TORCH_EXTENSIONS_DIR": str(REPO / "outputs" / "torch_extensions"),  # the comm op compiles once
        "OMP_NUM_THREADS": "1",  # two ranks on two cores
        "WANDB_MODE": "offline",
        "TOKENIZERS_PARALLELISM": "false",
    }
    command = [
        *(sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"),
        *("-m", "train", "+exp=quickstart", f"output_root={output_root}", f"run_name={run_name}"),
        *("trainer.max_steps=2", "trainer.save_steps=2", "trainer.batch_size=2", "trainer.grad_accum=1"),
        *("trainer.num_workers=0", "trainer.gradient_checkpointing=false", "trainer.logging_steps=1"),
        *("data.synthetic.train_videos=4", "data.synthetic.eval_videos=3"),
        *(
            "data.synthetic.vp_questions_per_video=2",
            f"eval.limit={EVAL_LIMIT}",
            "eval.settings.ovi.max_new_tokens_open=16",
        ),
        *overrides,
    ]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def output_root(tmp_path_factory):
    """Shared by every run, so the synthetic data and the tiny model are built once."""
    return tmp_path_factory.mktemp("deepspeed")


def _check_run(output_root: Path, run_name: str, stage: int, *overrides: str) -> Path:
    # The quickstart trains the merger (projector) fully; at a learning rate of 0 it must stay as it was.
    result = _torchrun(output_root, run_name, f"trainer=zero{stage}", "trainer.lr_projector=0.0", *overrides)
    # torchrun exits 0 only when every rank did (an abort at exit on either rank fails it).
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    assert result.stdout.count("report:") == 1, "rank 0 alone reports"
    run_dir = output_root / run_name
    assert json.loads((run_dir / "deepspeed.json").read_text())["zero_optimization"]["stage"] == stage
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [c["name"] for c in summary["checkpoints"]] == ["checkpoint-2"]
    for bench, metric in (("v2p", "accuracy"), ("ovi", "ca")):
        entry = summary["benchmarks"][bench]["metrics"][metric]
        assert entry["baseline"] is not None and "checkpoint-2" in entry["checkpoints"]
    # Open-ended items ran the paper's interruption simulation on both ranks, stepping together.
    ovi = summary["benchmarks"]["ovi"]
    assert ovi["n_simulated"] >= 1 and ovi["protocol"].startswith("simulated")
    _check_each_item_once(run_dir)
    assert len(list(run_dir.glob("wandb/offline-run-*"))) == 1, "one W&B run, from rank 0"
    # The Trainer sees both ranks (core.distributed.share_cpu_process_group): each saved its own RNG state
    # and the ranks trained on different batches (an epoch goes twice as fast as on one rank).
    checkpoint = run_dir / "checkpoints" / "checkpoint-2"
    assert sorted(p.name for p in checkpoint.glob("rng_state*.pth")) == ["rng_state_0.pth", "rng_state_1.pth"]
    # ZeRO-3 loads each rank's partition only (deepspeed.zero.Init); ZeRO-2 the whole model.
    assert json.loads((run_dir / "parameters.json").read_text())["partitioned_at_load"] is (stage == 3)
    _check_tower_learning_rates(output_root, run_dir / "checkpoints" / "checkpoint-2")
    return run_dir


def _check_tower_learning_rates(output_root: Path, checkpoint: Path) -> None:
    """The saved modules: the merger (lr_projector=0) as in the base checkpoint, lm_head (lr) changed."""
    from safetensors.torch import load_file

    from core.config import ModelConfig
    from models.loading import load_model

    model, _ = load_model(ModelConfig(name_or_path=str(output_root / "models" / "tiny-qwen2.5-vl")))
    base = dict(model.named_parameters())
    tuned = {
        name.removeprefix("base_model.model."): tensor
        for name, tensor in load_file(checkpoint / "adapter_model.safetensors").items()
    }
    merger = [name for name in tuned if name.startswith("model.visual.merger.")]
    assert merger and all(torch.equal(tuned[name], base[name]) for name in merger)
    assert not torch.equal(tuned["lm_head.weight"], base["lm_head.weight"])


def _check_each_item_once(run_dir: Path) -> None:
    from core.rundir import RunDir
    from eval.benchmarks import BENCHMARKS, resolve_settings

    cfg = resolve_settings(RunDir(run_dir).read_config().eval)
    for bench in cfg.benchmarks:
        expected = sorted(sample.id for sample in BENCHMARKS[bench].load(cfg.settings[bench])[:EVAL_LIMIT])
        for model in ("baseline", "checkpoint-2"):
            lines = (run_dir / "eval" / model / f"{bench}.jsonl").read_text().splitlines()
            assert sorted(json.loads(line)["id"] for line in lines) == expected, (model, bench)


@pytest.mark.slow
def test_zero2_lora_on_two_processes(output_root):
    run_dir = _check_run(output_root, "zero2", stage=2)
    losses = logged(run_dir / "checkpoints" / "checkpoint-2")
    assert losses and all(math.isfinite(loss) for loss in losses)


@pytest.mark.slow
def test_zero3_lora_on_two_processes(output_root):
    # The held-out preference pairs too (a log-likelihood benchmark), sharded over both ranks like
    # generation: _check_run checks every benchmark's items were each scored once per model.
    run_dir = _check_run(output_root, "zero3", 3, "eval.benchmarks=[v2p,ovi,ovi_pairs]")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["benchmarks"]["ovi_pairs"]["metrics"]["accuracy"]["n"] == EVAL_LIMIT
    # Saved with the partitioned weights gathered: an ordinary adapter that loads without DeepSpeed.
    assert (run_dir / "checkpoints" / "checkpoint-2" / "adapter_model.safetensors").stat().st_size > 100_000


@pytest.mark.slow
def test_zero3_offload_steps_with_cpu_adam_and_tower_learning_rates(output_root):
    # The Trainer builds DeepSpeed's CPU Adam over the tower groups (DeepSpeed refuses any other optimizer
    # under offload); no evaluation here, the ZeRO-3 run above covers it.
    overrides = ("trainer=zero3_offload", "trainer.lr_projector=0.0", "eval.benchmarks=[]")
    result = _torchrun(output_root, "zero3_offload", *overrides)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    run_dir = output_root / "zero3_offload"
    assert "offload_optimizer" in json.loads((run_dir / "deepspeed.json").read_text())["zero_optimization"]
    assert json.loads((run_dir / "parameters.json").read_text())["partitioned_at_load"]
    _check_tower_learning_rates(output_root, run_dir / "checkpoints" / "checkpoint-2")


@pytest.mark.slow
def test_zero3_full_fine_tuning_saves_the_checkpoints_own_names(output_root):
    """A model loaded under ZeRO-3 and fully trained is saved under its checkpoint's own key names (as
    transformers 5.24 did not: ``model.model.layers.*``, which loads as random weights), whole."""
    from safetensors.torch import load_file

    result = _torchrun(output_root, "zero3_full", "trainer=zero3", "peft=full", "eval.benchmarks=[]")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    saved = load_file(output_root / "zero3_full" / "checkpoints" / "checkpoint-2" / "model.safetensors")
    base = load_file(output_root / "models" / "tiny-qwen2.5-vl" / "model.safetensors")
    assert sorted(saved) == sorted(base)
    assert all(saved[key].shape == base[key].shape for key in base)
    assert not saved["lm_head.weight"].equal(base["lm_head.weight"]), "trained"
