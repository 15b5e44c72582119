"""Build a dataset from the command line; ``builder=NAME`` picks the builder (``conf/builder/NAME.yaml``).

python -m data_builders builder=synthetic builder.root=data/synthetic
python -m data_builders builder=ovi_train builder.captions=/data/activitynet/train.json \\
    builder.videos=/data/activitynet/videos builder.out=data/ovi_train
python -m data_builders builder=ovi_train_paper builder.data_root=/data/ovi_sources   # all five sources
python -m data_builders builder=ovi_train ... builder.questions.backend=endpoint \\
    builder.questions.endpoint.base_url=http://localhost:8000/v1 builder.questions.model=NAME
python -m data_builders builder=vp_sft builder.world=data/tracks_world builder.out=data/v2p_sft \\
    builder.qc.blind.backend=endpoint builder.qc.blind.endpoint.base_url=http://localhost:8000/v1 \\
    builder.qc.blind.model=NAME
python -m data_builders builder=export builder.dataset=data/v2p_sft/hf builder.format=swift \\
    builder.out=data/swift
python -m data_builders builder=preference builder.dataset=data/ovi_train/hf builder.out=data/ovi_pref
python -m data_builders builder=ovi_train --cfg job     # print the composed config and exit
python -m data_builders builder=ovi_train --help        # the builder's settings, and how to set them

Each builder takes its config object whole: the dataclasses of data_builders/cli_config.py hold every
setting, its default and what it means. Relative paths are relative to the current directory. Hydra's
record of each run (the composed config, the overrides) goes to ``outputs/build/<builder>/.hydra``. A
misspelt key, a wrong type or a value outside a closed choice fails when the config is composed; a
missing required path, or bad input data, prints one line ``error: ...`` and exits 2.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from core.cli import fail, run_cli
from data_builders.cli_config import (
    BUILDER_SCHEMAS,
    ExportBuild,
    OviTrainBuild,
    OviTrainPaperBuild,
    PreferenceBuild,
    SyntheticDataConfig,
    VpSftBuild,
    register_configs,
)

register_configs()


def asks_help_without_builder(argv: list[str]) -> bool:
    """Whether the command line asks for ``--help`` without choosing a builder.

    Hydra composes the config before printing its help, and the builder is required, so it would fail;
    the builders' overview (:func:`builders_help`) answers instead.
    """
    chosen = any(arg.lstrip("+~").split("=", 1)[0] == "builder" for arg in argv)
    return not chosen and any(arg in ("--help", "-h") for arg in argv)


def builders_help(usage: str, builders: Iterable[str]) -> str:
    """The overview ``python -m data_builders --help`` prints: ``usage`` (the command's docstring), the
    builders to choose from, and how to see one builder's settings."""
    return (
        f"{usage.strip()}\n\nBuilders (builder=NAME): {', '.join(builders)}\n"
        "Every setting of one builder, with its current value: python -m data_builders builder=NAME --help\n"
    )


def _synthetic(cfg: SyntheticDataConfig) -> None:
    from data_builders.build import build_synthetic

    paths = build_synthetic(cfg)
    for name, path in vars(paths).items():
        print(f"{name}: {path}")


def _ovi_train(cfg: OviTrainBuild) -> None:
    from data_builders.ovi_train import build_ovi_train

    print(f"ovi_train: {build_ovi_train(cfg)}")


def _ovi_train_paper(cfg: OviTrainPaperBuild) -> None:
    from data_builders.ovi_compose import compose_ovi_train

    print(f"ovi_train_paper: {compose_ovi_train(cfg)}")


def _vp_sft(cfg: VpSftBuild) -> None:
    from data_builders.vp_sft import build_vp_sft

    print(f"vp_sft: {build_vp_sft(cfg)}")


def _export(cfg: ExportBuild) -> None:
    from data_builders.export import export_dataset, is_pairs, read_rows
    from data_builders.preferences import export_pair_dataset

    result = (export_pair_dataset if is_pairs(read_rows(cfg)) else export_dataset)(cfg)
    print(f"export: {result.path} ({result.rows} rows, {len(result.skipped)} left out)")


def _preference(cfg: PreferenceBuild) -> None:
    from data_builders.preferences import build_preferences

    print(f"preference: {build_preferences(cfg)}")


# Dispatch on the schema's type, so `builder=ovi_train` and `builder=ovi_train_schema` both work.
_BUILDERS: dict[type, Callable[[Any], None]] = {
    SyntheticDataConfig: _synthetic,
    OviTrainBuild: _ovi_train,
    OviTrainPaperBuild: _ovi_train_paper,
    VpSftBuild: _vp_sft,
    ExportBuild: _export,
    PreferenceBuild: _preference,
}


@hydra.main(version_base="1.3", config_path="../conf", config_name="build")
def main(cfg: DictConfig) -> None:
    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        fail(f"missing required setting(s): {', '.join(missing)} (set them as KEY=VALUE)")
    builder = OmegaConf.to_object(cfg.builder)
    run_cli(lambda: _BUILDERS[type(builder)](builder))


if __name__ == "__main__":
    if asks_help_without_builder(sys.argv[1:]):
        print(builders_help(__doc__, BUILDER_SCHEMAS))
    else:
        main()
