"""The catalogue of bad inputs: each case names what is wrong (file, row, field) or is quarantined and
counted, never dropped silently. The loaders' own test files go deeper; this one is the overview."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hydra.errors import ConfigCompositionException
from release_rows import ovi_mcq, ovi_row, v2p_row
from release_rows import v2p_question as _question
from release_rows import write_v2p_rows as write_v2p

from core.decoding import MediaSpec
from core.errors import DataErrors, DecodeError
from core.formats.ovi import load_ovibench
from core.formats.v2p import load_v2p_release
from core.media import decode_span
from core.video_io import write_mp4
from data_builders.sources.activitynet import load_activitynet_captions

# ---------------------------------------------------------------------------------------------------
# Videos: every decode failure names the file and why.


def _good_mp4(path: Path) -> Path:
    write_mp4(path, np.zeros((16, 56, 56, 3), np.uint8), fps=8.0)
    return path


def _zero_byte(tmp_path: Path) -> Path:
    (tmp_path / "empty.mp4").write_bytes(b"")
    return tmp_path / "empty.mp4"


def _truncated(tmp_path: Path) -> Path:
    data = _good_mp4(tmp_path / "whole.mp4").read_bytes()
    (tmp_path / "cut.mp4").write_bytes(data[: len(data) // 3])
    return tmp_path / "cut.mp4"


def _missing(tmp_path: Path) -> Path:
    return tmp_path / "nowhere.mp4"


@pytest.mark.parametrize(
    "make, message",
    [
        pytest.param(
            _zero_byte, r"empty\.mp4: cannot decode video: file is empty \(0 bytes\)", id="zero-byte-mp4"
        ),
        pytest.param(_truncated, r"cut\.mp4: cannot decode video: \w+", id="truncated-mp4"),
        pytest.param(_missing, r"nowhere\.mp4: cannot decode video: file not found", id="missing-video"),
    ],
)
def test_bad_video(tmp_path, make, message):
    with pytest.raises(DecodeError, match=message):
        decode_span(make(tmp_path), 0.0, 2.0, MediaSpec(num_frames=4))


def test_hung_decode_is_quarantined_and_the_next_sample_decodes(tmp_path):
    """A decode that hangs is killed at ``media.timeout_s`` with its worker process; the sample is
    quarantined with the reason and the next one decodes in a new worker."""
    import os
    import signal

    from core import decode_worker
    from core.media import FrameCache, check_media
    from core.rundir import reason_counts
    from core.sample import Part, Sample, Turn

    video = _good_mp4(tmp_path / "stalls.mp4")
    turns = [Turn("user", [Part.video(str(video), 0.0, 2.0), Part.txt("What moves?")])]
    samples = [Sample(f"s{i}", "ovi", turns, "test", "stalls", (0.0, 2.0)) for i in range(2)]
    # Frozen, the worker answers nothing, as one stuck reading a stalled network file system.
    os.kill(decode_worker.worker().pid, signal.SIGSTOP)
    usable, quarantined = check_media(samples, MediaSpec(num_frames=4, timeout_s=1.0), FrameCache(None), "t")
    assert [sample.id for sample in usable] == ["s1"]
    assert quarantined == [{"id": "s0", "file": str(video), "reason": "decoding took longer than 1.0 s"}]
    assert reason_counts(quarantined) == {"decoding took longer than 1.0 s": 1}


# ---------------------------------------------------------------------------------------------------
# V2P-Bench release rows (dataset_info.jsonl): row 1 is good, row 2 is the bad one.


@pytest.mark.parametrize(
    "bad_row, message",
    [
        pytest.param('{"video_id": "vid1", "dura', "row 2: malformed JSON", id="truncated-jsonl-line"),
        pytest.param(
            v2p_row(duration="12"), "row 2, field 'duration': expected int or float", id="duration-str"
        ),
        pytest.param(
            v2p_row(answer="D", question=_question("Q?", ["a", "b", "c"])),
            "row 2, field 'answer': 'D' is not among options",
            id="answer-not-an-option",
        ),
        pytest.param(
            v2p_row(dimension=8), "row 2, field 'dimension': unknown dimension id 8", id="unknown-dim"
        ),
        pytest.param(
            v2p_row(video_path="NExTVideo/gone.mp4"),
            "row 2, field 'video_path': file not found: videos/NExTVideo/gone.mp4",
            id="missing-video-file",
        ),
    ],
)
def test_bad_v2p_row(v2p_release, bad_row, message):
    write_v2p(v2p_release, [v2p_row(), bad_row])
    with pytest.raises(DataErrors) as caught:
        load_v2p_release(v2p_release)
    assert "dataset_info.jsonl" in str(caught.value)
    assert [p for p in caught.value.problems if message in p], caught.value.problems
    assert len(caught.value.problems) == 1, caught.value.problems


# ---------------------------------------------------------------------------------------------------
# OVIBench rows (ovibench.jsonl, a 10 s video): row 1 is good, row 2 is the bad one.


@pytest.mark.parametrize(
    "bad_row, message",
    [
        pytest.param(ovi_row(duration="10"), "row 2, field 'duration': expected a number", id="duration-str"),
        pytest.param(
            ovi_mcq(answer_letter="E"),
            "row 2, field 'answer_letter': 'E' is not among options A, B, C, D",
            id="answer-not-an-option",
        ),
        pytest.param(
            ovi_row(question_time=11.0, interruption_time=12.0),
            "row 2, field 'question_time': 11.0 outside the video [0, 10.0]",
            id="question-beyond-duration",
        ),
        pytest.param(
            ovi_row(question_time=-1.0),
            "row 2, field 'question_time': -1.0 outside the video",
            id="negative-time",
        ),
        pytest.param(
            ovi_row(question_time=0.0, interruption_time=-0.5),
            "row 2, field 'interruption_time': -0.5 is before the video's start",
            id="negative-interruption",
        ),
        pytest.param(
            ovi_row(interruption_time=3.0),
            "row 2, field 'interruption_time': 3.0 is before question_time 4.0",
            id="interruption-before-question",
        ),
        pytest.param(
            ovi_row(interruption_time=float("nan")),
            "row 2, field 'interruption_time': nan is not a finite time",
            id="interruption-not-finite",
        ),
        pytest.param(
            ovi_row(phrasing="human"),
            "row 2, field 'phrasing': 'human' not in ('train', 'eval', 'paraphrased')",
            id="unknown-phrasing",
        ),
        pytest.param(
            ovi_row(visual_evidence=["a red circle"]),
            "row 2, field 'visual_evidence': expected a string",
            id="evidence-not-text",
        ),
        pytest.param(
            ovi_row(segment=[4.0, 1.0]),
            "row 2, field 'segment': [4.0, 1.0] is negative, reversed or beyond 10.0",
            id="reversed-segment",
        ),
        pytest.param(
            ovi_row(segment=[-2.0, 4.0]),
            "row 2, field 'segment': [-2.0, 4.0] is negative",
            id="negative-segment",
        ),
        pytest.param(
            ovi_row(segment=[1.0, 12.0]),
            "row 2, field 'segment': [1.0, 12.0] is negative, reversed or beyond 10.0",
            id="segment-beyond-duration",
        ),
    ],
)
def test_bad_ovibench_row(ovi_root, bad_row, message):
    lines = [json.dumps(ovi_row(id="good")), json.dumps({**bad_row, "id": "bad"})]
    (ovi_root / "ovibench.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(DataErrors) as caught:
        load_ovibench(ovi_root)
    assert "ovibench.jsonl" in str(caught.value)
    assert [p for p in caught.value.problems if message in p], caught.value.problems


# ---------------------------------------------------------------------------------------------------
# ActivityNet captions: a bad segment is quarantined with its reason; the video's other captions stay.


@pytest.mark.parametrize(
    "stamp, reason",
    [
        pytest.param([-1.0, 3.0], "v_a[1]: negative start -1.0", id="negative-start"),
        pytest.param([5.0, 2.0], "v_a[1]: empty or reversed segment [5.0, 2.0]", id="reversed"),
        pytest.param([2.0, 14.5], "v_a[1]: segment end 14.5 beyond the duration 12.0", id="beyond-duration"),
    ],
)
def test_bad_activitynet_segment_is_quarantined(tmp_path, stamp, reason):
    captions = {"v_a": {"duration": 12.0, "timestamps": [[0, 4], stamp], "sentences": ["A runs.", "B sits."]}}
    path = tmp_path / "captions.json"
    path.write_text(json.dumps(captions))
    (video,), quarantined = load_activitynet_captions(path)
    assert quarantined == [reason]
    assert [c.index for c in video.captions] == [0]


# ---------------------------------------------------------------------------------------------------
# Configuration


def test_misspelt_override_fails_at_compose_time_naming_the_key(compose):
    with pytest.raises(ConfigCompositionException, match=r"Could not override 'trainer\.max_step'") as caught:
        compose("train", "+exp=quickstart", "trainer.max_step=3")
    assert "Key 'max_step' not in 'TrainerConfig'" in str(caught.value.__cause__)  # Hydra prints both


# ---------------------------------------------------------------------------------------------------
# Training data: a directory that is not a dataset is named; a corrupt video is quarantined, listed and
# counted, and training goes on without its samples.


def test_a_training_directory_that_is_not_a_saved_dataset_is_named(tmp_path):
    from core.errors import DataError
    from train.data import load_samples

    (tmp_path / "v2p_sft").mkdir()
    (tmp_path / "v2p_sft" / "stats.md").write_text("# a build's folder, not its hf/ dataset\n")
    with pytest.raises(DataError, match=r"v2p_sft: not a complete HF dataset as data_builders saves one"):
        load_samples([str(tmp_path / "v2p_sft")])


def _videos(sample) -> set[str]:
    return {part.path for turn in sample.turns for part in turn.parts if part.type == "video"}


@pytest.mark.slow
def test_corrupt_training_video_is_quarantined_and_training_goes_on(small_train_config, tmp_path):
    from core.rundir import reason_counts
    from data_builders.build import build_synthetic
    from train.data import load_samples
    from train.recipe import train

    cfg = small_train_config(
        tmp_path,
        "eval=none",
        "logger=none",
        "trainer.max_steps=2",
        "trainer.save_steps=2",
        "trainer.batch_size=2",
    )
    paths = build_synthetic(cfg.data.synthetic)  # the run reuses this build (same config)
    samples = load_samples([str(paths.v2p_sft), str(paths.ovi_train)])
    broken = Path(sorted(_videos(samples[0]))[0])
    broken.unlink()  # it may be a hard link shared with another build
    broken.write_bytes(b"\x00\x00\x00\x18ftypmp42" + b"not a video" * 20)
    users = {s.id for s in samples if str(broken) in _videos(s)}

    train(cfg)

    listed = json.loads((Path(cfg.run_dir) / "quarantine_train.json").read_text())
    assert {entry["id"] for entry in listed} == users and {entry["file"] for entry in listed} == {str(broken)}
    assert sum(reason_counts(listed).values()) == len(users) < len(samples)
    state = json.loads(
        (Path(cfg.run_dir) / "checkpoints" / "checkpoint-2" / "trainer_state.json").read_text()
    )
    assert state["global_step"] == 2 and (Path(cfg.run_dir) / "final").is_dir()


def test_a_training_set_with_no_usable_sample_says_so_naming_a_file(tmp_path):
    from core.config import DataConfig
    from core.decoding import MediaSpec
    from core.errors import DataError
    from core.files import save_samples
    from core.media import FrameCache
    from core.sample import Part, Sample, Turn
    from train.data import training_set

    missing = tmp_path / "gone.mp4"
    turns = [Turn("user", [Part.video(str(missing), 0.0, 1.0), Part.txt("What moves?")])]
    turns.append(Turn("assistant", [Part.txt("A red circle.")], loss=True))
    save_samples([Sample("a", "skills", turns, "synthetic", "gone", (0.0, 1.0))], tmp_path / "hf")
    with pytest.raises(DataError, match=rf"{missing}: file not found: no training sample is usable"):
        training_set(DataConfig(train=[str(tmp_path / "hf")]), 0, MediaSpec(), FrameCache(None))
