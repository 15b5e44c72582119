"""The repository's configs composed as the command line composes them, for tests that need one outside a
fixture (the ``compose`` fixture of conftest.py is this function)."""

from __future__ import annotations

from paths import CONF


def _register() -> None:
    """Register the schemas that conf/*.yaml extend (training, evaluation, the data builders), each time:
    a test of ``python -m launch`` registers them as launch does, without the benchmarks' settings."""
    from core.config import register_configs
    from data_builders.cli_config import register_configs as register_builder_configs
    from eval.benchmarks import settings_schemas
    from train.stage_settings import STAGE_SETTINGS

    register_configs(settings_schemas(), STAGE_SETTINGS)  # as python -m train registers them
    register_builder_configs()


def compose(name: str, *overrides: str, typed: bool = True, return_hydra_config: bool = False):
    """``conf/<name>.yaml`` composed with ``overrides``, typed (``TrainConfig``, ``EvalRunConfig`` …);
    ``typed=False`` gives the DictConfig, ``return_hydra_config=True`` keeps its ``hydra`` node."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    _register()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = hydra_compose(name, overrides=list(overrides), return_hydra_config=return_hydra_config)
    return OmegaConf.to_object(cfg) if typed else cfg
