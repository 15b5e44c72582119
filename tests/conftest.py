"""Shared fixtures: a tiny checkpoint and a small synthetic build, made once per test session."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    from models.tiny import build_tiny_checkpoint

    return build_tiny_checkpoint(tmp_path_factory.mktemp("models") / "tiny-qwen2.5-vl")


@pytest.fixture(scope="session")
def synthetic_build(tmp_path_factory):
    """A small synthetic build: worlds, V2P SFT, OVI-Train and both benchmark twins."""
    from data_builders.build import SyntheticDataConfig, build_synthetic

    cfg = SyntheticDataConfig(
        root=str(tmp_path_factory.mktemp("data") / "synthetic"),
        train_videos=6,
        eval_videos=4,
        vp_questions_per_video=2,
    )
    return build_synthetic(cfg)
