"""Training modes: towers per family, freezing, per-tower learning rates, full fine-tuning, gradient
checkpointing and the QLoRA code path up to where it needs CUDA."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from runs import logged

from core.config import ModelConfig, PeftConfig, PeftMethod, Tower, TrainerConfig
from core.errors import ConfigError
from models.tiny import FAMILIES, build_tiny_checkpoint
from models.towers import parameters_by_tower, tower_of

PROJECTOR_MODULES = ("merger", "multi_modal_projector", "image_newline")  # by name, in every family


@pytest.fixture(scope="module")
def load_tiny(tmp_path_factory):
    """family → a freshly loaded tiny model of that family (checkpoints built once)."""
    from models.loading import load_model

    root = tmp_path_factory.mktemp("tower_models")

    def load(family: str):
        path = build_tiny_checkpoint(root / family, family=family)
        return load_model(ModelConfig(name_or_path=str(path), family=family))[0]

    return load


@pytest.mark.parametrize("family", FAMILIES)
def test_every_parameter_of_every_family_is_in_exactly_one_tower(family, load_tiny):
    named = list(load_tiny(family).named_parameters())
    towers = parameters_by_tower(named, family)
    assert sum(len(params) for params in towers.values()) == len(named), "each parameter once"
    assert all(towers[tower] for tower in Tower), "every tower has parameters"
    for tower, params in towers.items():
        for name, _ in params:
            # Qwen-VL's mergers sit inside the vision module yet are the projector.
            assert (tower is Tower.projector) == any(m in name for m in PROJECTOR_MODULES), name
            if "lm_head" in name or "embed_tokens" in name:
                assert tower is Tower.language_model, name


def test_a_parameter_in_no_tower_is_one_clear_error():
    with pytest.raises(ConfigError, match="model.audio.weight of the qwen2_vl model is in no tower"):
        tower_of("model.audio.weight", "qwen2_vl")
    # peft's wrapper prefix and modules_to_save copies keep their tower.
    assert tower_of(
        "base_model.model.model.visual.merger.modules_to_save.default.mlp.0.weight", "qwen2_vl"
    ) == (Tower.projector)


@pytest.mark.parametrize(
    "freeze", [[Tower.vision], [], [Tower.vision, Tower.language_model]], ids=["default", "none", "projector"]
)
def test_full_fine_tuning_trains_exactly_the_unfrozen_towers(freeze, load_tiny):
    from train.modes import apply_peft

    model = apply_peft(load_tiny("qwen3_vl"), PeftConfig(method=PeftMethod.full, freeze=freeze))
    for name, param in model.named_parameters():
        assert param.requires_grad == (tower_of(name, "qwen3_vl") not in freeze), name


def test_freezing_every_tower_fails(load_tiny):
    from train.modes import apply_peft

    with pytest.raises(ConfigError, match="peft.freeze lists every tower"):
        apply_peft(load_tiny("internvl"), PeftConfig(method=PeftMethod.full, freeze=list(Tower)))


def test_lora_targets_decide_and_a_contradicting_freeze_list_fails(load_tiny):
    from train.modes import apply_peft

    model = apply_peft(load_tiny("qwen2_5_vl"), PeftConfig(modules_to_save=["merger"]))
    trained = {tower_of(n, "qwen2_5_vl") for n, p in model.named_parameters() if p.requires_grad}
    assert trained == {Tower.projector, Tower.language_model}
    with pytest.raises(ConfigError, match="peft.freeze lists projector.*merger"):
        apply_peft(load_tiny("qwen2_5_vl"), PeftConfig(modules_to_save=["merger"], freeze=[Tower.projector]))
    with pytest.raises(ConfigError, match="peft.freeze lists language_model.*lora_A"):
        apply_peft(load_tiny("llava_onevision"), PeftConfig(freeze=[Tower.language_model]))


def _optimizer(model, trainer_cfg: TrainerConfig, tmp_path: Path, stock: bool = False):
    from transformers import Trainer

    from train.recipe import training_arguments
    from train.trainer import RecipeTrainer

    args = training_arguments(trainer_cfg, tmp_path)
    if stock:
        return Trainer(model=model, args=args).create_optimizer()
    return RecipeTrainer(model=model, args=args, trainer_cfg=trainer_cfg).create_optimizer()


@pytest.mark.parametrize(
    ("peft", "trainer"),
    [
        (PeftConfig(modules_to_save=["merger", "lm_head"]), TrainerConfig(lr=1e-3, lr_projector=1e-5)),
        (
            PeftConfig(method=PeftMethod.full, freeze=[]),
            TrainerConfig(lr=1e-3, lr_vision=1e-6, lr_projector=1e-5),
        ),
    ],
    ids=["lora", "full"],
)
def test_optimizer_groups_hold_each_tower_at_its_learning_rate(peft, trainer, load_tiny, tmp_path):
    from train.modes import apply_peft
    from train.optim import tower_learning_rates

    trainer = replace(trainer, weight_decay=0.1)
    model = apply_peft(load_tiny("qwen2_5_vl"), peft)
    tower = {id(p): tower_of(n, "qwen2_5_vl") for n, p in model.named_parameters()}
    groups = _optimizer(model, trainer, tmp_path).param_groups
    lrs = tower_learning_rates(trainer)
    assert groups[0]["lr"] == trainer.lr, "the logged learning rate is the language model's"
    for group in groups:
        assert {lrs[tower[id(p)]] for p in group["params"]} == {group["lr"]}
    grouped = [id(p) for group in groups for p in group["params"]]
    assert sorted(grouped) == sorted(id(p) for p in model.parameters() if p.requires_grad)
    expected = {Tower.language_model, Tower.projector} | (set() if peft.freeze else {Tower.vision})
    assert {tower[i] for i in grouped} == expected
    # Weight decay on exactly the parameters the stock Trainer decays.
    decayed = {id(p) for group in groups if group["weight_decay"] for p in group["params"]}
    stock = _optimizer(model, trainer, tmp_path, stock=True).param_groups
    assert decayed == {id(p) for group in stock if group["weight_decay"] for p in group["params"]}
    assert decayed and decayed != set(grouped)


def test_a_tower_learning_rate_for_a_tower_that_does_not_train_fails(load_tiny):
    from train.modes import apply_peft
    from train.optim import check_learning_rates

    model = apply_peft(load_tiny("qwen2_vl"), PeftConfig())
    with pytest.raises(ConfigError, match="trainer.lr_vision=1e-05 is set but no vision parameter trains"):
        check_learning_rates(TrainerConfig(lr_vision=1e-5), model)
    with pytest.raises(ConfigError, match="trainer.lr_projector"):
        check_learning_rates(TrainerConfig(lr_projector=1e-5), model)


# --- real steps through the recipe: the quickstart's tiny Qwen2.5-VL on a small synthetic build ---------


@pytest.fixture(scope="module")
def runs(compose, tiny_checkpoint, synthetic_build, tmp_path_factory):
    """name → (config, result) of a 2-step run through ``train.recipe.run``, each run once."""
    from train.recipe import train

    root = tmp_path_factory.mktemp("mode_runs")
    done = {}

    def get(name: str, *overrides: str):
        if name not in done:
            cfg = compose(
                "train",
                "+exp=quickstart",
                f"model.name_or_path={tiny_checkpoint}",
                f"output_root={root}",
                f"run_name={name}",
                "data.build_synthetic=false",
                f"data.train=[{synthetic_build.v2p_sft},{synthetic_build.ovi_train}]",
                "eval.benchmarks=[]",
                "logger.wandb=false",
                *("trainer.max_steps=2", "trainer.save_steps=2", "trainer.batch_size=2"),
                "trainer.logging_steps=1",
                *overrides,
            )
            done[name] = cfg, train(cfg)
        return done[name]

    return get


def _base_parameters(cfg) -> dict[str, torch.Tensor]:
    from models.loading import load_model

    return dict(load_model(cfg.model)[0].named_parameters())


def _losses(cfg) -> list[float]:
    """The training losses the run of ``cfg`` logged up to its checkpoint-2."""
    return logged(Path(cfg.run_dir) / "checkpoints" / "checkpoint-2")


@pytest.mark.slow
def test_a_projector_learning_rate_of_zero_leaves_the_projector_as_it_was(runs):
    # The quickstart's LoRA trains lm_head, embed_tokens and the merger fully (modules_to_save).
    cfg, result = runs("lora", "trainer.lr_projector=0.0")
    base = _base_parameters(cfg)
    trained = {n: p for n, p in result.model.named_parameters() if p.requires_grad}
    saved = {
        n.removeprefix("base_model.model.").replace(".modules_to_save.default", ""): p
        for n, p in trained.items()
    }
    merger = [n for n in saved if n.startswith("model.visual.merger.")]
    assert merger and all(torch.equal(saved[n], base[n]) for n in merger)
    assert not torch.equal(saved["lm_head.weight"], base["lm_head.weight"])
    assert any(n.endswith("lora_B.default.weight") and p.abs().sum() > 0 for n, p in trained.items())
    record = json.loads((Path(cfg.run_dir) / "parameters.json").read_text())
    assert record["towers"]["projector"]["lr"] == 0.0 and record["towers"]["vision"]["trainable"] == 0
    assert record["towers"]["language_model"]["lr"] == cfg.trainer.lr and not record["partitioned_at_load"]


@pytest.mark.slow
def test_gradient_checkpointing_trains_lora_the_same(runs):
    plain_cfg, plain = runs("lora", "trainer.lr_projector=0.0")
    checkpointed_cfg, checkpointed = runs(
        "lora_gc", "trainer.lr_projector=0.0", "trainer.gradient_checkpointing=true"
    )
    assert checkpointed.model.is_activation_checkpointing and not plain.model.is_activation_checkpointing
    plain_losses, checkpointed_losses = _losses(plain_cfg), _losses(checkpointed_cfg)
    assert len(plain_losses) == 2 and checkpointed_losses[0] == pytest.approx(plain_losses[0], rel=1e-6)
    # Step 2 runs on the weights step 1's gradients made: equal only if they flowed through the checkpoints.
    assert checkpointed_losses[1] == pytest.approx(plain_losses[1], rel=1e-4)
    after = dict(checkpointed.model.named_parameters())
    for name, param in plain.model.named_parameters():
        if param.requires_grad:
            torch.testing.assert_close(after[name], param, rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_full_fine_tuning_steps_then_its_checkpoint_loads_and_evaluates(runs, compose, synthetic_build):
    from eval.run import run as run_eval
    from models.loading import load_model

    cfg, result = runs("full", "peft=full")
    base = _base_parameters(cfg)
    for name, param in result.model.named_parameters():
        if tower_of(name, "qwen2_5_vl") is Tower.vision:
            assert not param.requires_grad and torch.equal(param, base[name]), f"frozen {name} changed"
        else:
            assert param.requires_grad and not torch.equal(param, base[name]), f"{name} did not change"

    checkpoint = Path(cfg.run_dir) / "checkpoints" / "checkpoint-2"
    assert (checkpoint / "model.safetensors").exists()
    reloaded, _ = load_model(ModelConfig(name_or_path=str(checkpoint), family="qwen2_5_vl"))
    after = dict(result.model.named_parameters())
    assert all(torch.equal(param, after[name]) for name, param in reloaded.named_parameters())
    eval_cfg = compose(  # the checkpoint alone: it loads whole, on its run's media spec
        "eval",
        f"checkpoint={checkpoint}",
        f"output_root={Path(cfg.run_dir) / 'standalone_eval'}",
        "data.build_synthetic=false",
        f"eval.settings.v2p.root={synthetic_build.v2p_bench}",
        f"eval.settings.ovi.root={synthetic_build.ovibench}",
        *("eval.limit=2", "eval.settings.ovi.max_new_tokens_open=8", "logger.wandb=false"),
        *(f"media.max_pixels={cfg.media.max_pixels}", f"media.image_max_pixels={cfg.media.image_max_pixels}"),
    )
    summary = run_eval(eval_cfg)
    for bench, metric in (("v2p", "accuracy"), ("ovi", "ca")):
        assert 0.0 <= summary["benchmarks"][bench]["metrics"][metric]["baseline"] <= 1.0


# --- QLoRA: GPU only; everything up to the 4-bit load -------------------------------------------------


def test_qlora_is_refused_where_it_cannot_run(monkeypatch):
    from models.qlora import check_qlora

    with pytest.raises(ConfigError, match="trainer.zero=3"):
        check_qlora(TrainerConfig(zero=3))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="needs a CUDA GPU"):
        check_qlora(TrainerConfig())
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    with pytest.raises(ConfigError, match="bf16"):
        check_qlora(TrainerConfig())
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    monkeypatch.setitem(sys.modules, "bitsandbytes", None)  # not importable
    with pytest.raises(ConfigError, match="pip install bitsandbytes"):
        check_qlora(TrainerConfig(zero=2))


def test_a_qlora_run_fails_at_start_on_a_machine_without_cuda(compose, monkeypatch, tmp_path):
    from train.recipe import train

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cfg = compose("train", "peft=qlora", f"output_root={tmp_path}", "logger.wandb=false")
    assert cfg.peft.method is PeftMethod.qlora and cfg.peft.r == PeftConfig().r  # lora.yaml's settings
    with pytest.raises(ConfigError, match="peft.method=qlora needs a CUDA GPU"):
        train(cfg)
    assert not (tmp_path / "data").exists(), "refused before any data or model was built"


@pytest.mark.parametrize("family", FAMILIES)
def test_qlora_quantizes_the_language_model_layers_only(family, load_tiny):
    from transformers.quantizers.quantizers_utils import should_convert_module

    from models.qlora import quantization_config

    config = quantization_config(family)
    assert config.load_in_4bit and config.bnb_4bit_quant_type == "nf4" and config.bnb_4bit_use_double_quant
    assert config.bnb_4bit_compute_dtype == torch.bfloat16
    for name, module in load_tiny(family).named_modules():
        if isinstance(module, torch.nn.Linear):
            # transformers' own matching of llm_int8_skip_modules, as bitsandbytes' loader applies it
            in_decoder = tower_of(f"{name}.weight", family) is Tower.language_model and name != "lm_head"
            assert should_convert_module(name, config.llm_int8_skip_modules) == in_decoder, name


def test_load_model_hands_the_quantization_config_to_from_pretrained(monkeypatch, tiny_checkpoint):
    from transformers import AutoModelForImageTextToText

    from models.loading import load_model
    from models.qlora import quantization_config

    seen, loaded = {}, torch.nn.Linear(1, 1)

    def from_pretrained(path, **kwargs):
        seen.update(kwargs)
        return loaded

    monkeypatch.setattr(AutoModelForImageTextToText, "from_pretrained", from_pretrained)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    config = quantization_config("qwen2_5_vl")
    assert load_model(ModelConfig(name_or_path=str(tiny_checkpoint)), config)[0] is loaded
    assert seen["quantization_config"] is config and seen["device_map"] == {"": 3}
    assert seen["use_safetensors"]


def test_qlora_preparation_and_lora_run_on_a_plain_model(load_tiny):
    from train.modes import apply_peft

    model = apply_peft(
        load_tiny("qwen2_5_vl"), PeftConfig(method=PeftMethod.qlora, modules_to_save=["merger"])
    )
    trained = [n for n, p in model.named_parameters() if p.requires_grad]
    assert any("lora_A" in n for n in trained) and any("merger.modules_to_save" in n for n in trained)
    assert all("lora_" in n or "modules_to_save" in n for n in trained)
    for entry in ("mlp", "q_proj"):
        with pytest.raises(ConfigError, match=f"modules_to_save entry '{entry}'.*language_model.*4 bits"):
            apply_peft(load_tiny("qwen2_5_vl"), PeftConfig(method=PeftMethod.qlora, modules_to_save=[entry]))
