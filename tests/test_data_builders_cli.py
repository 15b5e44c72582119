"""``python -m data_builders``: each builder from the command line, and how bad input is reported.

The end-to-end tests run the command as a subprocess (about 2 s each, mostly imports); the config
checks compose ``conf/build.yaml`` in process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from data_builders.build import SyntheticDataConfig
from data_builders.cli_config import BUILDER_SCHEMAS, OviTrainBuild, VpSftBuild, register_configs
from data_builders.video_io import write_mp4

CONF = Path(__file__).resolve().parents[1] / "conf"
CAPTIONS = {
    "v_one": {
        "duration": 4.0,
        "timestamps": [[0.0, 2.0], [1.0, 3.5], [2.0, 4.0]],
        "sentences": ["A red circle moves to the left.", "The blue square enters.", "a red circle stops"],
    },
    "v_two": {
        "duration": 4.0,
        "timestamps": [[0.0, 3.0], [2.5, 4.0]],
        "sentences": ["A green triangle moves up.", "The yellow square moves down."],
    },
}


def _run(cwd: Path, *overrides: str) -> subprocess.CompletedProcess:
    """``python -m data_builders OVERRIDES`` in ``cwd``."""
    command = [sys.executable, "-m", "data_builders", *overrides]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=120)


def _write_activitynet(root: Path, captions: dict) -> tuple[Path, Path]:
    """An annotation file and a 4 s, 32x32 mp4 per annotated video."""
    videos = root / "videos"
    frames = np.random.default_rng(0).integers(0, 255, size=(16, 32, 32, 3), dtype=np.uint8)
    for key in captions:
        write_mp4(videos / f"{key}.mp4", frames, fps=4.0)
    path = root / "train.json"
    path.write_text(json.dumps(captions))
    return path, videos


def _ovi_overrides(captions: Path, videos: Path, out: str) -> list[str]:
    paths = {"captions": captions, "videos": videos, "out": out}
    return ["builder=ovi_train", *(f"builder.{key}={value}" for key, value in paths.items())]


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_ovi_train_builds(tmp_path: Path):
    import datasets

    captions, videos = _write_activitynet(tmp_path, CAPTIONS)
    out = tmp_path / "ovi_train"
    done = _run(tmp_path, *_ovi_overrides(captions, videos, "ovi_train"))
    assert done.returncode == 0, done.stderr
    rows = _jsonl(out / "ovibench.jsonl")
    info = json.loads((out / "build_info.json").read_text())
    assert rows and len(rows) == info["rows"] == len(datasets.load_from_disk(str(out / "hf")))
    assert info["videos"] == 2
    assert sorted(p.name for p in (out / "videos").iterdir()) == ["v_one.mp4", "v_two.mp4"]
    assert {r["format"] for r in rows} == {"open", "mcq"} and {r["source"] for r in rows} == {"activitynet"}
    assert "| total |" in (out / "stats.md").read_text()
    # Hydra's record of the run sits in a fixed directory, not a timestamped one.
    assert (tmp_path / "outputs" / "build" / "ovi_train" / ".hydra" / "config.yaml").is_file()


def test_malformed_annotation_exits_2_naming_file_and_video(tmp_path: Path):
    bad = {**CAPTIONS, "v_bad": {"duration": 4.0, "timestamps": [[0, 1], [1, 2]], "sentences": ["one"]}}
    captions, videos = _write_activitynet(tmp_path, bad)
    done = _run(tmp_path, *_ovi_overrides(captions, videos, "out"))
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: {captions}") and "v_bad" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


def test_misspelt_key_fails_at_compose(tmp_path: Path):
    done = _run(tmp_path, "builder=ovi_train", "builder.captons=x.json")
    assert done.returncode != 0
    assert "Key 'captons' not in 'OviTrainBuild'" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "outputs").exists()  # nothing ran


def test_missing_required_paths_are_named(tmp_path: Path):
    done = _run(tmp_path, "builder=ovi_train", "builder.out=x")
    assert done.returncode == 2
    assert "builder.captions" in done.stderr and "builder.videos" in done.stderr
    assert "builder.out" not in done.stderr and "Traceback" not in done.stderr


def test_synthetic_builds(tmp_path: Path):
    done = _run(
        tmp_path, "builder=synthetic", "builder.root=synth", "builder.train_videos=2", "builder.eval_videos=2"
    )
    assert done.returncode == 0, done.stderr
    root = tmp_path / "synth"
    assert json.loads((root / "build.json").read_text())["config"]["train_videos"] == 2
    for name in ("v2p_sft/hf", "ovi_train/hf", "v2p_bench/v2p/dataset_info.jsonl", "ovibench/ovibench.jsonl"):
        assert (root / name).exists(), name
    # The synthetic world's captions are in ActivityNet's format, but the rows say where they come from.
    assert {r["source"] for r in _jsonl(root / "ovibench" / "ovibench.jsonl")} == {"synthetic"}


@pytest.fixture(scope="module")
def composer():
    register_configs()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        yield lambda *overrides: compose("build", overrides=list(overrides))


@pytest.mark.parametrize("name", sorted(BUILDER_SCHEMAS))
def test_each_builder_yaml_composes_to_its_schema(composer, name: str):
    cfg = composer(f"builder={name}")
    assert OmegaConf.get_type(cfg.builder) is BUILDER_SCHEMAS[name]
    # The yaml restates every default of its schema (the file is the documentation), and agrees with it.
    defaults = OmegaConf.structured(BUILDER_SCHEMAS[name])
    for key in defaults:
        if key != "root" and not OmegaConf.is_missing(defaults, key):
            assert cfg.builder[key] == defaults[key], key


def test_wrong_type_fails_at_compose(composer):
    with pytest.raises(Exception, match="words_per_second"):
        composer("builder=ovi_train", "builder.words_per_second=fast")


def test_defaults_agree_with_the_builders():
    from data_builders.ovi_train import DEFAULT_MIX, mix_shares
    from data_builders.vp_sft import DEFAULT_SHAPES

    assert VpSftBuild().shapes == list(DEFAULT_SHAPES) == SyntheticDataConfig().shapes
    assert mix_shares(OviTrainBuild().mix) == mix_shares(DEFAULT_MIX)
