"""V2P hack diagnostics: the transforms, their scoring, and every diagnostic end to end on the twin."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from wandb_records import history

from core.formats.v2p import INSTRUCTION, load_v2p_release, render_question
from core.sample import Part, Sample, Turn
from data_builders.vp_variants import Target, target_phrase
from eval.benchmarks import BENCHMARKS
from eval.benchmarks.diagnostics import (
    V2P_SHUFFLED,
    V2P_TEXT_PROMPT,
    V2P_Z,
    Z_OPTION,
    blind,
    shuffle_pairs,
    text_prompt,
    with_z_option,
)
from eval.benchmarks.v2p import duration_bucket
from eval.scored import scored_record
from eval.summary import aggregate

STEM = "What colour is the object marked by the box?"
OPTIONS = ["red", "blue", "green", "yellow"]


def _sample(item_id: str, video: str, duration: float = 10.0, stem: str = STEM) -> Sample:
    """A sample shaped like the release loader's (official order: video, question, VP frame)."""
    question = render_question(stem, OPTIONS)
    video_part = Part.video(f"/v/{video}.mp4", 0.0, duration)
    parts = [video_part, Part.txt(question), Part.image(f"/f/{item_id}.jpg")]
    meta = {
        "answer": "B",
        "options": OPTIONS,
        "dimension": 1,
        "category": 1,
        "duration": duration,
        "source": "synthetic",
        "question": question,
        "video_id": video,
    }
    turns = [Turn("user", parts), Turn("assistant", [Part.txt("B")], loss=True)]
    return Sample(item_id, "v2p", turns, "synthetic", video, (0.0, duration), meta)


def _user_parts(sample: Sample) -> list[Part]:
    return sample.turns[0].parts


def _question(sample: Sample) -> str:
    return next(p.text for p in _user_parts(sample) if p.type == "text")


# ---------------------------------------------------------------------------------------------------
# Transforms


def test_z_option_follows_the_last_option_and_precedes_the_instruction():
    original = _sample("q1", "v1")
    z = with_z_option(original)
    lines = _question(z).split("\n")
    assert lines == [STEM, "A: red", "B: blue", "C: green", "D: yellow", Z_OPTION, INSTRUCTION]
    assert z.meta["question"] == _question(z) and z.meta["z_option"] and z.meta["options"] == OPTIONS
    assert [p.type for p in _user_parts(z)] == ["video", "text", "image"]
    assert Z_OPTION not in _question(original)  # the input sample is untouched


def test_blind_removes_the_video_and_the_vp_frame():
    sample = blind(_sample("q1", "v1"))
    assert [p.type for p in _user_parts(sample)] == ["text"]
    assert _question(sample) == _sample("q1", "v1").meta["question"]
    assert sample.turns[1].text == "B" and sample.meta["diagnostic"] == "blind"


def _bucketed_samples() -> list[Sample]:
    short = [_sample(f"s{i}", f"sv{i // 2}", duration=30.0) for i in range(6)]  # 3 videos x 2 questions
    medium = [_sample(f"m{i}", f"mv{i}", duration=600.0) for i in range(3)]  # 3 videos x 1
    lonely = [_sample(f"l{i}", "lv0", duration=3000.0) for i in range(2)]  # one long video: unpairable
    return short + medium + lonely


def test_shuffling_keeps_buckets_moves_every_item_and_is_deterministic():
    samples = _bucketed_samples()
    by_id = {s.id: s for s in samples}
    shuffled, left_out = shuffle_pairs(samples, seed=0)
    assert sorted(left_out) == ["l0", "l1"]  # no other video in its bucket to borrow
    assert [s.id for s in shuffled] == [s.id for s in samples if s.id not in left_out]
    donors = set()
    for item in shuffled:
        donor = by_id[item.meta["visual_input_of"]]
        donors.add(donor.id)
        video = next(p for p in _user_parts(item) if p.type == "video")
        frame = next(p for p in _user_parts(item) if p.type == "image")
        assert video.path == f"/v/{donor.meta['video_id']}.mp4" != f"/v/{item.meta['video_id']}.mp4"
        assert frame.path == f"/f/{donor.id}.jpg"  # the VP frame goes with its video
        assert duration_bucket(donor.meta["duration"]) == duration_bucket(item.meta["duration"])
        assert Z_OPTION in _question(item) and item.meta["question"] == _question(by_id[item.id]).replace(
            INSTRUCTION, f"{Z_OPTION}\n{INSTRUCTION}"
        )
    assert len(donors) == len(shuffled)  # a permutation: every visual input used once
    again, _ = shuffle_pairs(samples, seed=0)
    assert [s.meta["visual_input_of"] for s in again] == [s.meta["visual_input_of"] for s in shuffled]
    pairings = {tuple(s.meta["visual_input_of"] for s in shuffle_pairs(samples, n)[0]) for n in range(5)}
    assert len(pairings) > 1  # the seed matters


def test_text_prompt_names_the_target_in_words_and_drops_the_frame():
    stem = "The object marked by the box moves; did the object marked by the red arrow stop?"
    sample = text_prompt(_sample("q1", "v1", stem=stem), "the red circle")
    question = _question(sample)
    assert question.startswith("The red circle moves; did the red circle stop?\nA: red")
    assert "marked by" not in question.lower()
    assert [p.type for p in _user_parts(sample)] == ["video", "text"]
    assert sample.meta["visual_prompt_question"].startswith("The object marked by the box")
    assert scored_record(V2P_TEXT_PROMPT, _record(sample, "B"), None)["categories"]["shape"] == "rectangle"
    with pytest.raises(ValueError, match="visual-prompt reference"):
        text_prompt(_sample("q2", "v1", stem="What colour is the sky?"), "the red circle")


def test_target_phrase_avoids_the_options_and_ambiguity():
    target = Target({"colour": "red", "shape": "circle"}, ({"colour": "blue", "shape": "square"},))
    assert target_phrase(target, avoid=["left", "right"]) == "the red circle"
    assert target_phrase(target, avoid=OPTIONS) == "the circle"  # a colour question must not say "red"
    assert target_phrase(target, avoid=["circle", "square"]) == "the red object"
    twin = Target({"colour": "red", "shape": "circle"}, ({"colour": "blue", "shape": "circle"},))
    assert target_phrase(twin, avoid=OPTIONS) is None  # "the circle" would fit two objects
    assert target_phrase(Target({"class": "person"}, (), exhaustive=False)) is None


# ---------------------------------------------------------------------------------------------------
# Scoring


def _record(sample: Sample, prediction: str) -> dict:
    return {"id": sample.id, "prediction": prediction, "meta": sample.meta}


def test_z_rate_and_accuracy_by_hand():
    samples = [with_z_option(_sample(f"q{i}", "v1")) for i in range(4)]  # answer B each
    predictions = ["Z", "B", "The answer is Z", "Answer: B"]
    records = [_record(s, p) for s, p in zip(samples, predictions, strict=True)]
    table = aggregate([scored_record(V2P_Z, record, None) for record in records])
    assert table["accuracy"]["value"] == 1 / 4  # official: only "B" starts with the letter
    assert table["accuracy_tolerant"]["value"] == 2 / 4
    assert table["z_rate"]["value"] == 1 / 4  # official: only "Z"
    assert table["z_rate_tolerant"]["value"] == 2 / 4


def test_refusal_rate_and_hack_ratio_by_duration_bucket_by_hand():
    shuffled, _ = shuffle_pairs(_bucketed_samples(), seed=0)  # 6 short, 3 medium items; answer B each
    predictions = dict(s0="Z", s1="B", s2="B", s3="A", s4="Z", s5="C", m0="B", m1="Z", m2="Z")
    records = [scored_record(V2P_SHUFFLED, _record(s, predictions[s.id]), None) for s in shuffled]
    assert all(set(r["categories"]) == {"duration"} for r in records)
    table = aggregate(records)
    assert "accuracy" not in table  # a mismatched input has no right answer
    assert table["refusal_rate"]["value"] == 4 / 9
    assert table["hack_ratio"]["value"] == 3 / 9  # correct non-Z answers over all shuffled items
    assert table["hack_ratio/duration/short"]["value"] == 2 / 6
    assert table["hack_ratio/duration/medium"]["value"] == 1 / 3
    assert table["refusal_rate/duration/medium"]["value"] == 2 / 3


@pytest.mark.parametrize(
    ("benchmarks", "message"),
    [(["v2p", "v2p_shufled"], "unknown"), (["ovi", "v2p_blind"], "add v2p")],
)
def test_bad_diagnostics_settings_fail_before_anything_loads(benchmarks, message, tmp_path):
    from core.config import EvalConfig
    from core.errors import ConfigError
    from eval.benchmarks import resolve_settings

    with pytest.raises(ConfigError, match=message):  # as every entry point resolves its run
        resolve_settings(EvalConfig(benchmarks=benchmarks))


# ---------------------------------------------------------------------------------------------------
# On the synthetic twin


def test_text_prompt_is_skipped_with_a_reason_for_a_release_without_targets(synthetic_build, tmp_path):
    release = tmp_path / "v2p"
    shutil.copytree(synthetic_build.v2p_bench, release)
    info = release / "dataset_info.jsonl"
    rows = [json.loads(line) for line in info.read_text().splitlines()]
    for row in rows:
        del row["target_id"]
    info.write_text("".join(json.dumps(row) + "\n" for row in rows))
    from eval.benchmarks.v2p import V2PSettings

    samples = load_v2p_release(release)
    settings = V2PSettings(root=str(release))
    skipped = BENCHMARKS["v2p_text_prompt"].derive(samples, settings)
    assert skipped.samples == [] and "no target_id" in skipped.info["skipped"]
    assert len(BENCHMARKS["v2p_blind"].derive(samples, settings).samples) == len(samples)


@pytest.mark.slow
def test_every_diagnostic_end_to_end_on_the_twin(
    small_eval_config, synthetic_build, tiny_checkpoint, tmp_path
):
    from eval.run import run

    cfg = small_eval_config(
        tmp_path,
        f"model.name_or_path={tiny_checkpoint}",
        f"eval.settings.v2p.root={synthetic_build.v2p_bench}",
        "eval=diagnostics",
        "eval.benchmarks=[v2p,v2p_blind,v2p_z,v2p_shuffled,v2p_text_prompt]",
        "eval.limit=4",
        "eval.batch_size=4",
        "logger.wandb=true",
        "logger.mode=offline",
    )
    summary = run(cfg)
    benchmarks = summary["benchmarks"]
    wanted = {
        "v2p_blind": ["accuracy"],
        "v2p_z": ["accuracy", "z_rate", "z_rate_tolerant"],
        "v2p_shuffled": ["refusal_rate", "hack_ratio", "hack_ratio/duration/short"],
        "v2p_text_prompt": ["accuracy"],
    }
    for bench, metrics in wanted.items():
        for metric in metrics:
            assert isinstance(benchmarks[bench]["metrics"][metric]["baseline"], float), (bench, metric)
    notes = {bench: benchmarks[bench]["derived"] for bench in wanted}  # each diagnostic's own account
    assert notes["v2p_shuffled"]["frames"] == cfg.media.num_frames
    assert notes["v2p_shuffled"]["n_items"] == benchmarks["v2p_shuffled"]["n_items"] > 0
    pair = notes["v2p_text_prompt"]["text_vs_visual"]["model"]  # the standalone run's model
    assert pair["n"] == benchmarks["v2p_text_prompt"]["n_items"] > 0
    assert isinstance(pair["text_prompt"], float) and isinstance(pair["visual_prompt"], float)
    records = Path(cfg.run_dir, "eval", "model", "v2p_text_prompt.jsonl").read_text()
    assert "marked by" not in "".join(json.loads(line)["meta"]["question"] for line in records.splitlines())
    report = Path(cfg.run_dir, "report.md").read_text()
    assert "## Diagnostics" in report and "hack ratio" in report and "text " in report
    logged = _logged_keys(Path(cfg.run_dir))
    for key in ("v2p_blind/accuracy", "v2p_z/z_rate", "v2p_shuffled/refusal_rate", "v2p_shuffled/hack_ratio"):
        assert key in logged, key
    assert {"v2p_text_prompt/same_items/text_prompt", "v2p_text_prompt/same_items/visual_prompt"} <= logged


def _logged_keys(run_dir: Path, wait_s: float = 30.0) -> set[str]:
    """Every key W&B received. The offline run file can get its one history row a moment after
    ``finish()`` returns (seen on a loaded machine), so wait for it a little."""
    deadline = time.monotonic() + wait_s
    while True:
        (run_file,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
        rows = history(run_file)
        if rows or time.monotonic() > deadline:
            return {key for row in rows for key in row}
        time.sleep(0.5)
