"""Build a dataset from the command line; ``builder=NAME`` picks the builder (``conf/builder/NAME.yaml``).

python -m data_builders builder=synthetic builder.root=data/synthetic
python -m data_builders builder=ovi_train builder.captions=/data/activitynet/train.json \\
    builder.videos=/data/activitynet/videos builder.out=data/ovi_train
python -m data_builders builder=vp_sft builder.world=data/tracks_world builder.out=data/v2p_sft
python -m data_builders builder=ovi_train --cfg job     # print the composed config and exit

Relative paths are relative to the current directory. Hydra's record of each run (the composed
config, the overrides) goes to ``outputs/build/<builder>/.hydra``. A misspelt key or a wrong type
fails when the config is composed; a missing required path, or bad input data, prints one line
``error: ...`` and exits 2.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from data_builders.build import SyntheticDataConfig
from data_builders.cli import fail, run_cli
from data_builders.cli_config import OviTrainBuild, VpSftBuild, register_configs

register_configs()


def _synthetic(cfg: SyntheticDataConfig) -> None:
    from data_builders.build import build_synthetic

    paths = build_synthetic(cfg)
    for name, path in vars(paths).items():
        print(f"{name}: {path}")


def _ovi_train(cfg: OviTrainBuild) -> None:
    from data_builders.ovi_train import build_ovi_train

    out = build_ovi_train(
        cfg.captions,
        cfg.videos,
        cfg.out,
        seed=cfg.seed,
        mix=cfg.mix,
        forms=cfg.forms,
        words_per_second=cfg.words_per_second,
        source=cfg.source,
        source_format=cfg.format,
        source_options=dict(cfg.source_options),
    )
    print(f"ovi_train: {out}")


def _vp_sft(cfg: VpSftBuild) -> None:
    from data_builders.vp_sft import build_vp_sft

    out = build_vp_sft(
        cfg.world, cfg.out, seed=cfg.seed, questions_per_video=cfg.questions_per_video, shapes=cfg.shapes
    )
    print(f"vp_sft: {out}")


# Dispatch on the schema's type, so `builder=ovi_train` and `builder=ovi_train_schema` both work.
_BUILDERS: dict[type, Callable[[Any], None]] = {
    SyntheticDataConfig: _synthetic,
    OviTrainBuild: _ovi_train,
    VpSftBuild: _vp_sft,
}


@hydra.main(version_base="1.3", config_path="../conf", config_name="build")
def main(cfg: DictConfig) -> None:
    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        fail(f"missing required setting(s): {', '.join(missing)} (set them as KEY=VALUE)")
    builder = OmegaConf.to_object(cfg.builder)
    run_cli(lambda: _BUILDERS[type(builder)](builder))


if __name__ == "__main__":
    main()
