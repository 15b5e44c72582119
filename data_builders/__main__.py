"""Build a dataset from the command line; ``builder=NAME`` picks the builder (``conf/builder/NAME.yaml``).

python -m data_builders builder=synthetic builder.root=data/synthetic
python -m data_builders builder=ovi_train builder.captions=/data/activitynet/train.json \\
    builder.videos=/data/activitynet/videos builder.out=data/ovi_train
python -m data_builders builder=ovi_train ... builder.questions.backend=endpoint \\
    builder.questions.base_url=http://localhost:8000/v1 builder.questions.model=NAME
python -m data_builders builder=vp_sft builder.world=data/tracks_world builder.out=data/v2p_sft \\
    builder.qc.blind=endpoint builder.qc.base_url=http://localhost:8000/v1 builder.qc.model=NAME
python -m data_builders builder=export builder.dataset=data/v2p_sft/hf builder.format=swift \\
    builder.out=data/swift
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
from data_builders.cli_config import ExportBuild, OviTrainBuild, VpSftBuild, register_configs

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
        questions=cfg.questions,
    )
    print(f"ovi_train: {out}")


def _vp_sft(cfg: VpSftBuild) -> None:
    from data_builders.vp_sft import DrawSettings, build_vp_sft

    draw = DrawSettings(tuple(cfg.colours), tuple(cfg.line_widths), cfg.doodle_share)
    out = build_vp_sft(
        cfg.world,
        cfg.out,
        seed=cfg.seed,
        questions_per_video=cfg.questions_per_video,
        shapes=cfg.shapes,
        kinds=cfg.kinds,
        draw=draw,
        qc=cfg.qc,
        source_format=cfg.format,
        source_options=dict(cfg.source_options),
    )
    print(f"vp_sft: {out}")


def _export(cfg: ExportBuild) -> None:
    from data_builders.export import export_dataset

    result = export_dataset(
        cfg.dataset,
        cfg.out,
        cfg.format,
        name=cfg.name,
        system=cfg.system,
        clip_fps=cfg.clip_fps,
        clip_max_side=cfg.clip_max_side,
    )
    print(f"export: {result.path} ({result.rows} rows, {len(result.skipped)} left out)")


# Dispatch on the schema's type, so `builder=ovi_train` and `builder=ovi_train_schema` both work.
_BUILDERS: dict[type, Callable[[Any], None]] = {
    SyntheticDataConfig: _synthetic,
    OviTrainBuild: _ovi_train,
    VpSftBuild: _vp_sft,
    ExportBuild: _export,
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
