"""The stand-in base model: its pretraining data shares nothing with the benchmark twins, one command
pretrains it, and its published weights are the ones its build record describes."""

from __future__ import annotations

import json
import re
from dataclasses import replace
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
        "finish",
        "word_class",
    }
    for sample in skills:
        assert [t.role for t in sample.turns] == ["user", "assistant"]
        assert [p.type for p in sample.turns[0].parts] == ["video", "text"]


def test_a_sentence_to_finish_has_one_right_ending_among_its_options(skills):
    """The given words and the right option make the clip's own account; no other option does (one is
    the same ending with a value the clip contradicts, one the whole sentence again, one an ending cut at
    another place)."""
    accounts = {
        s.source_id: "I see a " + ", then a ".join(s.meta["expected"]) + "."
        for s in skills
        if s.meta["kind"] == "describe"
    }
    finishing = [s for s in skills if s.meta["kind"] == "finish" and s.meta["format"] == "mcq"]
    assert finishing
    for sample in finishing:
        given = re.search(r'"(.*) \.\.\."', sample.turns[0].text).group(1)
        making = [o for o in sample.meta["options"] if f"{given} {o}" == accounts[sample.source_id]]
        letter = "ABCD"[sample.meta["options"].index(making[0])]
        assert len(making) == 1 and letter == sample.meta["answer_letter"], sample.turns[0].text


def test_a_word_class_question_has_the_one_word_of_its_class_for_answer(skills):
    classes = {"colour": COLOURS, "shape": SHAPES, "direction": DIRECTIONS, "number": ("1", "2", "3", "4")}
    asked = [s for s in skills if s.meta["kind"] == "word_class"]
    assert len(asked) == 4 * len({s.source_id for s in skills})  # four for every clip, lettered
    assert {s.meta["format"] for s in asked} == {"mcq"}
    assert len({s.id for s in skills}) == len(skills)
    for sample in asked:
        named = re.search(r"names a (\w+):", sample.turns[0].text).group(1)
        assert [w for w in [*sample.meta["expected"], *sample.meta["rivals"]] if w in classes[named]] == [
            *sample.meta["expected"]
        ]


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


def test_the_stand_in_reads_the_generic_skills_words_whole(skills, compose, tmp_path):
    """Its tokenizer knows every word the pretraining set writes as one token, as a real base model's
    knows plain English; split into bytes, the words cost the stand-in thousands of steps."""
    from models.tiny import train_tokenizer

    model = compose("train", "+exp=standin", f"output_root={tmp_path}").model
    tokenizer = train_tokenizer(str(model.family), model.tiny_words)
    split = set()
    for text in {t.text for s in skills for t in s.turns}:
        spans = tokenizer(text, return_offsets_mapping=True)["offset_mapping"]
        for word in re.finditer(r"[A-Za-z0-9]+", text):
            if sum(a < word.end() and b > word.start() for a, b in spans) > 1:
                split.add((word.group(), text))
    assert not split, sorted({w for w, _ in split})


def test_the_stand_in_starts_with_a_visual_output_that_tells_clips_apart(skills, compose, tmp_path):
    """A random tower gives every visual token nearly one vector, which the language model cannot read;
    the stand-in's random start is built with its output centred and scaled on training clips."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from core.media import FrameCache
    from models.centring import centring, visual_output
    from models.chat import make_adapter
    from models.loading import build_if_tiny

    cfg = compose("train", "+exp=standin", f"output_root={tmp_path}", "model.tiny_layers=1")
    cache = FrameCache(tmp_path / "frames")
    build_if_tiny(cfg.model, centring(cfg, skills, cache))
    raw = cfg.model.name_or_path + "-raw"
    build_if_tiny(replace(cfg.model, name_or_path=raw))  # the same random start, not centred

    def spread(path) -> tuple[float, float]:
        """How far the clips' visual tokens are from their common vector, relative to it; and the
        output's mean over the clips."""
        processor = AutoProcessor.from_pretrained(path)
        adapter = make_adapter(cfg.model.family, processor, cfg.media, cache)
        clips = [adapter.render(s, for_generation=False) for s in skills[:: len(skills) // 8]]
        out = visual_output(AutoModelForImageTextToText.from_pretrained(path), adapter.training_batch(clips))
        common = out.mean(0)
        return ((out - common).norm(dim=-1).mean() / common.norm()).item(), common.abs().max().item()

    raw_spread, _ = spread(raw)
    centred_spread, centred_mean = spread(cfg.model.name_or_path)
    assert raw_spread < 0.5 < centred_spread, (raw_spread, centred_spread)
    assert centred_mean < 0.5


def test_a_tiny_head_size_that_cannot_split_the_width_is_refused(tmp_path):
    from core.errors import ConfigError
    from models.tiny import build_tiny_checkpoint

    with pytest.raises(ConfigError, match="tiny_head_dim=48 must divide model.tiny_hidden=64"):
        build_tiny_checkpoint(tmp_path / "init", hidden=64, head_dim=48)


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
        "model.tiny_hidden=48",
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
