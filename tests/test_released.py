"""The five released checkpoints without weights (models/released.py): their architectures built on the meta
device give the released parameter counts, a checkpoint's own config.json wins over the table, and the
visual-token counts from sizes alone (models/visual_tokens.py) equal what the real processor classes, with
the released settings, make of real frames."""

from __future__ import annotations

import json

import numpy as np
import pytest

from core.config import Family, ModelConfig
from core.decoding import MediaSpec, resize_frames, sample_indices, smart_resize
from core.errors import ConfigError
from models.chat import chat_format_for
from models.loading import FamilyMismatch
from models.released import (
    RELEASED,
    architecture_config,
    checkpoint_processor,
    meta_model,
    released_config,
    released_processor,
)
from models.towers import parameters_by_tower
from models.visual_tokens import image_tokens, video_tokens

# Issue 31's figures of the released checkpoints (its released-shapes spec): millions of parameters in all,
# in the vision tower and in the projector. InternVL3's vision tower is 304.0M with InternViT-300M's qkv
# biases (the spec's 303.9M is without them; both totals round to 7,944M).
SPEC_MILLIONS = {
    Family.qwen2_vl: (8291, 631.2, 44.6),
    Family.qwen2_5_vl: (8292, 632.0, 44.6),
    Family.qwen3_vl: (8767, 415.9, 160.5),
    Family.llava_onevision: (8031, 397.7, 17.0),
    Family.internvl: (7944, 304.0, 27.5),
}
# The placeholders (what the vision features replace) of a 720p video at 64 frames under media=qwen_64f,
# and of a 720p and a 1080p visual-prompt frame under its image limits.
SPEC_PLACEHOLDERS = {
    Family.qwen2_vl: (4608, 1196, 2691),
    Family.qwen2_5_vl: (4608, 1196, 2691),
    Family.qwen3_vl: (3584, 920, 2040),
    Family.llava_onevision: (12545, 5967, 7269),
    Family.internvl: (16384, 2304, 2304),
}
QWEN_64F = MediaSpec(num_frames=64, min_pixels=100352, max_pixels=112896, image_min_pixels=200704,
                     image_max_pixels=6422528)  # fmt: skip
HEAD, TAIL = "<|im_start|>user\n", "What colour is the object marked by the box?<|im_end|>\n"


def _released_model_cfg(family: Family) -> ModelConfig:
    return ModelConfig(name_or_path=RELEASED[family].hub_name, family=family)


@pytest.fixture
def empty_hub_cache(tmp_path, monkeypatch):
    """A local hub cache holding nothing (what our machines have)."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    return tmp_path / "hub"


@pytest.mark.parametrize("family", list(Family))
def test_each_released_architecture_builds_on_meta_with_its_released_parameter_count(family, empty_hub_cache):
    config, source = architecture_config(_released_model_cfg(family))
    model = meta_model(config)

    params = list(model.parameters())
    assert all(p.is_meta for p in params)
    assert sum(p.numel() for p in params) == RELEASED[family].parameters
    total, vision, projector = SPEC_MILLIONS[family]
    assert round(RELEASED[family].parameters / 1e6) == total
    towers = {tower.value: sum(p.numel() for _, p in named) for tower, named in
              parameters_by_tower(model.named_parameters(), family).items()}  # fmt: skip
    assert (round(towers["vision"] / 1e6, 1), round(towers["projector"] / 1e6, 1)) == (vision, projector)
    assert source == f"released shape of {RELEASED[family].hub_name} (models/released.py)"


def test_the_released_shapes_carry_what_a_forward_needs():
    qwen25 = architecture_config(_released_model_cfg(Family.qwen2_5_vl))[0]
    assert qwen25.text_config.rope_parameters["mrope_section"] == [16, 24, 24]
    assert (qwen25.video_token_id, qwen25.vision_config.fullatt_block_indexes) == (151656, [7, 15, 23, 31])
    qwen3 = architecture_config(_released_model_cfg(Family.qwen3_vl))[0]
    assert qwen3.text_config.rope_parameters["mrope_interleaved"] is True
    assert qwen3.vision_config.deepstack_visual_indexes == [8, 16, 24]
    llava = architecture_config(_released_model_cfg(Family.llava_onevision))[0]
    assert (len(llava.image_grid_pinpoints), llava.image_grid_pinpoints[-1]) == (36, [2304, 2304])
    internvl = architecture_config(_released_model_cfg(Family.internvl))[0]
    assert (internvl.downsample_ratio, internvl.image_token_id, internvl.tie_word_embeddings) == (
        0.5,
        151667,
        False,
    )


def test_a_checkpoint_directory_with_its_config_wins_over_the_released_shape(tmp_path, monkeypatch):
    from transformers import Qwen2_5_VLConfig

    # A local directory spelled like the hub name: its own config.json is what the run would load.
    monkeypatch.chdir(tmp_path)
    small = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4,
             "num_key_value_heads": 2, "vocab_size": 256}  # fmt: skip
    Qwen2_5_VLConfig(text_config=small).save_pretrained("Qwen/Qwen2.5-VL-7B-Instruct")

    config, source = architecture_config(_released_model_cfg(Family.qwen2_5_vl))

    assert config.text_config.hidden_size == 64
    assert source == "config.json at Qwen/Qwen2.5-VL-7B-Instruct"


def test_a_hub_name_in_the_local_hub_cache_is_read_from_there(empty_hub_cache):
    snapshot = empty_hub_cache / "models--Qwen--Qwen2-VL-7B-Instruct" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (empty_hub_cache / "models--Qwen--Qwen2-VL-7B-Instruct" / "refs").mkdir()
    (empty_hub_cache / "models--Qwen--Qwen2-VL-7B-Instruct" / "refs" / "main").write_text("abc123")
    (snapshot / "config.json").write_text(
        json.dumps({**RELEASED[Family.qwen2_vl].config, "vocab_size": 1000})
    )

    config, source = architecture_config(_released_model_cfg(Family.qwen2_vl))

    assert config.text_config.vocab_size == 1000
    assert source == f"config.json at {snapshot}"


def test_a_path_that_is_neither_a_checkpoint_nor_released_is_one_line_naming_what_is_missing(empty_hub_cache):
    with pytest.raises(ConfigError) as raised:
        architecture_config(ModelConfig(name_or_path="/no/such/checkpoint", family=Family.qwen2_vl))
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("model.name_or_path='/no/such/checkpoint' has no config.json")
    assert (
        "Qwen/Qwen2-VL-7B-Instruct" in message
        and "give a checkpoint directory with its config.json" in message
    )


def test_a_released_hub_name_under_another_family_is_a_family_mismatch(empty_hub_cache):
    cfg = ModelConfig(name_or_path="Qwen/Qwen2-VL-7B-Instruct", family=Family.qwen2_5_vl)
    with pytest.raises(FamilyMismatch, match="set model.family=qwen2_vl"):
        architecture_config(cfg)


def test_a_checkpoint_directory_with_a_processor_gives_its_own_else_the_released_one(
    tmp_path, empty_hub_cache
):
    own = released_processor(Family.qwen2_vl)
    own.image_processor.size = {"shortest_edge": 3136, "longest_edge": 401408}  # not the released cap
    own.save_pretrained(tmp_path)
    released_config(Family.qwen2_vl).save_pretrained(tmp_path)

    processor, source = checkpoint_processor(ModelConfig(name_or_path=str(tmp_path), family=Family.qwen2_vl))
    assert (processor.image_processor.size["longest_edge"], source) == (401408, f"processor at {tmp_path}")

    processor, source = checkpoint_processor(_released_model_cfg(Family.qwen2_vl))
    assert processor.image_processor.size["longest_edge"] == 12845056
    assert source == "released processor of qwen2_vl (models/released.py)"


@pytest.fixture(scope="module")
def frames_720p():
    """64 frames of a 720p synthetic video as media=qwen_64f hands them over (8 rendered, resized, repeated:
    64 frames at 720p would be 177 MB), and its first frame as a visual-prompt image at 720p."""
    from data_builders.synthetic_world import make_scene, render_frames

    raw = render_frames(make_scene("v", np.random.default_rng(0), width=1280, height=720, num_frames=8))
    video = resize_frames(raw, QWEN_64F.min_pixels, QWEN_64F.max_pixels)[np.arange(64) % 8]
    return video, raw[0]


def _input_ids(processor, text: str, **media) -> list[int]:
    return processor(text=[text], return_tensors="pt", **media)["input_ids"][0].tolist()


@pytest.mark.parametrize("family", list(Family))
def test_token_counts_from_sizes_are_what_the_released_processors_make_of_real_frames(family, frames_720p):
    processor, chat = released_processor(family), chat_format_for(family)
    video, raw_image = frames_720p
    # A minute of 30 fps video: Qwen3-VL writes each frame pair's time, up to two digits of seconds.
    indices = sample_indices(1800, 30.0, 0.0, 60.0, QWEN_64F)
    metadata = {"fps": 30.0, "total_num_frames": 1800, "frames_indices": indices}
    image = resize_frames(raw_image[None], QWEN_64F.image_min_pixels, QWEN_64F.image_max_pixels)[0]
    text_alone = len(processor.tokenizer(HEAD + TAIL)["input_ids"])
    # InternVL's video frames are image tiles: one placeholder token for both.
    video_placeholder = processor.image_token_id if family == Family.internvl else processor.video_token_id

    with_video = _input_ids(processor, HEAD + chat.video + TAIL, videos=[video], video_metadata=[metadata],
                            do_sample_frames=False)  # fmt: skip
    with_image = _input_ids(processor, HEAD + chat.image + TAIL, images=[image])

    placeholders = SPEC_PLACEHOLDERS[family]
    assert with_video.count(video_placeholder) == placeholders[0]
    assert with_image.count(processor.image_token_id) == placeholders[1]
    assert len(with_video) - text_alone == video_tokens(
        family, processor, 64, *video.shape[1:3], video_metadata=metadata
    )
    assert len(with_image) - text_alone == image_tokens(family, processor, *image.shape[:2])


@pytest.mark.parametrize("family", list(Family))
def test_a_1080p_image_counts_as_the_released_processor_counts_it(family):
    processor = released_processor(family)
    height, width = smart_resize(1080, 1920, QWEN_64F.image_min_pixels, QWEN_64F.image_max_pixels)
    image = np.zeros((height, width, 3), dtype=np.uint8)

    with_image = _input_ids(processor, HEAD + chat_format_for(family).image + TAIL, images=[image])

    assert with_image.count(processor.image_token_id) == SPEC_PLACEHOLDERS[family][2]
    text_alone = len(processor.tokenizer(HEAD + TAIL)["input_ids"])
    assert len(with_image) - text_alone == image_tokens(family, processor, height, width)


def test_a_qwen3_vl_video_without_metadata_counts_the_times_its_processor_assumes(frames_720p):
    processor, video = released_processor(Family.qwen3_vl), frames_720p[0][:8]
    text_alone = len(processor.tokenizer(HEAD + TAIL)["input_ids"])

    with_video = _input_ids(processor, HEAD + "<|video_pad|>" + TAIL, videos=[video], do_sample_frames=False)

    assert len(with_video) - text_alone == video_tokens(Family.qwen3_vl, processor, 8, *video.shape[1:3])


def test_a_qwen2_vl_video_under_the_per_frame_pixel_cap_counts_its_capped_frames(frames_720p):
    """transformers' own count (``_get_num_multimodal_tokens``) ignores the cap that its resize applies."""
    processor, video = released_processor(Family.qwen2_vl), frames_720p[0][:8]
    processor.video_processor.cap_pixels_per_frame = True
    processor.video_processor.max_video_tokens = 256  # a budget these 8 frames of 252 x 448 exceed
    text_alone = len(processor.tokenizer(HEAD + TAIL)["input_ids"])

    with_video = _input_ids(processor, HEAD + chat_format_for(Family.qwen2_vl).video + TAIL, videos=[video])

    counted = video_tokens(Family.qwen2_vl, processor, 8, *video.shape[1:3])
    assert len(with_video) - text_alone == counted
    assert counted - 2 < processor._get_num_multimodal_tokens(video_sizes=[(8, 252, 448)]).num_video_tokens[0]
