"""The Qwen-VL adapter: one rendering for training and generation, labels only on trained turns."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from PIL import Image

from core import media
from core.decoding import MediaSpec
from core.media import FrameCache
from core.sample import Part, Sample, Turn
from core.video_io import write_mp4
from models.chat import IGNORE_INDEX, VideoChatAdapter


@pytest.fixture(scope="module")
def adapter(tiny_checkpoint, tmp_path_factory):
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(tiny_checkpoint)
    return VideoChatAdapter(processor, MediaSpec(num_frames=4), FrameCache(tmp_path_factory.mktemp("cache")))


@pytest.fixture(scope="module")
def ovi_like_sample(tmp_path_factory):
    """video → question → partial answer (no loss) → more video + interruption → reaction (loss)."""
    root = tmp_path_factory.mktemp("media")
    write_mp4(root / "v.mp4", np.zeros((16, 112, 112, 3), np.uint8), fps=8.0)
    Image.fromarray(np.zeros((112, 112, 3), np.uint8)).save(root / "vp.jpg")
    video = str(root / "v.mp4")
    turns = [
        Turn("user", [Part.video(video, 0, 1), Part.txt("What moves?"), Part.image(str(root / "vp.jpg"))]),
        Turn("assistant", [Part.txt("A red circle moves")], loss=False),
        Turn("user", [Part.video(video, 1, 2), Part.txt("Stop, never mind.")]),
        Turn("assistant", [Part.txt("Okay, I'll stop here.")], loss=True),
    ]
    return Sample("s1", "ovi", turns, "test", "v", (0.0, 2.0))


def test_labels_cover_only_the_trained_assistant_turn(adapter, ovi_like_sample):
    batch = adapter.training_batch([adapter.render(ovi_like_sample, for_generation=False)])
    labels = batch["labels"][0]
    supervised = batch["input_ids"][0][labels != IGNORE_INDEX]
    text = adapter.processor.tokenizer.decode(supervised)
    assert text == "Okay, I'll stop here.<|im_end|>"
    assert batch["video_grid_thw"].shape[0] == 2 and batch["image_grid_thw"].shape[0] == 1


def test_padding_is_never_supervised(adapter, ovi_like_sample):
    short = Sample(
        "s2",
        "ovi",
        [Turn("user", [Part.txt("Hi")]), Turn("assistant", [Part.txt("Yes")], loss=True)],
        "test",
        "x",
        (0.0, 0.0),
    )
    rendered = [adapter.render(s, for_generation=False) for s in (ovi_like_sample, short)]
    batch = adapter.training_batch(rendered)
    pad = batch["attention_mask"] == 0
    assert pad.any() and (batch["labels"][pad] == IGNORE_INDEX).all()
    assert adapter.processor.tokenizer.decode(batch["input_ids"][1][batch["labels"][1] != IGNORE_INDEX]) == (
        "Yes<|im_end|>"
    )


def test_generation_prompt_is_the_training_prompt_up_to_the_answer(adapter, ovi_like_sample):
    train_text = adapter.render(ovi_like_sample, for_generation=False).text
    prompt = adapter.render(ovi_like_sample, for_generation=True).text
    assert prompt.endswith("<|im_start|>assistant\n")
    assert train_text.startswith(prompt)
    assert train_text[len(prompt) :] == "Okay, I'll stop here.<|im_end|>\n"


def test_an_interruption_clip_is_sampled_at_the_historys_frame_rate(adapter, ovi_like_sample, tmp_path):
    long_history = [
        Turn("user", [replace(ovi_like_sample.turns[0].parts[0], end=1.5), Part.txt("What moves?")]),
        *ovi_like_sample.turns[1:],
    ]
    long_history[2] = Turn("user", [Part.video(long_history[2].parts[0].path, 1.5, 1.75), Part.txt("Stop.")])
    sample = replace(ovi_like_sample, turns=long_history)
    rendered = adapter.render(sample, for_generation=False)
    # 4 frames over 1.5 s; 0.25 s at that rate is under one frame: the floor of 2, not 4 again.
    assert [len(video) for video in rendered.videos] == [4, 2]
    batch = adapter.training_batch([rendered])
    assert batch["video_grid_thw"][:, 0].tolist() == [2, 1]  # frames merge in pairs
    fixed = VideoChatAdapter(adapter.processor, adapter.media, adapter.cache, follow_on=False)
    assert [len(video) for video in fixed.render(sample, for_generation=False).videos] == [4, 4]


@pytest.mark.parametrize("follow_on", [True, False])
def test_the_media_check_warms_exactly_the_frames_the_adapter_reads(
    adapter, ovi_like_sample, tmp_path, monkeypatch, follow_on
):
    video = ovi_like_sample.turns[0].parts[0].path
    turns = [  # a 0.25 s interruption clip after 1.5 s: sampled at the history's rate, it has 2 frames
        Turn("user", [Part.video(video, 0, 1.5), Part.txt("What moves?")]),
        ovi_like_sample.turns[1],
        Turn("user", [Part.video(video, 1.5, 1.75), Part.txt("Stop.")]),
        ovi_like_sample.turns[3],
    ]
    sample = replace(ovi_like_sample, turns=turns)
    cache = FrameCache(tmp_path / "cache")
    media.check_media([sample], adapter.media, cache, "t", follow_on=follow_on)

    def no_decoding(*args, **kwargs):
        raise AssertionError("decoded again after the media check")

    monkeypatch.setattr(media, "decode_span", no_decoding)
    reader = VideoChatAdapter(adapter.processor, adapter.media, cache, follow_on=follow_on)
    assert len(reader.render(sample, for_generation=False).videos) == 2
