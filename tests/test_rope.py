"""Qwen-VL multimodal positions: text after a video starts past the video's largest id (models/rope.py),
so a model is trained on the ids it answers with."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core.decoding import MediaSpec
from core.formats.ovi import ovi_row_to_sample
from core.media import FrameCache
from core.video_io import write_mp4
from models.ovi_simulation import prepare_inputs
from models.rope import start_after_vision, use_released_positions

TEXT, VIDEO = 0, 2


def _model(tiny_checkpoint, released: bool):
    """The tiny model as ``load_model`` gives it (released positions), or as the library alone does."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from core.config import ModelConfig
    from models.loading import load_model

    if released:
        model, processor = load_model(ModelConfig(name_or_path=str(tiny_checkpoint)))
    else:
        model = AutoModelForImageTextToText.from_pretrained(tiny_checkpoint)
        processor = AutoProcessor.from_pretrained(tiny_checkpoint)
    return model.eval(), processor


def test_hand_computed_ids_of_text_video_text(tiny_checkpoint):
    """3 text tokens, a video of 4 x 3 x 3 merged patches at 1.5 s per temporal patch, 4 text tokens.
    Temporal ids are tokens_per_second (4) x 1.5 = 6 apart: 3, 9, 15, 21; height and width 3..5. The text
    after the video starts at the largest id + 1 = 22."""
    model, _ = _model(tiny_checkpoint, released=True)
    assert model.config.vision_config.tokens_per_second == 4
    types = torch.tensor([[TEXT] * 3 + [VIDEO] * 36 + [TEXT] * 4])
    ids = torch.where(types == VIDEO, model.config.video_token_id, 5)
    positions, deltas = model.model.get_rope_index(
        ids,
        mm_token_type_ids=types,
        video_grid_thw=torch.tensor([[4, 6, 6]]),
        second_per_grid_ts=torch.tensor([1.5]),
    )
    temporal = [3 + 6 * t for t in range(4) for _ in range(9)]
    height = [3 + h for _ in range(4) for h in range(3) for _ in range(3)]
    width = [3 + w for _ in range(4) for _ in range(3) for w in range(3)]
    after = [22, 23, 24, 25]
    expected = torch.tensor([[0, 1, 2] + axis + after for axis in (temporal, height, width)])
    assert torch.equal(positions[:, 0], expected)
    assert deltas.tolist() == [[26 - 43]]  # largest id + 1 - length: where generate continues


def test_rows_already_following_the_rule_and_padding_are_left_alone():
    # text 0-2, an image at 3 with h, w in 3..5, text from 6: already the released rule
    ids = torch.tensor([0, 1, 2, 3, 3, 4, 4, 6, 7])
    hw = torch.tensor([0, 1, 2, 3, 4, 3, 4, 6, 7])
    row = torch.stack([ids, hw, hw])[:, None]
    types = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 0, 0]])
    positions, deltas = start_after_vision(row, torch.tensor([[-1]]), types)
    assert torch.equal(positions, row) and deltas.tolist() == [[-1]]
    # A left-padded row whose text follows a video too early: pads keep their ids, deltas move with the max.
    t = torch.tensor([1, 1, 0, 1, 2, 2, 6, 6, 4, 5])  # two pads, text, a 2 x 1 x 2 video, text
    h = torch.tensor([1, 1, 0, 1, 2, 2, 2, 2, 4, 5])
    w = torch.tensor([1, 1, 0, 1, 2, 3, 2, 3, 4, 5])
    types = torch.tensor([[0, 0, 0, 0, 2, 2, 2, 2, 0, 0]])
    mask = torch.tensor([[0, 0, 1, 1, 1, 1, 1, 1, 1, 1]])
    positions, deltas = start_after_vision(torch.stack([t, h, w])[:, None], torch.tensor([[-1]]), types, mask)
    assert positions[0, 0].tolist() == [1, 1, 0, 1, 2, 2, 6, 6, 7, 8]
    assert positions[1, 0].tolist() == [1, 1, 0, 1, 2, 2, 2, 2, 7, 8]
    assert deltas.tolist() == [[8 + 1 - 8]]


@pytest.fixture(scope="module")
def long_video_sample(tmp_path_factory):
    """An OVIBench item whose 8 frames span 9.5 s: temporal ids run far past the video's spatial extent."""
    from release_rows import ovi_row

    fps, duration = 8.0, 10.0
    root = tmp_path_factory.mktemp("rope")
    frames = np.random.default_rng(0).integers(0, 255, (int(duration * fps), 112, 112, 3), dtype=np.uint8)
    write_mp4(root / "videos" / "v.mp4", frames, fps=fps)
    times = {
        "question_time": 9.5,
        "interruption_time": 10.0,
        "segment": [0.0, duration],
        "duration": duration,
    }
    row = ovi_row(id="late", video_path="videos/v.mp4", interruption_type="Correction", **times)
    return ovi_row_to_sample(row, root)


def _generation_vs_teacher_forcing(model, processor, sample) -> float:
    """Largest gap between the logits ``generate`` picked 6 tokens from and those a teacher-forced forward
    of the prompt + those tokens gives at the same places (what training computes)."""
    from models.chat import VideoChatAdapter

    adapter = VideoChatAdapter(processor, MediaSpec(num_frames=8), FrameCache(None))
    prompt = prepare_inputs(adapter, sample).prefix
    with torch.no_grad():
        out = model.generate(
            **prompt,
            max_new_tokens=6,
            do_sample=False,
            pad_token_id=adapter.pad_id,
            output_logits=True,
            return_dict_in_generate=True,
        )
        length = prompt["input_ids"].shape[1]
        new = out.sequences[:, length:]
        full = dict(prompt)
        full["input_ids"] = out.sequences
        full["attention_mask"] = torch.ones_like(out.sequences)
        full["mm_token_type_ids"] = torch.cat([prompt["mm_token_type_ids"], torch.zeros_like(new)], dim=1)
        forced = model(**full).logits[0, length - 1 : -1]
    generated = torch.cat(out.logits)
    return float((forced - generated).abs().max())


def test_generation_uses_the_ids_training_uses(tiny_checkpoint, long_video_sample):
    model, processor = _model(tiny_checkpoint, released=True)
    assert _generation_vs_teacher_forcing(model, processor, long_video_sample) < 1e-4


def test_the_library_alone_starts_text_inside_the_video(tiny_checkpoint, long_video_sample):
    """Why the wrap exists: the installed get_rope_index starts the question after the video below the
    video's largest id, where the released checkpoints never saw it."""
    from models.chat import VideoChatAdapter

    model, processor = _model(tiny_checkpoint, released=False)
    adapter = VideoChatAdapter(processor, MediaSpec(num_frames=8), FrameCache(None))
    prompt = prepare_inputs(adapter, long_video_sample).prefix
    keys = ("mm_token_type_ids", "video_grid_thw", "second_per_grid_ts", "attention_mask")
    library, _ = model.model.get_rope_index(prompt["input_ids"], **{k: prompt[k] for k in keys})
    use_released_positions(model)
    released, _ = model.model.get_rope_index(prompt["input_ids"], **{k: prompt[k] for k in keys})
    video = prompt["mm_token_type_ids"][0] == VIDEO
    first_after = int(torch.nonzero(video)[-1]) + 1
    assert int(released[0, 0, first_after]) == int(released[:, 0, video].max()) + 1
    if int(library[0, 0, first_after]) == int(released[0, 0, first_after]):
        pytest.skip("the installed transformers already starts text after a video past its largest id")
    assert int(library[0, 0, first_after]) <= int(library[:, 0, video].max())


def test_video_positions_assume_the_official_scripts_rate_unless_asked_otherwise(
    tiny_checkpoint, long_video_sample
):
    """V2P-Bench's official script passes the processor no frame rate, so Qwen2.5-VL's temporal ids are
    spaced as for 2 fps whatever the video (media.position_fps=2.0, the default); position_fps=null spaces
    them by the rate the frames were really sampled at (8 frames of a 10 s question span here)."""
    from transformers import AutoProcessor

    from models.chat import VideoChatAdapter

    processor = AutoProcessor.from_pretrained(tiny_checkpoint)
    patch = processor.video_processor.temporal_patch_size
    seconds = {}
    for position_fps in (2.0, None):
        media = MediaSpec(num_frames=8, position_fps=position_fps)
        adapter = VideoChatAdapter(processor, media, FrameCache(None))
        seconds[position_fps] = (
            prepare_inputs(adapter, long_video_sample).prefix["second_per_grid_ts"].tolist()
        )
    assert seconds[2.0] == [patch / 2.0]
    sampled = seconds[None][0]
    assert sampled != pytest.approx(patch / 2.0) and sampled == pytest.approx(patch / (8 / 9.5), rel=0.2)
    assert MediaSpec(position_fps=None).fingerprint != MediaSpec().fingerprint  # results made again
