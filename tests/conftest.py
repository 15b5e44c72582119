"""Shared fixtures: the repository's paths, composed configs, small training and evaluation settings, a tiny
checkpoint and a small synthetic build (made once per test session), a scripted local chat server, and real
OpenAI-compatible servers (``transformers serve``) of the tiny checkpoint and of one tuned to reply JSON."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from paths import REPO

# The asserts of the helper modules explain their failures as the tests' own do.
pytest.register_assert_rewrite("runs", "processes")

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def repo() -> Path:
    """The repository's root (commands run there)."""
    return REPO


@pytest.fixture(scope="session")
def compose():
    """``compose(name, *overrides)``: ``conf/<name>.yaml`` composed as the command line would, typed
    (``TrainConfig``, ``EvalRunConfig`` …); ``typed=False`` gives the DictConfig (tests/configs.py)."""
    from configs import compose

    return compose


@pytest.fixture(scope="session")
def small_train_config(compose):
    """``small_train_config(output_root, *overrides)``: the quickstart at test size (6 steps, a save
    every 3, a small synthetic build, 6 items per benchmark)."""

    def config(output_root, *overrides: str):
        return compose(
            "train",
            "+exp=quickstart",
            f"output_root={output_root}",
            "trainer.max_steps=6",
            "trainer.save_steps=3",
            "trainer.batch_size=4",
            "trainer.logging_steps=2",
            "data.synthetic.train_videos=4",
            "data.synthetic.eval_videos=3",
            "data.synthetic.vp_questions_per_video=2",
            "eval.limit=6",
            *overrides,
        )

    return config


@pytest.fixture(scope="session")
def small_eval_config(compose):
    """``small_eval_config(output_root, *overrides)``: ``python -m eval``'s config, without a synthetic
    build of its own (tests point it at the session's)."""

    def config(output_root, *overrides: str):
        return compose("eval", f"output_root={output_root}", "data.build_synthetic=false", *overrides)

    return config


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    from models.tiny import build_tiny_checkpoint

    return build_tiny_checkpoint(tmp_path_factory.mktemp("models") / "tiny-qwen2.5-vl")


@pytest.fixture(scope="session")
def preference_after_sft(small_train_config):
    """``preference_after_sft(root, run_name, *overrides)``: a 2-step SFT under ``root``, then a 4-step run of
    a preference stage (the overrides say which) from its checkpoint, evaluated at baseline and every 2
    steps; returns the stage's config and result."""
    from train.recipe import train

    def after_sft(root, run_name: str, *overrides: str):
        sft = small_train_config(
            root, "run_name=sft", "trainer.max_steps=2", "trainer.save_steps=2", "eval=none"
        )
        train(sft)
        checkpoint = root / "sft" / "checkpoints" / "checkpoint-2"
        cfg = small_train_config(
            root, f"run_name={run_name}", "trainer.max_steps=4", "trainer.save_steps=2",
            "trainer.batch_size=2", "peft.modules_to_save=[]", f"stage.start_from={checkpoint}",
            "eval.benchmarks=[v2p,ovi,ovi_pairs]", *overrides,
        )  # fmt: skip
        result = train(cfg)
        return result.run.cfg, result  # the config as the run resolved it

    return after_sft


@pytest.fixture(scope="session")
def pairs(synthetic_build):
    """The preference pairs of the session's synthetic OVIBench (every type, both forms)."""
    from core.formats.ovi import load_ovibench
    from data_builders.preferences import pairs_from_samples

    return pairs_from_samples(load_ovibench(synthetic_build.ovibench)).pairs


@pytest.fixture(scope="session")
def adapter(tiny_checkpoint, tmp_path_factory):
    """The tiny checkpoint's chat adapter, 4 frames a video."""
    from transformers import AutoProcessor

    from core.decoding import MediaSpec
    from core.media import FrameCache
    from models.chat import make_adapter

    media, cache = MediaSpec(num_frames=4), FrameCache(tmp_path_factory.mktemp("cache"))
    return make_adapter("qwen2_5_vl", AutoProcessor.from_pretrained(tiny_checkpoint), media, cache)


@pytest.fixture(scope="session")
def synthetic_build(tmp_path_factory):
    """A small synthetic build: worlds, V2P SFT, OVI-Train and both benchmark twins."""
    from data_builders.build import build_synthetic
    from data_builders.cli_config import SyntheticDataConfig

    cfg = SyntheticDataConfig(
        root=str(tmp_path_factory.mktemp("data") / "synthetic"),
        train_videos=6,
        eval_videos=4,
        vp_questions_per_video=2,
    )
    return build_synthetic(cfg)


@pytest.fixture
def chat_server(monkeypatch):
    """``chat_server(respond, record=...)``: a local OpenAI-compatible server (``fake_openai.ChatServer``)
    answering with ``respond(handler, body)`` and keeping ``record(handler, body)`` of every request in its
    ``requests``, reachable without a proxy, stopped when the test ends."""
    from fake_openai import ChatServer, request_record

    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.setenv(name, "127.0.0.1,localhost")
    servers = []

    def start(respond, record=request_record):
        servers.append(ChatServer(respond, record))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(scope="session")
def serving():
    """Skips unless ``transformers serve`` can run (the dev extra); 127.0.0.1 bypasses any proxy meanwhile."""
    from real_server import missing_serving_modules

    missing = missing_serving_modules()
    if missing:
        pytest.skip(f"transformers serve needs {', '.join(missing)}: pip install -e '.[dev]'")
    with pytest.MonkeyPatch.context() as patch:
        for name in ("NO_PROXY", "no_proxy"):
            patch.setenv(name, "127.0.0.1,localhost")
        yield


@pytest.fixture(scope="session")
def served_tiny(serving, tiny_checkpoint):
    """``transformers serve`` on the tiny checkpoint as it is (random weights: replies are gibberish)."""
    from real_server import serve

    with serve(tiny_checkpoint, name="tiny-qwen2.5-vl") as server:
        yield server


@pytest.fixture(scope="session")
def json_tuned_checkpoint(tmp_path_factory, tiny_checkpoint):
    """The tiny checkpoint tuned to reply what the judge, the blind filter and question generation accept
    (tests/json_tuning.py), once per session."""
    from json_tuning import tune_json_replies

    return tune_json_replies(tiny_checkpoint, tmp_path_factory.mktemp("models") / "tiny-json")


@pytest.fixture(scope="session")
def served_json_model(serving, json_tuned_checkpoint):
    """``transformers serve`` on the JSON-tuned tiny checkpoint."""
    from real_server import serve

    with serve(json_tuned_checkpoint, name="tiny-json") as server:
        yield server


@pytest.fixture
def v2p_release(tmp_path) -> Path:
    """A V2P-Bench release directory with the files of ``release_rows.v2p_row`` (no rows yet)."""
    from release_rows import touch

    for name in ("videos/NExTVideo/vid1.mp4", "frames/NExTVideo/vid1_0.jpg", "frames/NExTVideo/vid1_1.jpg"):
        touch(tmp_path / name)
    return tmp_path


@pytest.fixture
def ovi_root(tmp_path) -> Path:
    """An OVIBench directory with the video of ``release_rows.ovi_row`` (no rows yet)."""
    from release_rows import touch

    touch(tmp_path / "videos" / "v_a.mp4")
    return tmp_path
