"""Each stage's own settings, ``stage.<name>``, kept beside its stage: the schemas ``python -m train``
registers (``core.config.register_configs``: a misspelt key fails at compose time, as a benchmark's
``eval.settings.<name>`` does), and their resolution when the run resolves."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from omegaconf import OmegaConf

from core.config import StageConfig
from train.grpo_config import GrpoConfig, resolve_grpo
from train.preference_config import PreferenceConfig

STAGE_SETTINGS: dict[str, type] = {"preference": PreferenceConfig, "grpo": GrpoConfig}


def typed(schema: type, value: Any) -> Any:
    """``value`` as ``schema``: an instance as it is (composed), a plain dict (a config file read back)
    over the defaults, nothing (a config built in Python) as the defaults."""
    if isinstance(value, schema):
        return value
    if value is None:
        return schema()
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), value))


def resolve_stage(stage: StageConfig) -> StageConfig:
    """``stage`` with each stage's settings typed, and GRPO's resolved (``train.grpo_config.resolve_grpo``).

    Raises:
        ConfigError: a GRPO reward weight that names no reward.
    """
    settings = {name: typed(schema, getattr(stage, name)) for name, schema in STAGE_SETTINGS.items()}
    settings["grpo"] = resolve_grpo(settings["grpo"])
    return replace(stage, **settings)
