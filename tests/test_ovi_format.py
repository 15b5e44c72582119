"""Our OVIBench row format: the sample a row becomes, and validation of bad rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from release_rows import ovi_mcq as _mcq
from release_rows import ovi_row as _row

from core.errors import DataErrors
from core.formats.ovi import MCQ_INSTRUCTION, load_ovibench, ovi_row_to_sample, write_ovibench
from core.sample import Sample


def test_open_row_becomes_four_turns(ovi_root: Path):
    sample = ovi_row_to_sample(_row(), ovi_root)
    assert [t.role for t in sample.turns] == ["user", "assistant", "user", "assistant"]
    assert [t.loss for t in sample.turns] == [False, False, False, True]
    first, partial, interruption, target = sample.turns
    video = first.parts[0]
    assert (video.path, video.start, video.end) == (str(ovi_root / "videos/v_a.mp4"), 0.0, 4.0)
    assert (interruption.parts[0].start, interruption.parts[0].end) == (4.0, 5.2)
    assert partial.text == "Between 1.0 s and" and interruption.text == "Uh-huh."
    assert target.text == "4.0 s, a red circle moves up."
    assert (sample.task, sample.source, sample.source_id, sample.segment) == (
        "ovi",
        "activitynet",
        "v_a",
        (1.0, 4.0),
    )
    assert sample.meta["interruption_type"] == "False Trigger" and "answer_letter" not in sample.meta


def test_mcq_row_lists_options_and_targets_letter_and_type(ovi_root: Path):
    sample = ovi_row_to_sample(_mcq(), ovi_root)
    text = sample.turns[2].text
    assert text.startswith("Uh-huh.\n" + MCQ_INSTRUCTION + "\nA: Okay, I'll stop here.\nB: 4.0 s")
    assert sample.turns[3].text == "B (False Trigger)"
    assert sample.meta["answer_letter"] == "B" and len(sample.meta["options"]) == 4


def test_no_empty_video_span_when_interrupted_at_the_end(ovi_root: Path):
    for t_i in (10.0, 11.5):  # at the last frame, or after the video has ended
        sample = ovi_row_to_sample(
            _row(question_time=10.0, interruption_time=t_i, segment=[8.0, 10.0]), ovi_root
        )
        assert [p.type for p in sample.turns[2].parts] == ["text"]
        assert sample.meta["interruption_time"] == t_i


def test_an_interruption_after_the_end_brings_the_frames_up_to_the_end(ovi_root: Path):
    write_ovibench([_row(question_time=9.0, interruption_time=10.6, segment=[8.0, 9.0])], ovi_root)
    (sample,) = load_ovibench(ovi_root)
    (video,) = [p for p in sample.turns[2].parts if p.type == "video"]
    assert (video.start, video.end) == (9.0, 10.0)


def test_visual_evidence_and_phrasing_reach_the_meta(ovi_root: Path):
    row = _row(visual_evidence="A red circle moves up.", phrasing="paraphrased")
    write_ovibench([row], ovi_root)
    (sample,) = load_ovibench(ovi_root)
    assert (
        sample.meta["visual_evidence"] == "A red circle moves up."
        and sample.meta["phrasing"] == "paraphrased"
    )
    assert not {"visual_evidence", "phrasing"} & set(ovi_row_to_sample(_row(), ovi_root).meta)


def test_write_load_round_trip(ovi_root: Path):
    write_ovibench([_row(), _mcq()], ovi_root)
    samples = load_ovibench(ovi_root)
    assert [s.id for s in samples] == ["x-1-open", "x-1-mcq"]
    for sample in samples:
        assert Sample.from_row(json.loads(json.dumps(sample.to_row()))) == sample


def test_every_bad_row_is_listed(ovi_root: Path):
    lines = [
        json.dumps(_row(id="ok")),
        "not json",
        json.dumps(_row(id="r3", interruption_type="Interruption")),
        json.dumps(_row(id="r4", question_time=-1.0)),
        json.dumps(_row(id="r5", interruption_time=3.0)),
        json.dumps(_row(id="r6", phrasing="human")),
        json.dumps(_mcq(id="r7", answer_letter="E")),
        json.dumps(_row(id="r8", video_path="videos/missing.mp4")),
        json.dumps({k: v for k, v in _row(id="r9").items() if k != "partial_answer"}),
        json.dumps(_mcq(id="r10", options=["a", "b"])),
        json.dumps(_mcq(id="r11", answer_letter="AB")),  # a substring of "ABCD", not a letter
        json.dumps(_mcq(id="r12", answer_letter=1)),
        json.dumps(_row(id="ok")),
    ]
    (ovi_root / "ovibench.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(DataErrors) as caught:
        load_ovibench(ovi_root)
    expected = {
        2: "malformed JSON",
        3: "field 'interruption_type'",
        4: "field 'question_time'",
        5: "field 'interruption_time': 3.0 is before question_time",
        6: "field 'phrasing': 'human' not in ('train', 'eval', 'paraphrased')",
        7: "field 'answer_letter'",
        8: "field 'video_path': file not found",
        9: "field 'partial_answer'",
        10: "field 'options'",
        11: "field 'answer_letter'",
        12: "field 'answer_letter'",
        13: "field 'id': duplicate id 'ok' (first on row 1)",
    }
    problems = caught.value.problems
    for line, text in expected.items():
        assert any(p.startswith(f"row {line},") or p.startswith(f"row {line}:") for p in problems), line
        assert any(p.startswith(f"row {line}") and text in p for p in problems), (line, problems)
    assert not any(p.startswith("row 1,") for p in problems)
    assert "ovibench.jsonl" in str(caught.value)


def test_write_refuses_bad_rows(tmp_path: Path):
    with pytest.raises(DataErrors, match="row 2, field 'format'"):
        write_ovibench([_row(), _row(id="b", format="essay")], tmp_path)
    assert not (tmp_path / "ovibench.jsonl").exists()
