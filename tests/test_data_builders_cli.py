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
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf
from paths import CONF

from core.choice import Choice
from core.video_io import write_mp4
from core.vocab import ITEM_FORMS, PROMPT_NOUNS
from data_builders.cli_config import (
    BUILDER_SCHEMAS,
    ItemForm,
    OviTrainBuild,
    SourceFormat,
    SyntheticDataConfig,
    TrackFormat,
    VpSftBuild,
)
from data_builders.ovi_train import mix_shares
from data_builders.sources import SOURCES
from data_builders.sources.tracks import TRACK_FORMATS
from data_builders.visual_prompts import PromptShape

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
    benchmark = _jsonl(root / "ovibench" / "ovibench.jsonl")
    assert {r["source"] for r in benchmark} == {"synthetic"}
    # OVI-Train and the OVIBench twin are phrased from disjoint banks.
    assert {r["phrasing"] for r in _jsonl(root / "ovi_train" / "ovibench.jsonl")} == {"train"}
    assert {r["phrasing"] for r in benchmark} <= {"eval", "paraphrased"}


@pytest.fixture(scope="module")
def composer(compose):
    """``composer(*overrides)``: ``conf/build.yaml`` composed with them (the DictConfig)."""
    return lambda *overrides: compose("build", *overrides, typed=False)


@pytest.mark.parametrize("name", sorted(BUILDER_SCHEMAS))
def test_each_builder_yaml_composes_to_its_schema_setting_only_what_differs(composer, name: str):
    cfg = composer(f"builder={name}")
    assert OmegaConf.get_type(cfg.builder) is BUILDER_SCHEMAS[name]
    # The dataclass holds every default and its documentation; the yaml never restates one.
    yaml = OmegaConf.load(CONF / "builder" / f"{name}.yaml")
    assert list(yaml.defaults) == [f"{name}_schema", "_self_"]
    defaults = OmegaConf.structured(BUILDER_SCHEMAS[name])
    for key in set(yaml) - {"defaults"}:
        assert yaml[key] != defaults[key], f"{name}.yaml restates the default of {key}"


def test_wrong_type_fails_at_compose(composer):
    with pytest.raises(Exception, match="words_per_second"):
        composer("builder=ovi_train", "builder.words_per_second=fast")


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (["builder=ovi_train", "builder.format=activitynett"], "builder.format"),
        (["builder=ovi_train", "builder.forms=[open,essay]"], "builder.forms[1]"),
        (["builder=ovi_train", "builder.questions.backend=template"], "builder.questions.backend"),
        (["builder=vp_sft", "builder.format=got10"], "builder.format"),
        (["builder=vp_sft", "builder.shapes=[rectangle,star]"], "builder.shapes[1]"),
        (["builder=vp_sft", "builder.kinds=[colour,clas]"], "builder.kinds[1]"),
        (["builder=vp_sft", "builder.qc.blind.first.backend=gpt"], "builder.qc.blind.first.backend"),
        (["builder=vp_sft", "builder.qc.blind.second.backend=gpt"], "builder.qc.blind.second.backend"),
        (["builder=ovi_train", "builder.phrase_bank=paraphrased"], "builder.phrase_bank"),
        (["builder=export", "builder.format=axolotl"], "builder.format"),
        (["builder=synthetic", "builder.shapes=[star]"], "builder.shapes[0]"),
    ],
)
def test_a_value_outside_a_closed_choice_fails_at_compose(composer, overrides: list[str], key: str):
    with pytest.raises(ConfigCompositionException) as err:
        composer(*overrides)
    typo = overrides[1].split("=")[1].strip("[]").split(",")[-1]
    cause = str(err.value.__cause__)  # Hydra names the override; OmegaConf the value, the choices and the key
    assert cause.startswith(f"Invalid value '{typo}', expected one of [") and f"full_key: {key}" in cause


@pytest.mark.parametrize(
    ("choice", "names"),
    [
        (SourceFormat, SOURCES),  # the readers OVI-Train looks up by builder.format
        (TrackFormat, TRACK_FORMATS),  # the readers VP SFT looks up by builder.format
        (ItemForm, ITEM_FORMS),  # the forms OVIBench rows may take
        (PromptShape, PROMPT_NOUNS),  # the shapes visual_prompts draws and names
    ],
)
def test_each_closed_choice_is_what_the_code_reads(choice: type[Choice], names):
    assert sorted(member.value for member in choice) == sorted(names)


def test_the_synthetic_defaults_are_the_builders_defaults():
    assert SyntheticDataConfig().shapes == VpSftBuild().shapes
    assert mix_shares(SyntheticDataConfig().ovi_mix) == mix_shares(OviTrainBuild().mix)


def test_help_without_a_builder_lists_the_builders(tmp_path: Path):
    done = _run(tmp_path, "--help")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "python -m data_builders builder=ovi_train" in done.stdout  # the examples
    assert f"Builders (builder=NAME): {', '.join(BUILDER_SCHEMAS)}" in done.stdout
    assert not (tmp_path / "outputs").exists()


def test_help_with_a_builder_prints_its_settings(tmp_path: Path):
    done = _run(tmp_path, "builder=ovi_train", "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("python -m data_builders builder=ovi_train builder.KEY=VALUE")
    assert "captions: ???" in done.stdout and "source_options: {}" in done.stdout


@pytest.mark.parametrize(
    "override",
    [
        "builder.source_options={subset: validation}",  # as the config's comment shows
        "builder.source_options.subset=validation",
        "+builder.source_options.subset=validation",
    ],
)
def test_source_options_are_set_whole_or_by_key(composer, override: str):
    cfg = composer("builder=ovi_train", "builder.format=youcook2", override)
    assert OmegaConf.to_container(cfg.builder.source_options) == {"subset": "validation"}
    stride = override.replace("subset=validation", "stride=2").replace("subset: validation", "stride: 2")
    assert OmegaConf.to_container(composer("builder=vp_sft", stride).builder.source_options) == {"stride": 2}
    # Only the free-form dict is open: a misspelt key of the builder still fails.
    with pytest.raises(ConfigCompositionException, match="captons"):
        composer("builder=ovi_train", override, "builder.captons=x")
