"""Every model family: tiny checkpoint, labels on trained text only, one prompt for training and generation,
and a LoRA run through the recipe with both benchmarks evaluated before and after."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from paths import CONF
from PIL import Image

from core.config import ModelConfig
from core.decoding import MediaSpec
from core.errors import ConfigError
from core.media import FrameCache
from core.sample import Part, Sample, Turn
from core.video_io import write_mp4
from models.chat import CHAT_FORMATS, IGNORE_INDEX, RELEASED_CHAT_FORMATS, chat_format_for, make_adapter
from models.tiny import FAMILIES, build_tiny_checkpoint

ANSWER = "Okay, I'll stop here."


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """family → tiny checkpoint directory, built on first use."""
    root = tmp_path_factory.mktemp("family_models")
    return lambda family: build_tiny_checkpoint(root / family, family=family)


@pytest.fixture(scope="module")
def adapters(checkpoints, tmp_path_factory):
    from transformers import AutoProcessor

    cache = FrameCache(tmp_path_factory.mktemp("cache"))
    media = MediaSpec(num_frames=4)

    def adapter(family: str, chat_format: str = "trained"):
        return make_adapter(
            family, AutoProcessor.from_pretrained(checkpoints(family)), media, cache, chat_format
        )

    return adapter


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    """An OVI-like sample (video, question, VP image → partial answer without loss → more video and an
    interruption → reaction with loss) and a short one, so a batch has padding."""
    root = tmp_path_factory.mktemp("media")
    frames = np.random.default_rng(0).integers(0, 255, (16, 112, 112, 3), dtype=np.uint8)
    write_mp4(root / "v.mp4", frames, fps=8.0)
    Image.fromarray(frames[0][:, :84]).save(root / "vp.jpg")
    video = str(root / "v.mp4")
    turns = [
        Turn("user", [Part.video(video, 0, 1), Part.txt("What moves?"), Part.image(str(root / "vp.jpg"))]),
        Turn("assistant", [Part.txt("A red circle moves")], loss=False),
        Turn("user", [Part.video(video, 1, 2), Part.txt("Stop, never mind.")]),
        Turn("assistant", [Part.txt(ANSWER)], loss=True),
    ]
    short = [
        Turn("user", [Part.video(video, 0, 2), Part.txt("Hi")]),
        Turn("assistant", [Part.txt("Yes")], loss=True),
    ]
    return [
        Sample("ovi", "ovi", turns, "test", "v", (0.0, 2.0)),
        Sample("short", "ovi", short, "test", "v", (0.0, 2.0)),
    ]


# Every family as trained, and each family whose released chat template writes prompts otherwise.
FORMATS = [(family, "trained") for family in FAMILIES] + [
    (family, "released") for family in RELEASED_CHAT_FORMATS
]


@pytest.mark.parametrize(("family", "chat_format"), FORMATS)
def test_labels_cover_exactly_the_trained_assistant_text(family, chat_format, adapters, samples):
    adapter = adapters(family, chat_format)
    batch = adapter.training_batch([adapter.render(s, for_generation=False) for s in samples])
    rows = zip(batch["input_ids"], batch["labels"], strict=True)
    supervised = [adapter.processor.tokenizer.decode(ids[labels != IGNORE_INDEX]) for ids, labels in rows]
    assert supervised == [f"{ANSWER}<|im_end|>", "Yes<|im_end|>"]
    pad = batch["attention_mask"] == 0
    assert pad.any() and (batch["labels"][pad] == IGNORE_INDEX).all()
    # The processor expanded every placeholder into vision tokens and returned the pixels.
    assert any(key.startswith("pixel_values") for key in batch)
    assert len(batch["input_ids"][0]) > 100


@pytest.mark.parametrize("family", FAMILIES)
def test_generation_prompt_is_the_training_text_up_to_the_answer(family, adapters, samples):
    adapter = adapters(family)
    train_text = adapter.render(samples[0], for_generation=False).text
    prompt = adapter.render(samples[0], for_generation=True).text
    assert prompt.endswith("<|im_start|>assistant\n")
    assert train_text[len(prompt) :] == f"{ANSWER}<|im_end|>\n" and train_text.startswith(prompt)
    assert prompt.count(CHAT_FORMATS[family].video) == 2 and prompt.count(CHAT_FORMATS[family].image) == 1


REAL_CHECKPOINTS = {
    "qwen2_vl_7b": "Qwen/Qwen2-VL-7B-Instruct",
    "qwen2_5_vl_7b": "Qwen/Qwen2.5-VL-7B-Instruct",
    "qwen3_vl_8b": "Qwen/Qwen3-VL-8B-Instruct",
    "llava_onevision_7b": "llava-hf/llava-onevision-qwen2-7b-ov-hf",
    "internvl_8b": "OpenGVLab/InternVL3-8B-hf",
}


def test_every_family_has_a_chat_format_a_tiny_config_and_a_real_config():
    assert set(CHAT_FORMATS) == set(FAMILIES)
    for family in FAMILIES:
        assert (CONF / "model" / f"tiny_{family}.yaml").exists()
        assert any(name.startswith(f"{family}_") for name in REAL_CHECKPOINTS)


@pytest.mark.parametrize("name", sorted(p.stem for p in (CONF / "model").glob("*.yaml")))
def test_every_model_config_names_its_family(compose, name):
    model = compose("train", f"model={name}").model
    if name.startswith("standin_"):  # the stand-in base model: pretrained (committed), and its random start
        assert model.family == "qwen2_5_vl" and model.tiny == (name == "standin_init")
    elif model.tiny:
        assert name == f"tiny_{model.family}"
    else:
        assert model.name_or_path == REAL_CHECKPOINTS[name] and name.startswith(f"{model.family}_")
    assert model.family in CHAT_FORMATS


def test_the_released_chat_template_is_the_trained_format_for_all_but_llava_onevision():
    assert set(RELEASED_CHAT_FORMATS) == {"llava_onevision"}
    for family in set(FAMILIES) - {"llava_onevision"}:
        assert (
            chat_format_for(family, "released") == chat_format_for(family, "trained") == CHAT_FORMATS[family]
        )
    # Stored predictions of one llava_onevision format are not taken for the other's.
    trained, released = (chat_format_for("llava_onevision", variant) for variant in ("trained", "released"))
    assert released != trained and released.fingerprint != trained.fingerprint


def test_llava_onevision_released_has_no_system_turn_and_puts_a_turns_media_before_its_text(
    adapters, samples
):
    """As llava-hf/llava-onevision-qwen2-*-ov-hf's chat template writes it: "<image>\\n" per image, then
    "<video>\\n" per video, then the text; no system turn."""
    released = adapters("llava_onevision", "released").render(samples[0], for_generation=True).text
    assert released == (
        "<|im_start|>user\n<image>\n<video>\nWhat moves?<|im_end|>\n"
        "<|im_start|>assistant\nA red circle moves<|im_end|>\n"
        "<|im_start|>user\n<video>\nStop, never mind.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    trained = adapters("llava_onevision").render(samples[0], for_generation=True).text
    assert trained.startswith("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n")
    assert "<|im_start|>user\n<video>\nWhat moves?<image>\n<|im_end|>" in trained


def test_a_misspelt_chat_format_fails_when_composed_or_asked_for(compose):
    from hydra.errors import ConfigCompositionException

    assert compose("train", "model=tiny_llava_onevision").model.chat_format == "trained"
    assert compose("eval", "model.chat_format=released").model.chat_format == "released"
    with pytest.raises(ConfigCompositionException, match="chat_format"):
        compose("train", "model.chat_format=relesed")
    with pytest.raises(ConfigError, match="model.chat_format='relesed'"):
        make_adapter("qwen2_vl", None, MediaSpec(), FrameCache(None), "relesed")


def test_unknown_family_and_a_family_that_is_not_the_checkpoints_fail_clearly(checkpoints):
    from models.loading import FamilyMismatch, load_model

    with pytest.raises(ConfigError, match="model.family='qwen4'"):
        make_adapter("qwen4", None, MediaSpec(), FrameCache(None))
    with pytest.raises(ConfigError, match="needs media.num_frames"):
        make_adapter("internvl", None, MediaSpec(num_frames=None, fps=1.0), FrameCache(None))
    with pytest.raises(FamilyMismatch, match="set model.family=qwen2_vl"):
        load_model(ModelConfig(name_or_path=str(checkpoints("qwen2_vl")), family="qwen3_vl"))


def _tiny_run_config(compose, output_root: Path, family: str):
    """The quickstart cut to the bone: 2 LoRA steps, one save, 2 items per benchmark."""
    return compose(
        "train",
        *[
            "+exp=quickstart",
            f"model=tiny_{family}",
            f"output_root={output_root}",
            f"run_name={family}",
            "trainer.max_steps=2",
            "trainer.save_steps=2",
            "trainer.batch_size=2",
            "trainer.logging_steps=1",
            "data.synthetic.train_videos=2",
            "data.synthetic.eval_videos=2",
            "data.synthetic.vp_questions_per_video=1",
            "eval.limit=2",
            "eval.settings.ovi.max_new_tokens_open=8",
            "logger.wandb=false",
        ],
    )


def _eval_config(compose, train_cfg, checkpoint: Path):
    """``python -m eval`` of a saved checkpoint: the training run's base, media and benchmarks."""
    return compose(
        "eval",
        f"checkpoint={checkpoint}",
        f"output_root={Path(train_cfg.run_dir) / 'standalone_eval'}",
        "data.build_synthetic=false",
        "eval.limit=2",
        "eval.settings.ovi.max_new_tokens_open=8",
        "eval.results_cache=null",  # generated again, not copied: the comparison below means something
        f"media.max_pixels={train_cfg.media.max_pixels}",
        f"media.image_max_pixels={train_cfg.media.image_max_pixels}",
    )


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory):
    """One output root for every family's run: the synthetic build and the frame cache are shared."""
    return tmp_path_factory.mktemp("family_runs")


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_lora_steps_through_the_recipe_then_both_benchmarks(compose, family, runs_root):
    from eval.run import run as run_eval
    from train.recipe import train

    cfg = _tiny_run_config(compose, runs_root, family)
    result = train(cfg)
    summary = json.loads((Path(cfg.run_dir) / "summary.json").read_text())
    assert summary == result.summary
    assert [c["name"] for c in summary["checkpoints"]] == ["checkpoint-2"]
    for bench, metric in (("v2p", "accuracy"), ("ovi", "ca")):
        point = summary["benchmarks"][bench]["metrics"][metric]["checkpoints"]["checkpoint-2"]
        assert 0.0 <= point["value"] <= 1.0
    trainable = [n for n, p in result.model.named_parameters() if p.requires_grad]
    assert any("lora_A" in n for n in trainable)
    log = json.loads((Path(cfg.run_dir) / "checkpoints" / "checkpoint-2" / "trainer_state.json").read_text())
    assert all(np.isfinite(entry["loss"]) for entry in log["log_history"] if "loss" in entry)

    # python -m eval on the saved checkpoint renders the same prompts: the same greedy answers.
    checkpoint = Path(cfg.run_dir) / "checkpoints" / "checkpoint-2"
    eval_cfg = _eval_config(compose, cfg, checkpoint)
    run_eval(eval_cfg)
    for bench in ("v2p", "ovi"):
        during = Path(cfg.run_dir, "eval", "checkpoint-2", f"{bench}.jsonl").read_text().splitlines()
        after = Path(eval_cfg.run_dir, "eval", "checkpoint-2", f"{bench}.jsonl").read_text().splitlines()
        assert [json.loads(x)["prediction"] for x in during] == [json.loads(x)["prediction"] for x in after]


# --- rendered-prompt snapshots: a change to a family's chat format shows in a diff -----------------------

SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"
V2P_QUESTION = (
    "What is the object marked by the box doing?\nA: running\nB: sitting\nC: eating\nD: sleeping\n"
    "Select the best option that accurately addresses the question. "
    "Give only your option letter, no other words."
)


def _conversations(samples) -> dict[str, tuple[Sample, bool]]:
    """name -> (sample, for_generation): a V2P item, a multi-target V2P item (three VP frames), and the
    four-turn OVI conversation as trained and as asked for its reaction."""
    ovi = samples[0]
    video, _, image = ovi.turns[0].parts
    v2p = [
        Turn("user", [video, Part.txt(V2P_QUESTION), image]),
        Turn("assistant", [Part.txt("B")], loss=True),
    ]
    several = [Turn("user", [video, Part.txt(V2P_QUESTION), image, image, image]), v2p[1]]
    return {
        "v2p, official order (video, question, VP frame): generation prompt": (
            Sample("v2p", "v2p", v2p, "test", "v", (0.0, 2.0)),
            True,
        ),
        "v2p with three VP frames: generation prompt": (
            Sample("v2p3", "v2p", several, "test", "v", (0.0, 2.0)),
            True,
        ),
        "ovi, four turns: training text (loss on the reaction only)": (ovi, False),
        "ovi, four turns: generation prompt of the reaction": (ovi, True),
    }


def render_snapshot(adapter, samples) -> str:
    parts = []
    for title, (sample, for_generation) in _conversations(samples).items():
        rendered = adapter.render(sample, for_generation=for_generation)
        tokens = adapter.batch([rendered], padding_side="left")["input_ids"].shape[1]
        parts.append(f"### {title} ({tokens} tokens after the processor)\n{rendered.text}")
    return "\n".join(parts)


@pytest.mark.parametrize(("family", "chat_format"), FORMATS)
def test_rendered_prompts_match_their_snapshot(family, chat_format, adapters, samples):
    """``UPDATE_SNAPSHOTS=1 pytest tests/test_model_families.py -k snapshot`` rewrites them after a deliberate
    change (and bump models.chat.RENDER_VERSION if the change is in the code, not in a ChatFormat)."""
    import os

    rendered = render_snapshot(adapters(family, chat_format), samples)
    path = SNAPSHOTS / (
        f"prompt_{family}.txt" if chat_format == "trained" else f"prompt_{family}_{chat_format}.txt"
    )
    if os.environ.get("UPDATE_SNAPSHOTS") == "1":
        path.parent.mkdir(exist_ok=True)
        path.write_text(rendered)
    assert path.exists(), f"no snapshot {path.name}: run with UPDATE_SNAPSHOTS=1 once"
    assert rendered == path.read_text(), f"the rendered prompts of {family} changed: see the diff"
