"""The stand-in base model: its pretraining data shares nothing with the benchmark twins, one command
pretrains it, and its published weights are the ones its build record describes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from core.config import DataConfig
from core.sample import Sample
from data_builders.generic_skills import build_generic_skills
from data_builders.synthetic_world import COLOURS, DIRECTIONS, SHAPES
from eval.benchmarks.skills import score
from train.standin import RECORD_FILE, fingerprint

_VALUES = re.compile(r"\b(" + "|".join([*COLOURS, *SHAPES, *DIRECTIONS, r"\d+(\.\d+)?"]) + r")s?\b")
_OPTION_LINE = re.compile(r"^\(?[A-D][:.)]")


def _samples(path) -> list[Sample]:
    import datasets

    return [Sample.from_row(row) for row in datasets.load_from_disk(str(path))]


def _wording(sample: Sample, n: int = 5) -> set[tuple[str, ...]]:
    """Every n words in a row of the sample's text turns, values masked and option lines left out (a
    lettered list is a format every base model knows, not a phrasing)."""
    grams = set()
    for turn in sample.turns:
        for line in turn.text.splitlines():
            if _OPTION_LINE.match(line):
                continue
            words = (
                _VALUES.sub("X", line.lower()).replace(".", " ").replace(",", " ").replace("?", " ").split()
            )
            grams |= {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}
    return grams


@pytest.fixture(scope="module")
def skills(tmp_path_factory) -> list[Sample]:
    out = build_generic_skills(tmp_path_factory.mktemp("skills"), 12, seed=DataConfig().skills.seed)
    return _samples(out / "hf")


def test_the_pretraining_questions_share_no_wording_with_the_twins(skills, synthetic_build):
    twins = [
        *_samples(synthetic_build.v2p_sft),
        *_samples(synthetic_build.ovi_train),
        *_samples(Path(synthetic_build.ovibench) / "hf"),
    ]
    theirs = set().union(*map(_wording, twins))
    shared = {gram for sample in skills for gram in _wording(sample) if gram in theirs}
    assert not shared, sorted(shared)[:5]
    # The check sees wording: the twins' own items share runs of five words among themselves.
    assert len(theirs) > 100


def test_the_pretraining_items_carry_no_drawn_prompt_nor_interruption(skills):
    assert {s.meta["kind"] for s in skills} == {
        "colour",
        "shape",
        "count",
        "motion",
        "order",
        "presence",
        "describe",
    }
    for sample in skills:
        assert [t.role for t in sample.turns] == ["user", "assistant"]
        assert [p.type for p in sample.turns[0].parts] == ["video", "text"]


def test_the_pretraining_worlds_are_apart_from_every_shipped_world(repo):
    """Video ids carry their world's seed (``v_syn<seed><index>``): the skills worlds' seeds are used by
    no other world a shipped config builds."""
    skills = DataConfig().skills
    ours = {skills.seed, skills.seed + 1}
    theirs = {0, 1}  # SyntheticDataConfig's defaults: the quickstart's worlds
    for exp in (repo / "conf" / "exp").glob("*.yaml"):
        for seed in re.findall(r"^\s+seed: (\d+)", exp.read_text(), re.M):
            theirs |= {int(seed), int(seed) + 1}
    assert not ours & theirs


def test_each_item_is_scored_by_its_own_answer(skills):
    for sample in skills:
        answer = sample.turns[-1].text
        assert score(answer, sample.meta) == {"accuracy": 1.0}, (answer, sample.meta)
    wrong = {"format": "open", "expected": ["red"], "rivals": ["blue"]}
    assert score("It is red, or blue.", wrong) == {"accuracy": 0.0}
    assert score("It is reddish.", wrong) == {"accuracy": 0.0}


@pytest.mark.slow
def test_the_one_command_pretrains_the_stand_in_and_publishing_records_it(compose, tmp_path):
    """``+exp=standin`` at test size: the generic-skills sets built, a random Qwen2.5-VL fully trained on
    them, the held-out questions scored before and after; then ``python -m train.standin`` publishes
    ``final/`` with a record whose fingerprint is the weights', and the result loads as any checkpoint."""
    from core.config import ModelConfig
    from models.loading import load_model, load_processor
    from train.recipe import train
    from train.standin import main

    cfg = compose(
        "train",
        "+exp=standin",
        f"output_root={tmp_path}",
        "model.tiny_hidden=32",
        "model.tiny_layers=1",
        "data.skills.train_videos=3",
        "data.skills.heldout_videos=2",
        "trainer.max_steps=4",
        "trainer.save_steps=2",
        "trainer.batch_size=4",
        "trainer.num_workers=0",
    )
    train(cfg)
    dest = tmp_path / "published"
    assert main([str(tmp_path / "standin"), "--dest", str(dest)]) == 0
    record = json.loads((dest / RECORD_FILE).read_text())
    assert record["fingerprint_sha256"] == fingerprint(dest) == fingerprint(tmp_path / "standin" / "final")
    assert record["training"]["steps"] == 4 and record["data"]["heldout"]["videos"] == 2
    skills = record["heldout_skills"]
    assert skills["checkpoint"] == "checkpoint-4" and skills["items"] == record["data"]["heldout"]["items"]
    assert set(skills["accuracy"]) >= {"accuracy", "accuracy/kind/colour", "accuracy/format/mcq"}
    model_cfg = ModelConfig(name_or_path=str(dest))
    (model, _), processor = load_model(model_cfg), load_processor(model_cfg)
    assert type(model).__name__ == "Qwen2_5_VLForConditionalGeneration" and processor.tokenizer.chat_template
    assert sum(p.numel() for p in model.parameters()) == record["parameters"]


def test_the_skills_sets_are_built_once_per_setting(tmp_path):
    from dataclasses import replace

    from core.config import SkillsDataConfig
    from core.errors import ConfigError
    from data_builders.build import build_skills

    cfg = SkillsDataConfig(root=str(tmp_path / "skills"), train_videos=3, heldout_videos=2)
    paths = build_skills(cfg)
    assert set(paths) == {"skills_train", "skills_heldout"}
    train = Path(paths["skills_train"])
    made = (train / "hf").stat().st_mtime_ns
    assert build_skills(cfg) == paths and (train / "hf").stat().st_mtime_ns == made  # reused as it is
    with pytest.raises(ConfigError, match="heldout_videos: 2 there, 3 asked"):
        build_skills(replace(cfg, heldout_videos=3))  # another build's root is never wiped silently
    other = replace(cfg, root=str(tmp_path / "other"), heldout_videos=3)
    heldout = _samples(Path(build_skills(other)["skills_heldout"]) / "hf")
    assert {s.source_id for s in heldout} == {f"v_syn51{i:04d}" for i in range(3)}  # seed + 1


def test_a_set_built_under_a_relative_root_is_read_from_anywhere(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    build_generic_skills("skills", 1, seed=DataConfig().skills.seed)
    monkeypatch.chdir("/")
    for sample in _samples(tmp_path / "skills" / "hf"):
        assert Path(sample.turns[0].parts[0].path).is_file()
