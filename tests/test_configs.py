"""Every shipped experiment composes against the typed schema; typos fail at compose time."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from core.config import EvalRunConfig, PeftMethod, Tower, TrainConfig, register_configs

CONF = Path(__file__).resolve().parents[1] / "conf"
EXPERIMENTS = sorted(p.stem for p in (CONF / "exp").glob("*.yaml"))


def _compose(overrides, name="train"):
    register_configs()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        return compose(name, overrides=overrides)


@pytest.mark.parametrize("exp", EXPERIMENTS)
def test_every_experiment_composes_to_the_schema(exp):
    cfg = _compose([f"+exp={exp}"])
    config = OmegaConf.to_object(cfg)
    assert isinstance(config, TrainConfig)
    assert config.run_name == exp


def test_real_model_experiments_point_at_the_7b_checkpoint():
    for exp in ("ovi_lora", "v2p_lora"):
        config = OmegaConf.to_object(_compose([f"+exp={exp}"]))
        assert config.model.name_or_path == "Qwen/Qwen2.5-VL-7B-Instruct"
        assert not config.model.tiny and not config.model.trust_remote_code
        assert config.media.num_frames == 64 and config.media.max_pixels == 336 * 336


def test_misspelt_key_fails_at_compose_time():
    with pytest.raises(ConfigCompositionException, match="max_step"):
        _compose(["+exp=quickstart", "trainer.max_step=3"])


def test_wrong_type_fails_at_compose_time():
    with pytest.raises(ConfigCompositionException, match="max_steps"):
        _compose(["+exp=quickstart", "trainer.max_steps=abc"])


@pytest.mark.parametrize("method", list(PeftMethod))
def test_every_training_mode_composes(method):
    config = OmegaConf.to_object(_compose(["+exp=quickstart", f"peft={method.value}"]))
    assert config.peft.method is method and config.peft.freeze == [Tower.vision]


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("peft.freeze=[visoin]", "visoin"),
        ("peft.method=qlra", "qlra"),
        ("trainer.lr_vison=1e-5", "lr_vison"),
        ("trainer.lr_projector=fast", "lr_projector"),
        ("peft.train_vision=true", "train_vision"),  # replaced by peft.freeze
    ],
)
def test_training_mode_typos_fail_at_compose_time(override, key):
    with pytest.raises(ConfigCompositionException, match=key):
        _compose(["peft=full", override])


def test_eval_config_composes():
    config = OmegaConf.to_object(_compose(["eval.benchmarks=[v2p]"], name="eval"))
    assert isinstance(config, EvalRunConfig) and config.eval.benchmarks == ["v2p"]


@pytest.mark.parametrize("name", ["Qwen/Qwen2.5-VL-7B-Instruct", "/nonexistent/checkpoint"])
def test_missing_checkpoint_is_one_clear_error(name, monkeypatch):
    from core.config import ModelConfig
    from models.loading import CheckpointNotFound, load_model

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(CheckpointNotFound, match="model.name_or_path=.*Download it first"):
        load_model(ModelConfig(name_or_path=name))
