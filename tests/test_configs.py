"""Every shipped experiment composes against the typed schema; typos fail at compose time."""

from __future__ import annotations

import pytest
from hydra.errors import ConfigCompositionException
from paths import CONF

from core.config import EvalRunConfig, Family, PeftMethod, Tower, TrainConfig

EXPERIMENTS = sorted(p.stem for p in (CONF / "exp").glob("*.yaml"))
GROUP_OPTIONS = [
    (group.name, option.stem)
    for group in sorted(CONF.iterdir())
    if group.is_dir() and group.name not in ("exp", "builder", "launcher")
    for option in sorted(group.glob("*.yaml"))
]


@pytest.mark.parametrize("exp", EXPERIMENTS)
def test_every_experiment_composes_to_the_schema(compose, exp):
    config = compose("train", f"+exp={exp}")
    assert isinstance(config, TrainConfig)
    assert config.run_name == exp


@pytest.mark.parametrize(("group", "option"), GROUP_OPTIONS)
def test_every_shipped_group_option_composes(compose, group, option):
    overrides = [f"{group}={option}"]
    if group == "judge" and option != "none":
        overrides += ["judge.model=m", "judge.endpoint.base_url=http://127.0.0.1:1/v1"]
    assert isinstance(compose("train", *overrides), TrainConfig)


def test_real_model_experiments_point_at_the_7b_checkpoint(compose):
    for exp in ("ovi_lora", "v2p_lora"):
        config = compose("train", f"+exp={exp}")
        assert config.model.name_or_path == "Qwen/Qwen2.5-VL-7B-Instruct"
        assert config.model.family is Family.qwen2_5_vl
        assert not config.model.tiny and not config.model.trust_remote_code
        assert config.media.num_frames == 64 and config.media.max_pixels == 336 * 336


def test_misspelt_key_fails_at_compose_time(compose):
    with pytest.raises(ConfigCompositionException, match="max_step"):
        compose("train", "+exp=quickstart", "trainer.max_step=3")


def test_wrong_type_fails_at_compose_time(compose):
    with pytest.raises(ConfigCompositionException, match="max_steps"):
        compose("train", "+exp=quickstart", "trainer.max_steps=abc")


@pytest.mark.parametrize("name", ["train", "eval"])
def test_a_benchmarks_own_settings_are_typed_at_compose_time(compose, name):
    """eval.settings.<benchmark> is the benchmark's own settings dataclass: a misspelt key or a wrong type
    fails when the config is composed, naming it; a right one arrives typed."""
    from eval.benchmarks.ovi import OviSettings

    with pytest.raises(ConfigCompositionException, match="protocl"):
        compose(name, "eval.settings.ovi.protocl=simulated")
    with pytest.raises(ConfigCompositionException, match="max_new_tokens"):
        compose(name, "eval.settings.v2p.max_new_tokens=many")
    config = compose(name, "eval.settings.ovi.max_new_tokens_open=7")
    assert isinstance(config.eval.settings["ovi"], OviSettings)
    assert config.eval.settings["ovi"].max_new_tokens_open == 7


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("model.family=qwen25_vl", "family"),
        ("model.dtype=bf16", "dtype"),
        ("media.decoder=opencv", "decoder"),
        ("eval.settings.v2p.input_order=vp_last", "input_order"),
        ("eval.settings.ovi.protocol=simulate", "protocol"),
        ("stage.preference.loss_type=[sigmoid,simpo]", "loss_type"),
        ("stage.preference.pair_forms=[open,essay]", "pair_forms"),
        ("judge.backend=openai", "backend"),
        ("logger.mode=online_maybe", "mode"),
    ],
)
def test_an_unknown_choice_fails_at_compose_time(compose, override, key):
    with pytest.raises(ConfigCompositionException, match=key):
        compose("train", "+exp=quickstart", override)


@pytest.mark.parametrize("method", list(PeftMethod))
def test_every_training_mode_composes(compose, method):
    config = compose("train", "+exp=quickstart", f"peft={method.value}")
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
def test_training_mode_typos_fail_at_compose_time(compose, override, key):
    with pytest.raises(ConfigCompositionException, match=key):
        compose("train", "peft=full", override)


def test_eval_config_composes_with_the_defaults_of_its_schema(compose):
    config = compose("eval", "eval.benchmarks=[v2p]", "checkpoint=some/run/checkpoints/checkpoint-4")
    assert isinstance(config, EvalRunConfig) and config.eval.benchmarks == ["v2p"]
    assert config.checkpoint == "some/run/checkpoints/checkpoint-4" and config.logger.wandb is False
    assert config.eval.results_cache.endswith("eval_cache")  # conf/eval/both.yaml's one setting


PACKAGES = {"server": "eval.server"}  # groups whose yaml files say `# @package` other than the group


def _node(config, path: list[str]):
    for name in path:
        config = getattr(config, name, None)
    return config


def test_yaml_sets_only_what_differs_from_the_schema():
    """A group option that repeats its dataclass's default is a second home for it, which drifts. A value
    counts as different when it differs from the default of either primary config (train, eval)."""
    from dataclasses import fields

    from omegaconf import OmegaConf

    primaries = (TrainConfig(), EvalRunConfig())
    for group, option in GROUP_OPTIONS:
        text = OmegaConf.to_container(OmegaConf.load(CONF / group / f"{option}.yaml"))
        path = PACKAGES.get(group, group).split(".")  # a group's node is its package
        schemas = [_node(primary, path) for primary in primaries if _node(primary, path) is not None]
        for item in fields(schemas[0]):
            if item.name in text and text[item.name] != "???":
                defaults = [getattr(schema, item.name) for schema in schemas]
                assert any(text[item.name] != d for d in defaults), (
                    f"conf/{group}/{option}.yaml repeats {item.name}"
                )
