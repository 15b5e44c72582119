"""``python -m eval show_prompt=ID``: the exact prompt of one item, rendered as generation renders it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.errors import ConfigError
from eval.show_prompt import show_prompt


def _rows(root: Path, name: str) -> list[dict]:
    return [json.loads(line) for line in (root / name).read_text().splitlines()]


@pytest.fixture
def config(small_eval_config, synthetic_build, tiny_checkpoint, tmp_path):
    return small_eval_config(
        tmp_path,
        f"model.name_or_path={tiny_checkpoint}",
        f"eval.settings.v2p.root={synthetic_build.v2p_bench}",
        f"eval.settings.ovi.root={synthetic_build.ovibench}",
        "eval.benchmarks=[v2p,ovi,v2p_text_prompt]",
    )


def test_a_v2p_prompt_shows_the_text_its_media_and_its_token_count(config, synthetic_build):
    row = _rows(Path(synthetic_build.v2p_bench), "dataset_info.jsonl")[0]
    shown = show_prompt(config, row["id"])
    assert shown.startswith(
        f"# {row['id']} (v2p, family qwen2_5_vl, chat format trained, media {config.media.fingerprint})"
    )
    assert "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n" in shown
    assert row["question"] in shown
    # The official order: the video, the question and options, then the prompt frame.
    assert shown.index("<|video_pad|>") < shown.index(row["question"]) < shown.index("<|image_pad|>")
    assert f"video: {config.media.num_frames} frames of 84x84" in shown and "image: 84x84" in shown
    assert "tokens after the processor: " in shown


def test_a_simulated_ovi_item_shows_both_steps_with_the_models_answer_marked(config, synthetic_build):
    row = next(r for r in _rows(Path(synthetic_build.ovibench), "ovibench.jsonl") if r["format"] == "open")
    shown = show_prompt(config, row["id"])
    first, second = shown.split("## 2. ")
    assert "the paper's offline simulation, in two steps" in first
    assert row["question"] in first and row["partial_answer"] not in first
    assert second.startswith("Its own answer, cut after ")
    assert "<the model's own answer, cut><|im_end|>\n<|im_start|>user\n" in second
    assert row["interruption"] in second and row["partial_answer"] not in second


def test_an_item_is_shown_as_every_benchmark_sees_it_and_an_unknown_id_is_named(config, synthetic_build):
    row = _rows(Path(synthetic_build.v2p_bench), "dataset_info.jsonl")[0]
    both = show_prompt(config, row["id"])  # the text-prompt diagnostic keeps its source's ids
    assert both.index("(v2p, family") < both.index("(v2p_text_prompt, family")
    assert both.count("tokens after the processor: ") == 2
    with pytest.raises(ConfigError, match=r"show_prompt='nope': no such item in v2p \(\d+ items\), ovi"):
        show_prompt(config, "nope")
