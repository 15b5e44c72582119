"""OVI-Train from ActivityNet-format captions: loading, interruption insertion, mix, forms, the build."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from caption_sources import make_source, ovi_build

from data_builders.errors import DataError, DataErrors, SettingError
from data_builders.ovi_format import load_ovibench, ovi_row_to_sample
from data_builders.ovi_train import (
    CANCELLATION_ACKS,
    CANCELLATION_UTTERANCES,
    FALSE_TRIGGER_UTTERANCES,
    build_ovi_items,
    build_ovi_train,
)
from data_builders.sample import Sample
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
    rows, _ = build_ovi_items(ovi_build(*source, seed=1, mix=[1, 0, 0], forms=["open"]))
    assert {r["interruption_type"] for r in rows} == {"Cancellation"}
    # Cancellation : Correction : False Trigger
    rows, _ = build_ovi_items(ovi_build(*source, seed=1, mix=[0, 1, 1]))
    assert set(Counter(r["interruption_type"] for r in rows)) == {"Correction", "False Trigger"}
    with pytest.raises(SettingError, match="mix"):
        build_ovi_items(ovi_build(*source, seed=1, mix=[1, 1]))
    with pytest.raises(SettingError, match="forms"):
        build_ovi_items(ovi_build(*source, seed=1, forms=["essay"]))


def test_interruption_falls_inside_the_answer_and_the_video(rows: list[dict]):
    for row in rows:
        t_q, t_i = row["question_time"], row["interruption_time"]
        assert 0 < t_q <= t_i <= row["duration"]
        assert row["segment"][1] == t_q  # the answer's evidence has been seen when the question comes
        words, partial = row["answer"].split(), row["partial_answer"].split()
        assert words[: len(partial)] == partial and 0 < len(partial) < len(words)
        assert 0.3 - 1 / len(words) <= len(partial) / len(words) <= 0.7 + 1 / len(words)
        assert t_i == pytest.approx(min(row["duration"], t_q + len(partial) / 2.5), abs=1e-3)


def test_reaction_matches_the_type(rows: list[dict], source: tuple[Path, Path]):
    captions = json.loads(source[0].read_text())
    for row in rows:
        kind, reaction = row["interruption_type"], row["reference_reaction"]
        if kind == "False Trigger":
            assert row["interruption"] in FALSE_TRIGGER_UTTERANCES
            assert row["partial_answer"] + " " + reaction == row["answer"]  # seamless, no repetition
        elif kind == "Cancellation":
            assert row["interruption"] in CANCELLATION_UTTERANCES and reaction in CANCELLATION_ACKS
        else:
            assert reaction != row["answer"]
            ends = _corrected_evidence_ends(row, captions[row["source_id"]])
            assert ends and max(ends) <= row["interruption_time"]  # answerable from what was seen


def _corrected_evidence_ends(row: dict, video: dict) -> list[float]:
    """End times of the captions the corrected answer is drawn from, checking it names the right thing."""
    captions = list(zip(video["timestamps"], video["sentences"], strict=True))
    window = tuple(re.findall(r"(\d+\.\d) s", row["interruption"]))
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
        acks = [o for o in options if o in CANCELLATION_ACKS]
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
    assert any(r.startswith("v_half[1]: segment end 11") for r in info["quarantine_reasons"])
    assert any(r.startswith("v_novideo: video not found") for r in info["quarantine_reasons"])
    stats = (out / "stats.md").read_text()
    assert "| synthetic |" in stats and "| mcq |" in stats and "Quarantined: 2" in stats
