"""The plan's parts that need no model: the ZeRO formula, media headers, token percentiles."""

from __future__ import annotations

import numpy as np
import pytest

from core.config import PeftMethod, TrainerConfig
from core.decoding import MediaSpec, decode_clip
from core.sample import Part, Sample, Turn
from core.video_io import write_mp4
from models.chat import chat_format_for
from train.deepspeed import ZERO2_BUCKET, deepspeed_config
from train.model_states import ParameterCounts, model_states
from train.plan import verdict
from train.plan_inputs import TokenCounter, percentiles, video_header

QWEN25_7B = 8_292_166_656
LORA_R64 = 161_480_704
LM_HEAD = 544_997_376


@pytest.mark.parametrize("gpus", [1, 8, 16])
def test_full_fine_tuning_under_zero2_is_deepspeeds_own_estimate(gpus):
    """Where DeepSpeed's estimator is right (every parameter trained), the formula is exactly it."""
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    _, expected = estimate_zero2_model_states_mem_needs(QWEN25_7B, gpus, 1, cpu_offload=False)
    states = model_states(
        ParameterCounts(QWEN25_7B, QWEN25_7B, LM_HEAD), TrainerConfig(zero=2), PeftMethod.full, gpus
    )
    assert states.weights + states.gradients_and_optimizer == pytest.approx(expected, abs=1)


@pytest.mark.parametrize("gpus", [1, 8])
def test_full_fine_tuning_under_zero3_is_deepspeeds_own_estimate_plus_its_prefetch(gpus):
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs

    _, expected, largest = estimate_zero3_model_states_mem_needs(
        QWEN25_7B, LM_HEAD, gpus, 1, cpu_offload=False, cpu_offload_params=False
    )
    zero = deepspeed_config(TrainerConfig(zero=3))["zero_optimization"]
    params = ParameterCounts(QWEN25_7B, QWEN25_7B, LM_HEAD)
    states = model_states(params, TrainerConfig(zero=3), PeftMethod.full, gpus, zero)
    prefetch = 2 * int(5e7)  # DeepSpeed's default stage3_prefetch_bucket_size, which we leave as it is
    assert states.total == pytest.approx(expected + prefetch, abs=2)
    assert states.buffers == largest + prefetch


def test_lora_under_zero2_prices_only_the_adapters_as_trained():
    """DeepSpeed's estimator would charge 18 B for all 8.3B parameters (a LoRA run priced as full)."""
    zero = deepspeed_config(TrainerConfig(zero=2))["zero_optimization"]
    params = ParameterCounts(QWEN25_7B + LORA_R64, LORA_R64, LM_HEAD)
    states = model_states(params, TrainerConfig(zero=2), PeftMethod.lora, 8, zero)
    assert states.weights == 2 * (QWEN25_7B + LORA_R64)
    assert states.gradients_and_optimizer == 18 * LORA_R64 // 8
    assert states.buffers == 2 * 2 * ZERO2_BUCKET
    assert states.total / 1024**3 == pytest.approx(16.83, abs=0.005)  # DeepSpeed's: 32.8 (all trained)


def test_zero2_buckets_are_set_below_deepspeeds_default_and_above_a_lora_r64_run():
    zero = deepspeed_config(TrainerConfig(zero=2))["zero_optimization"]
    assert zero["reduce_bucket_size"] == zero["allgather_bucket_size"] == ZERO2_BUCKET
    assert 175_000_000 < ZERO2_BUCKET < 5e8  # Qwen3-VL-8B's LoRA r64 trains 174.6M: one reduce a step


@pytest.mark.parametrize(
    ("gib", "expected"), [(70, "fits"), (72, "fits"), (75, "tight"), (80, "tight"), (80.5, "oom")]
)
def test_verdict_keeps_a_tenth_for_fragmentation(gib, expected):
    assert verdict(int(gib * 1024**3), 80) == expected


def test_percentiles_are_values_some_sample_has():
    assert percentiles(list(range(1, 101))) == {"min": 1, "p50": 50, "p95": 95, "max": 100}
    assert percentiles([7]) == {"min": 7, "p50": 7, "p95": 7, "max": 7}
    assert percentiles([]) == {}


def test_video_header_gives_what_decoding_finds(tmp_path):
    frames = np.zeros((20, 96, 160, 3), np.uint8)
    path = tmp_path / "v.mp4"
    write_mp4(path, frames, fps=10.0)
    header = video_header(str(path))
    assert (header.height, header.width, header.fps, header.frames) == (96, 160, 10.0, 20)


def _sample(sample_id: str, video: str, image: str) -> Sample:
    user = Turn("user", [Part.video(video, 0.0, 2.0), Part.txt("What is marked?"), Part.image(image)])
    return Sample(sample_id, "v2p", [user, Turn("assistant", [Part.txt("A")], loss=True)], "s", "s", (0, 2))


def test_token_counts_follow_decode_and_name_unreadable_files(tmp_path):
    from PIL import Image

    frames = np.zeros((20, 96, 160, 3), np.uint8)
    write_mp4(tmp_path / "v.mp4", frames, fps=10.0)
    Image.new("RGB", (320, 240)).save(tmp_path / "p.png")
    (tmp_path / "broken.mp4").write_bytes(b"not a video")
    spec = MediaSpec(num_frames=4, max_pixels=56 * 56)
    chat = chat_format_for("qwen2_5_vl")
    counter = TokenCounter(spec, lambda t, h, w: t * h * w, lambda h, w: h * w, chat, None, follow_on=True)
    good = _sample("good", str(tmp_path / "v.mp4"), str(tmp_path / "p.png"))
    bad = _sample("bad", str(tmp_path / "broken.mp4"), str(tmp_path / "p.png"))
    counts = counter.count([good, bad, bad])
    assert [s.sample_id for s in counts.samples] == ["good"]
    assert counts.skipped_samples == 2
    assert list(counts.unreadable) == [str(tmp_path / "broken.mp4")]
    decoded = decode_clip(str(tmp_path / "v.mp4"), 0.0, 2.0, spec).frames
    assert counts.samples[0].video_frames == [decoded.shape[:3]]
