"""OVI-Train from ActivityNet-format captions: loading, interruption insertion and timing, visual evidence,
mix, forms, phrasings, the build, and the synthetic OVIBench twin's timing."""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path

import pytest
from caption_sources import (
    link_videos,
    make_source,
    ovi_build,
    realistic_activitynet,
    realistic_qvhighlights,
)

from core.errors import ConfigError, DataError, DataErrors
from core.formats.ovi import load_ovibench, ovi_row_to_sample
from core.sample import Sample
from core.vocab import InterruptionType
from data_builders.ovi_train import build_ovi_items, build_ovi_train
from data_builders.phrasings import BANKS, PHRASINGS_VERSION, TRAIN, phrased_by
from data_builders.questions import QuestionContext, TemplateQuestions, video_questions
from data_builders.sources.activitynet import load_activitynet_captions


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_source(tmp_path_factory.mktemp("anet"), n_videos=40)


@pytest.fixture(scope="module")
def rows(source: tuple[Path, Path]) -> list[dict]:
    rows, quarantined = build_ovi_items(ovi_build(*source, seed=0))
    assert not quarantined
    return rows


def test_loader_quarantines_bad_segments_and_keeps_the_rest(tmp_path: Path):
    data = {
        "v_bad": {
            "duration": 12.0,
            "timestamps": [[-1, 2], [3, 2], [1, 13], [1, 2], [0, 3]],
            "sentences": ["a", "b", "c", "  ", "A person runs."],
        }
    }
    path = tmp_path / "c.json"
    path.write_text(json.dumps(data))
    (video,), quarantined = load_activitynet_captions(path)
    assert [c.index for c in video.captions] == [4] and video.captions[0].sentence == "a person runs"
    assert [q.split(":")[0] for q in quarantined] == ["v_bad[0]", "v_bad[1]", "v_bad[2]", "v_bad[3]"]
    assert "beyond the duration" in quarantined[2] and "empty sentence" in quarantined[3]


def test_loader_raises_for_malformed_files(tmp_path: Path):
    path = tmp_path / "c.json"
    path.write_text('{"v_a": {')
    with pytest.raises(DataError, match=r"c\.json: cannot read captions JSON"):
        load_activitynet_captions(path)
    path.write_text("[]")
    with pytest.raises(DataError, match=r"c\.json: expected a JSON object"):
        load_activitynet_captions(path)
    path.write_text(
        json.dumps(
            {
                "v_a": {"duration": 5, "timestamps": [[0, 1], [1, 2]], "sentences": ["x"]},
                "v_b": {"duration": -1, "timestamps": [[0, "1"]], "sentences": ["y"]},
                "v_c": {"duration": True, "timestamps": [[0, 1]], "sentences": ["z"]},
            }
        )
    )
    with pytest.raises(DataErrors) as caught:
        load_activitynet_captions(path)
    problems = caught.value.problems
    assert any("'v_c'" in p and "'duration'" in p for p in problems)  # a JSON true is not a number
    assert any("'v_a'" in p and "'sentences'" in p for p in problems)
    assert any("'v_b'" in p and "'duration'" in p for p in problems)
    assert any("'v_b'" in p and "'timestamps[0]'" in p for p in problems)


def test_all_three_types_in_the_configured_ratio(rows: list[dict]):
    types = Counter(r["interruption_type"] for r in rows if r["format"] == "open")
    total = sum(types.values())
    assert total >= 100
    for kind, share in (("Cancellation", 0.25), ("Correction", 0.5), ("False Trigger", 0.25)):
        assert abs(types[kind] / total - share) <= 0.05, types


def test_mix_is_configurable(source: tuple[Path, Path]):
    only_cancel = {InterruptionType.cancellation: 1}  # a type left out weighs 0
    rows, _ = build_ovi_items(ovi_build(*source, seed=1, mix=only_cancel, forms=["open"]))
    assert {r["interruption_type"] for r in rows} == {"Cancellation"}
    no_cancel = {
        InterruptionType.cancellation: 0,
        InterruptionType.correction: 1,
        InterruptionType.false_trigger: 1,
    }
    rows, _ = build_ovi_items(ovi_build(*source, seed=1, mix=no_cancel))
    assert set(Counter(r["interruption_type"] for r in rows)) == {"Correction", "False Trigger"}
    with pytest.raises(ConfigError, match="mix needs non-negative weights"):
        build_ovi_items(ovi_build(*source, seed=1, mix={InterruptionType.correction: -1}))
    with pytest.raises(ConfigError, match="forms"):
        build_ovi_items(ovi_build(*source, seed=1, forms=["essay"]))


def _delay_s(row: dict, words_per_second: float = 2.5) -> float:
    """t_i - t_q: the words cut spoken, and at least 1 s while the next word is still being spoken."""
    cut = len(row["partial_answer"].split())
    return max(cut / words_per_second, min(1.0, (cut + 1) / words_per_second - 1e-3))


def test_interruption_falls_inside_the_answer_and_after_the_question(rows: list[dict]):
    for row in rows:
        t_q, t_i = row["question_time"], row["interruption_time"]
        assert 0 < t_q <= row["duration"] and t_i > t_q
        assert row["segment"][1] == t_q  # the answer's evidence has been seen when the question comes
        words, partial = row["answer"].split(), row["partial_answer"].split()
        assert words[: len(partial)] == partial and 0 < len(partial) < len(words)
        assert 0.3 - 1 / len(words) <= len(partial) / len(words) <= 0.7 + 1 / len(words)
        # Never capped at the video's end: timed by the words spoken alone.
        assert t_i == pytest.approx(t_q + _delay_s(row), abs=1e-3)
        assert len(words) < 3 or t_i - t_q >= 1.0 - 1e-6
    assert any(r["interruption_time"] > r["duration"] for r in rows)  # questions asked at the last frame


def test_an_interruption_after_the_video_brings_frames_only_up_to_its_end(rows: list[dict], tmp_path: Path):
    late = next(r for r in rows if r["question_time"] < r["duration"] < r["interruption_time"])
    interruption = ovi_row_to_sample(late, tmp_path).turns[2]
    assert [(p.start, p.end) for p in interruption.parts if p.type == "video"] == [
        (late["question_time"], late["duration"])
    ]
    at_the_end = next(r for r in rows if r["question_time"] == r["duration"])
    assert [p.type for p in ovi_row_to_sample(at_the_end, tmp_path).turns[2].parts] == ["text"]
    assert ovi_row_to_sample(at_the_end, tmp_path).meta["interruption_time"] > at_the_end["duration"]


def test_visual_evidence_is_the_captions_seen_by_the_interruption(
    rows: list[dict], source: tuple[Path, Path]
):
    captions = json.loads(source[0].read_text())
    for row in rows:
        video = captions[row["source_id"]]
        seen = sorted(
            (start, end, i, text.strip().rstrip(".").lower())
            for i, ((start, end), text) in enumerate(
                zip(video["timestamps"], video["sentences"], strict=True)
            )
            if start < row["interruption_time"]
        )
        assert row["visual_evidence"].lower() == " ".join(f"{text}." for *_, text in seen)


def test_reaction_matches_the_type(rows: list[dict], source: tuple[Path, Path]):
    captions = json.loads(source[0].read_text())
    videos, _ = load_activitynet_captions(source[0])
    qas = {v.key: video_questions(TemplateQuestions(), v, QuestionContext(), []) for v in videos}
    for row in rows:
        kind, reaction = row["interruption_type"], row["reference_reaction"]
        assert row["phrasing"] == "train"
        if kind == "False Trigger":
            assert row["interruption"] in TRAIN.false_triggers
            assert row["partial_answer"] + " " + reaction == row["answer"]  # seamless, no repetition
        elif kind == "Cancellation":
            assert row["interruption"] in TRAIN.cancellations and reaction in TRAIN.acknowledgements
        else:
            assert any(phrased_by(row["interruption"], template) for template in TRAIN.corrections)
            assert reaction != row["answer"]
            ends = _corrected_evidence_ends(row, captions[row["source_id"]], qas[row["source_id"]])
            assert ends and max(ends) <= row["interruption_time"]  # answerable from what was seen


def _corrected_evidence_ends(row: dict, video: dict, qas: list) -> list[float]:
    """End times of the captions the corrected answer is drawn from, checking it names the right thing."""
    captions = list(zip(video["timestamps"], video["sentences"], strict=True))
    asked = [qa for qa in qas if qa.question in row["interruption"]]
    window = tuple(re.findall(r"\d+\.\d", row["interruption"]))
    if asked:  # "Sorry, I meant to ask: <another question>" -> that question's answer
        assert row["reference_reaction"] in [qa.answer for qa in asked]
        return [min(qa.end for qa in asked if qa.answer == row["reference_reaction"])]
    if window:  # "Sorry, I meant between 2.0 s and 3.0 s." -> the captions of that window
        chosen = [((s, e), text) for (s, e), text in captions if (f"{s:.1f}", f"{e:.1f}") == window]
        reaction = row["reference_reaction"].lower()
        assert chosen and all(text.strip().rstrip(".").lower() in reaction for _, text in chosen)
    else:  # "Sorry, I meant the blue square." -> a caption about the blue square
        name = re.search(r"the (\w+ \w+)", row["interruption"]).group(1)
        assert name in row["reference_reaction"] and name not in row["question"]
        chosen = [
            ((s, e), text) for (s, e), text in captions if text.endswith(row["reference_reaction"][4:-1])
        ]
    return [e for (_, e), _ in chosen]


def test_mcq_letter_points_at_the_right_continuation(rows: list[dict], source: tuple[Path, Path]):
    mcq = [r for r in rows if r["format"] == "mcq"]
    assert len(mcq) == len(rows) // 2
    for row in mcq:
        options, letter = row["options"], row["answer_letter"]
        assert len(set(options)) == 4 and options["ABCD".index(letter)] == row["reference_reaction"]
        acks = [o for o in options if o in TRAIN.acknowledgements]
        assert len(acks) == 1  # exactly one "stop" option, right only for a Cancellation
        if row["interruption_type"] != "False Trigger":
            rest = row["answer"][len(row["partial_answer"]) + 1 :]
            assert rest in options  # the seamless continuation is offered as a wrong option
        target = ovi_row_to_sample({**row, "video_path": "videos/x.mp4"}, source[1].parent).turns[-1].text
        assert target == f"{letter} ({row['interruption_type']})"
    letters = Counter(r["answer_letter"] for r in mcq)
    assert max(letters.values()) - min(letters.values()) <= 1


def test_same_seed_same_items(source: tuple[Path, Path], rows: list[dict]):
    again, _ = build_ovi_items(ovi_build(*source, seed=0))
    assert again == rows
    other, _ = build_ovi_items(ovi_build(*source, seed=7))
    assert other != rows


def test_build_ovi_train_writes_everything(tmp_path: Path):
    bad = {
        "v_half": {"duration": 10.0, "timestamps": [[0, 4], [2, 11]], "sentences": ["a red star spins", "x"]}
    }
    bad["v_novideo"] = {"duration": 10.0, "timestamps": [[0, 4]], "sentences": ["a red star spins"]}
    captions, videos = make_source(tmp_path / "src", n_videos=6, extra=bad)
    out = build_ovi_train(ovi_build(captions, videos, out=str(tmp_path / "out"), seed=0, source="synthetic"))
    samples = load_ovibench(out)
    assert samples and all(s.source == "synthetic" and s.task == "ovi" for s in samples)
    assert all(Path(s.turns[0].parts[0].path).is_file() for s in samples)
    assert (out / "videos" / "v_plain.mp4").is_file() and not (out / "videos" / "v_novideo.mp4").exists()
    import datasets

    hf = datasets.load_from_disk(str(out / "hf"))
    assert hf.num_rows == len(samples) and [Sample.from_row(r) for r in hf] == samples
    for sample in samples:
        assert Sample.from_row(json.loads(json.dumps(sample.to_row()))) == sample
    info = json.loads((out / "build_info.json").read_text())
    assert info["quarantined"] == 2 and info["seed"] == 0
    assert info["settings"]["phrasings"] == {
        "version": PHRASINGS_VERSION,
        "bank": "train",
        "paraphrased_share": 0,
    }
    assert info["by_phrasing"] == {"train": info["rows"]}
    assert any(r.startswith("v_half[1]: segment end 11") for r in info["quarantine_reasons"])
    assert any(r.startswith("v_novideo: video not found") for r in info["quarantine_reasons"])
    stats = (out / "stats.md").read_text()
    assert "| synthetic |" in stats and "| mcq |" in stats and "Quarantined: 2" in stats
    assert "| train |" in stats and f"phrasings v{PHRASINGS_VERSION}" in stats


def _texts(row: dict) -> list[str]:
    """The row's texts phrasings reach: the utterance, the reaction, and the options."""
    return [row["interruption"], row["reference_reaction"], *row.get("options", [])]


def test_an_eval_build_speaks_only_eval_and_paraphrased_words_in_the_configured_share(
    source: tuple[Path, Path],
):
    rows, _ = build_ovi_items(ovi_build(*source, seed=0, phrase_bank="eval", paraphrased_share=0.3))
    assert {r["phrasing"] for r in rows} == {"eval", "paraphrased"}
    for row in rows:
        bank = BANKS[row["phrasing"]]
        utterances = bank.utterances[row["interruption_type"]]
        assert any(phrased_by(row["interruption"], phrasing) for phrasing in utterances), row["interruption"]
        if row["interruption_type"] == "Cancellation":
            assert row["reference_reaction"] in bank.acknowledgements
        for text in _texts(row):
            assert not [p for p in TRAIN.phrasings if phrased_by(text, p)], text
    for kind in ("Cancellation", "Correction", "False Trigger"):  # each type gets its share
        phrasings = [r["phrasing"] for r in rows if r["format"] == "open" and r["interruption_type"] == kind]
        assert abs(phrasings.count("paraphrased") / len(phrasings) - 0.3) <= 0.05, (kind, Counter(phrasings))
    only_eval, _ = build_ovi_items(ovi_build(*source, seed=0, phrase_bank="eval", paraphrased_share=0.0))
    assert {r["phrasing"] for r in only_eval} == {"eval"}


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"paraphrased_share": 1.5}, "paraphrased_share must be in"),
        ({"min_spoken_s": -1.0}, "min_spoken_s not negative"),
        ({"phrase_bank": "paraphrased"}, "phrase_bank must be one of train, eval"),
    ],
)
def test_bad_timing_or_phrasing_settings_are_named(source: tuple[Path, Path], setting: dict, message: str):
    with pytest.raises(ConfigError, match=message):
        build_ovi_items(ovi_build(*source, **setting))


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_every_open_item_of_the_synthetic_twin_is_cut_after_3_tokens(synthetic_build):
    """The offline simulation cuts the model's own answer at (t_i - t_q) x 3 tokens/s: never before 3
    tokens, unless the whole answer is shorter; and no t_i is held back at the video's end."""
    rows = [r for r in _jsonl(synthetic_build.ovibench / "ovibench.jsonl") if r["format"] == "open"]
    for row in rows:
        tokens = math.floor((row["interruption_time"] - row["question_time"]) * 3 + 1e-6)
        assert tokens >= 3 or len(row["answer"].split()) < 3, row
        assert row["interruption_time"] == pytest.approx(row["question_time"] + _delay_s(row), abs=1e-3)
        assert row["visual_evidence"]
    assert any(r["interruption_time"] > r["duration"] for r in rows)


@pytest.mark.parametrize("fmt", ["activitynet", "qvhighlights"])
def test_no_question_kind_takes_half_the_rows_of_real_looking_files(tmp_path: Path, fmt: str):
    if fmt == "activitynet":
        data = realistic_activitynet(150, 561, seed=4)  # the real train file's 3.74 captions a video
        path, names = tmp_path / "train.json", list(data)
        path.write_text(json.dumps(data))
    else:
        lines = realistic_qvhighlights(300, seed=4)
        path, names = tmp_path / "train.jsonl", sorted({line["vid"] for line in lines})
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    videos = link_videos(tmp_path / "videos", names)
    out = build_ovi_train(ovi_build(path, videos, out=str(tmp_path / "out"), format=fmt, forms=["open"]))
    rows, info = _jsonl(out / "ovibench.jsonl"), json.loads((out / "build_info.json").read_text())
    assert info["quarantined"] == 0  # no last segment lost to the durations' float noise
    kinds = Counter(r["question_kind"] for r in rows)
    assert max(kinds.values()) <= len(rows) / 2 and len(kinds) >= 3, kinds
    assert info["by_question_kind"] == dict(kinds)
    assert "Rows by question kind x type (" in (out / "stats.md").read_text()
    for row in rows:  # asked when its evidence has been seen, which its annotations name
        assert row["segment"][1] == row["question_time"] <= row["duration"] + 1e-3
        assert row["source_annotations"] and row["id"].endswith("-open")
    if fmt == "qvhighlights":  # every query of the file can be traced back from the rows
        assert {ref["qid"] for r in rows for ref in r["source_annotations"]} == {x["qid"] for x in lines}
    sample = load_ovibench(out)[0]
    assert sample.meta["question_kind"] == rows[0]["question_kind"]
    assert sample.meta["source_annotations"] == rows[0]["source_annotations"]
