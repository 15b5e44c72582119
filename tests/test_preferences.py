"""Preference pairs from OVI rows: per interruption type the right reaction is chosen and every wrong one is
rejected with its error label; the prompt is the open form; provenance, storage, stats and exports."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from core.errors import DataError
from core.files import save_samples
from core.formats.ovi import MCQ_INSTRUCTION, ovi_row_to_sample
from core.sample import Part, Sample, Turn
from core.video_io import write_mp4
from data_builders.cli_config import ExportBuild, PreferenceBuild
from data_builders.phrasings import BANKS
from data_builders.preferences import (
    ERRORS,
    build_preferences,
    export_pair_dataset,
    load_pairs,
    pairs_from_samples,
    save_pairs,
)

ANSWER = "A red circle moves to the right and leaves the frame."
PARTIAL = "A red circle moves"
REST = "to the right and leaves the frame."
ACK = BANKS["train"].acknowledgements[0]
OTHER = "The green triangle moves to the left."
CORRECTED = "The blue square stays still."
REACTIONS = {"Cancellation": ACK, "False Trigger": REST, "Correction": CORRECTED}
UTTERANCES = {"Cancellation": "Stop.", "False Trigger": "Hmm, okay.", "Correction": "No, the blue square."}


def _rows(kind: str, key: str) -> list[dict]:
    """The open and the MCQ row of one instance, as data_builders/ovi_train.py writes them."""
    right = REACTIONS[kind]
    wrong = {"Cancellation": [REST, OTHER, ANSWER], "False Trigger": [ACK, OTHER, ANSWER]}
    options = [right, *wrong.get(kind, [REST, ACK, OTHER])]
    base = {
        "video_path": "videos/v.mp4",
        "duration": 10.0,
        "source": "synthetic",
        "source_id": key,
        "segment": [0.0, 4.0],
        "question_time": 4.0,
        "question": "What does the red circle do?",
        "answer": ANSWER,
        "interruption_time": 5.5,
        "partial_answer": PARTIAL,
        "interruption_type": kind,
        "interruption": UTTERANCES[kind],
        "reference_reaction": right,
        "phrasing": "train",
    }
    stem = f"synthetic-{key}-000"
    return [
        {"id": f"{stem}-open", **base, "format": "open"},
        {"id": f"{stem}-mcq", **base, "format": "mcq", "options": options, "answer_letter": "A"},
    ]


def _samples(root: Path) -> list[Sample]:
    rows = [row for i, kind in enumerate(REACTIONS) for row in _rows(kind, f"v{i}")]
    return [ovi_row_to_sample(row, root) for row in rows]


EXPECTED = {
    "Cancellation": {
        "continued_after_cancel": REST,
        "off_topic_after_cancel": OTHER,
        "restarted_after_cancel": ANSWER,
    },
    "False Trigger": {
        "stopped_after_false_trigger": ACK,
        "off_topic_after_false_trigger": OTHER,
        "restarted_after_false_trigger": ANSWER,
    },
    "Correction": {
        "kept_old_answer_after_correction": REST,
        "stopped_after_correction": ACK,
        "off_topic_after_correction": OTHER,
        "restarted_old_answer_after_correction": ANSWER,
    },
}


@pytest.mark.parametrize("kind", list(REACTIONS))
def test_each_type_rejects_every_wrong_reaction_with_its_error(kind, tmp_path):
    built = pairs_from_samples(_samples(tmp_path))
    pairs = [p for p in built.pairs if p.interruption_type == kind and p.sample.meta["format"] == "open"]
    assert {p.error: p.rejected for p in pairs} == EXPECTED[kind]
    for pair in pairs:
        assert pair.chosen == REACTIONS[kind]
        assert ERRORS[kind, pair.behaviour] == pair.error
        index = list(REACTIONS).index(kind)
        assert pair.source_rows == [f"synthetic-v{index}-000-mcq", f"synthetic-v{index}-000-open"]
        assert pair.id == f"synthetic-v{index}-000-{pair.error}"


@pytest.mark.parametrize("kind", list(REACTIONS))
def test_an_mcq_row_also_gives_pairs_in_its_own_form(kind, tmp_path):
    pairs = [p for p in pairs_from_samples(_samples(tmp_path)).pairs if p.interruption_type == kind]
    mcq = [p for p in pairs if p.sample.meta["format"] == "mcq"]
    # Option A is right; B, C, D are the wrong reactions in the order _rows lists them.
    wrong = [e for e in EXPECTED[kind] if EXPECTED[kind][e] in _rows(kind, "v")[1]["options"]]
    assert sorted(p.error for p in mcq) == sorted(wrong) and len(mcq) == 3
    for pair in mcq:
        assert pair.chosen == f"A ({kind})"
        letter = "ABCD"[pair.sample.meta["options"].index(EXPECTED[kind][pair.error])]
        assert pair.rejected == f"{letter} ({kind})" and pair.id.endswith(f"-mcq-{pair.error}")
        assert MCQ_INSTRUCTION in pair.sample.turns[2].text  # the options are shown


def test_the_prompt_is_the_open_form_and_only_the_reaction_differs(tmp_path):
    pairs = pairs_from_samples(_samples(tmp_path)).pairs
    pair = next(p for p in pairs if p.sample.meta["format"] == "open")
    chosen, rejected = pair.sample, pair.rejected_sample()
    interruption = chosen.turns[2]
    assert MCQ_INSTRUCTION not in interruption.text and interruption.text == chosen.meta["interruption"]
    assert [p.type for p in interruption.parts] == ["video", "text"]  # the new frames (4.0, 5.5] stay
    assert chosen.turns[:3] == rejected.turns[:3]
    assert [t.loss for t in chosen.turns] == [False, False, False, True]
    assert rejected.turns[-1].text == pair.rejected and rejected.turns[-1].loss
    assert "options" not in chosen.meta and chosen.meta["format"] == "open"


def test_open_rows_alone_give_the_derived_wrong_reactions(tmp_path):
    open_rows = [s for s in _samples(tmp_path) if s.meta["format"] == "open"]
    pairs = pairs_from_samples(open_rows).pairs
    assert all(p.sample.meta["format"] == "open" for p in pairs)
    errors = {p.error for p in pairs if p.interruption_type == "Correction"}
    # No MCQ distractor, so no off-topic answer; the rest of the answer, the restart and a stop remain.
    assert errors == set(EXPECTED["Correction"]) - {"off_topic_after_correction"}


def test_other_tasks_are_listed_and_bad_rows_named(tmp_path):
    v2p = Sample(
        "v2p_1", "v2p", [Turn("user", [Part.txt("q")]), Turn("assistant", [Part.txt("A")])], "s", "x", (0, 1)
    )
    built = pairs_from_samples([v2p, *_samples(tmp_path)])
    assert [sid for sid, _ in built.skipped] == ["v2p_1"]
    broken = _samples(tmp_path)[0]
    del broken.meta["partial_answer"]
    with pytest.raises(DataError, match=r"synthetic-v0-000-open.*partial_answer"):
        pairs_from_samples([broken], "some/hf")


def test_pairs_round_trip_and_build_writes_stats(tmp_path):
    save_samples(_samples(tmp_path), tmp_path / "ovi" / "hf")
    out = build_preferences(PreferenceBuild(dataset=str(tmp_path / "ovi" / "hf"), out=str(tmp_path / "pref")))
    pairs = load_pairs(out / "hf")
    assert pairs == pairs_from_samples(_samples(tmp_path)).pairs
    assert load_pairs(tmp_path / "ovi" / "hf") == pairs  # OVI samples are made into the same pairs
    info = json.loads((out / "build_info.json").read_text())
    assert info["pairs"] == 19 and info["instances"] == 3  # 10 open-form pairs, 9 MCQ-form
    assert info["by_type"] == {"Cancellation": 6, "False Trigger": 6, "Correction": 7}
    assert "| kept_old_answer_after_correction | 0 | 2 | 0 | 2 |" in (out / "stats.md").read_text()
    with pytest.raises(DataError, match="not a saved HF dataset"):
        load_pairs(tmp_path / "nowhere")


@pytest.fixture
def pair_dataset(tmp_path) -> Path:
    write_mp4(tmp_path / "videos" / "v.mp4", np.zeros((80, 32, 32, 3), dtype=np.uint8), 8.0)
    save_pairs(pairs_from_samples(_samples(tmp_path)).pairs, tmp_path / "pairs")
    return tmp_path / "pairs"


def test_llamafactory_preference_export(pair_dataset, tmp_path):
    out = tmp_path / "lf"
    result = export_pair_dataset(ExportBuild(dataset=str(pair_dataset), format="llamafactory", out=str(out)))
    assert result.rows == 19 and not result.skipped
    entry = json.loads((out / "dataset_info.json").read_text())["lf"]
    assert entry["ranking"] is True and entry["columns"]["chosen"] == "chosen"
    row = json.loads((out / "lf.json").read_text())[0]
    assert [m["role"] for m in row["messages"]] == ["system", "user", "assistant", "user"]
    assert row["chosen"]["role"] == row["rejected"]["role"] == "assistant"
    assert row["chosen"]["content"] != row["rejected"]["content"]
    assert sum(m["content"].count("<video>") for m in row["messages"]) == len(row["videos"]) == 2
    info = json.loads((out / "export_info.json").read_text())  # written as the samples' exports write it
    assert (info["kind"], info["rows"], info["skipped"]) == ("preference", 19, [])
    assert "stage: dpo" in (out / "README.md").read_text()


def test_swift_preference_export(pair_dataset, tmp_path):
    out = tmp_path / "swift"
    export_pair_dataset(ExportBuild(dataset=str(pair_dataset), format="swift", out=str(out)))
    rows = [json.loads(line) for line in (out / "swift.jsonl").read_text().splitlines()]
    assert len(rows) == 19
    assert rows[0]["messages"][-1]["role"] == "assistant"
    assert rows[0]["rejected_response"] != rows[0]["messages"][-1]["content"]
    assert "swift rlhf --rlhf_type dpo" in (out / "README.md").read_text()


def test_pairs_are_never_exported_as_plain_samples(pair_dataset, tmp_path):
    """As SFT samples the rejected reactions would vanish: export_dataset refuses, naming the way."""
    from core.errors import DataError
    from data_builders.export import export_dataset

    with pytest.raises(DataError, match="preference pairs"):
        export_dataset(ExportBuild(dataset=str(pair_dataset), format="swift", out=str(tmp_path / "sft")))


@pytest.mark.slow  # two CLI subprocesses
def test_the_cli_builds_pairs_and_exports_them(tmp_path):
    """builder=preference writes pairs from OVI samples; builder=export finds them pairs and exports them."""
    import subprocess
    import sys

    from core.files import save_samples

    write_mp4(tmp_path / "videos" / "v.mp4", np.zeros((80, 32, 32, 3), dtype=np.uint8), 8.0)
    save_samples(_samples(tmp_path), tmp_path / "ovi" / "hf")
    for overrides in (
        [
            "builder=preference",
            f"builder.dataset={tmp_path / 'ovi' / 'hf'}",
            f"builder.out={tmp_path / 'pref'}",
        ],
        [
            "builder=export",
            f"builder.dataset={tmp_path / 'pref' / 'hf'}",
            f"builder.out={tmp_path / 'swift'}",
            "builder.format=swift",
        ],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "data_builders", *overrides, f"output_root={tmp_path}"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / "swift" / "swift.jsonl").read_text().splitlines()]
    assert rows and all(row["rejected_response"] for row in rows)
