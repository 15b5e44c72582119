"""Packing (``data.packing=true``, models/packing.py): the samples of a batch laid end to end in fewer rows
compute what they compute padded. For every family that packs, on tiny random models with video and image
samples of different lengths: the same loss and gradients (language model, projector, vision tower), each
sample's own 3-D positions, attention that never crosses samples, under SDPA and eager attention. Then the
row grouping, the refusals at resolve time through the composed config, and a short training through the
recipe's Trainer, packed and padded, on the same loss curve."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
from PIL import Image

from core.config import ModelConfig
from core.decoding import MediaSpec
from core.errors import ConfigError
from core.media import FrameCache
from core.sample import Part, Sample, Turn
from core.video_io import write_mp4
from models.chat import IGNORE_INDEX, make_adapter
from models.packing import (
    PACKABLE_FAMILIES,
    PACKED_SAMPLES,
    best_fit_decreasing,
    check_packable,
    pack_batch,
    packed_model_inputs,
    rope_owner,
)
from models.tiny import build_tiny_checkpoint
from models.towers import Tower, tower_of

ATTENTION = ("sdpa", "eager")
LOSS_RTOL = 1e-4
MIN_COSINE = 0.9999


@pytest.fixture(scope="module")
def samples(tmp_path_factory) -> list[Sample]:
    """Six samples of different lengths: two videos and a VP image over two turns, a short video, a long
    video, one image, two images, and text alone."""
    root = tmp_path_factory.mktemp("packing_media")
    frames = np.random.default_rng(0).integers(0, 255, (32, 112, 112, 3), dtype=np.uint8)
    write_mp4(root / "v.mp4", frames, fps=8.0)
    Image.fromarray(frames[0][:, :84]).save(root / "vp.jpg")
    Image.fromarray(frames[3][:56, :112]).save(root / "wide.jpg")
    video, vp, wide = str(root / "v.mp4"), str(root / "vp.jpg"), str(root / "wide.jpg")

    def sample(name: str, *turns: Turn) -> Sample:
        return Sample(name, "ovi", list(turns), "test", "v", (0.0, 4.0))

    return [
        sample(
            "ovi",
            Turn("user", [Part.video(video, 0, 2), Part.txt("What moves?"), Part.image(vp)]),
            Turn("assistant", [Part.txt("A red circle moves")], loss=False),
            Turn("user", [Part.video(video, 2, 3), Part.txt("Stop, never mind.")]),
            Turn("assistant", [Part.txt("Okay, I'll stop here.")], loss=True),
        ),
        sample("short", Turn("user", [Part.video(video, 0, 1), Part.txt("Hi")]), _answer("Yes")),
        sample(
            "image", Turn("user", [Part.image(wide), Part.txt("What colour is the box?")]), _answer("red")
        ),
        sample("text", Turn("user", [Part.txt("How many objects?")]), _answer("two")),
        sample(
            "images", Turn("user", [Part.image(vp), Part.image(wide), Part.txt("Which?")]), _answer("left")
        ),
        sample(
            "long", Turn("user", [Part.video(video, 0, 4), Part.txt("How many objects?")]), _answer("two")
        ),
    ]


def _answer(text: str) -> Turn:
    return Turn("assistant", [Part.txt(text)], loss=True)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """``tiny(family, attention)``: (model, adapter) of the family's tiny checkpoint, loaded as training
    loads it (``load_model``: the released positions wrapper on), fp32, 4 frames a video span."""
    root, loaded = tmp_path_factory.mktemp("packing_models"), {}

    def load(family: str, attention: str = "sdpa", fresh: bool = False):
        """``fresh``: a model of its own, for a test that changes it."""
        if fresh or (family, attention) not in loaded:
            from models.loading import load_model

            path = build_tiny_checkpoint(root / family, family=family)
            cfg = ModelConfig(name_or_path=str(path), family=family, attn_implementation=attention)
            model, processor = load_model(cfg)
            assert model.config._attn_implementation == attention
            adapter = make_adapter(family, processor, MediaSpec(num_frames=4), FrameCache(None))
            if fresh:
                return model.float(), adapter
            loaded[family, attention] = (model.float(), adapter)
        return loaded[family, attention]

    return load


def _batches(adapter, samples, budget=None):
    """(padded batch, packed batch, rendered samples)."""
    rendered = [adapter.render(s, for_generation=False) for s in samples]
    padded = adapter.training_batch(rendered)
    media = [(len(r.images), len(r.videos)) for r in rendered]
    return dict(padded), pack_batch(dict(padded), media, adapter.pad_id, budget), rendered


def _placed(packed: dict, padded: dict) -> list[tuple[int, int, int, int]]:
    """(sample index in the padded batch, row, start, length) of every sample of the packed batch."""
    lengths = padded["attention_mask"].sum(dim=1).tolist()
    out = []
    for row, start, length, *_ in packed[PACKED_SAMPLES].tolist():
        ids = packed["input_ids"][row, start : start + length]
        (index,) = [
            i for i, n in enumerate(lengths) if n == length and torch.equal(padded["input_ids"][i, :n], ids)
        ]
        out.append((index, row, start, length))
    return out


def _loss_and_gradients(model, inputs: dict) -> tuple[float, dict[Tower, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    loss = model(**inputs).loss
    loss.backward()
    family = model.config.model_type
    grads: dict[Tower, list[torch.Tensor]] = {}
    for name, param in model.named_parameters():
        if param.grad is not None:
            grads.setdefault(tower_of(name, family), []).append(param.grad.flatten())
    model.zero_grad(set_to_none=True)
    return float(loss.detach()), {tower: torch.cat(parts) for tower, parts in grads.items()}


@pytest.mark.parametrize("attention", ATTENTION)
@pytest.mark.parametrize("family", PACKABLE_FAMILIES)
def test_packed_loss_and_gradients_equal_the_padded_ones(family, attention, tiny, samples):
    model, adapter = tiny(family, attention)
    model.train()
    padded, packed, _ = _batches(adapter, samples, budget=260)
    rows = packed["input_ids"].shape[0]
    assert rows < len(samples) and packed["input_ids"].numel() < padded["input_ids"].numel()
    by_row = {}
    for row, _, _, images, videos in packed[PACKED_SAMPLES].tolist():
        by_row.setdefault(row, []).append((images, videos))
    assert max(len(v) for v in by_row.values()) >= 3, "a row holds several samples"
    assert any(any(i for i, _ in v) and any(w for _, w in v) for v in by_row.values()), "images and videos"
    # The same supervised tokens, each sample's first token never a target.
    assert (padded["labels"] != IGNORE_INDEX).sum() == (packed["labels"] != IGNORE_INDEX).sum()

    loss, grads = _loss_and_gradients(model, padded)
    packed_loss, packed_grads = _loss_and_gradients(model, packed_model_inputs(model, packed))
    assert packed_loss == pytest.approx(loss, rel=LOSS_RTOL)
    assert set(grads) == set(packed_grads) == set(Tower)
    for tower in Tower:
        cosine = torch.nn.functional.cosine_similarity(grads[tower], packed_grads[tower], dim=0)
        assert cosine > MIN_COSINE, f"{tower}: cosine {float(cosine):.6f}"
        norms = float(packed_grads[tower].norm() / grads[tower].norm())
        assert norms == pytest.approx(1.0, rel=1e-3), f"{tower}: gradient norm ratio {norms}"


@pytest.mark.parametrize("family", PACKABLE_FAMILIES)
def test_each_packed_sample_has_the_positions_it_has_alone(family, tiny, samples):
    model, adapter = tiny(family)
    owner = rope_owner(model)
    assert getattr(owner.get_rope_index, "released_positions", False), "positions as training gives them"
    padded, packed, rendered = _batches(adapter, samples, budget=260)
    positions = packed_model_inputs(model, packed)["position_ids"]
    assert positions.shape == (4, *packed["input_ids"].shape)
    keys = ("mm_token_type_ids", "image_grid_thw", "video_grid_thw", "second_per_grid_ts", "attention_mask")
    placed = _placed(packed, padded)
    assert len(placed) == len(samples) and len({row for _, row, _, _ in placed}) < len(samples)
    for index, row, start, length in placed:
        alone = adapter.training_batch([rendered[index]])
        own, _ = owner.get_rope_index(alone["input_ids"], **{k: alone[k] for k in keys if k in alone})
        span = slice(start, start + length)
        assert torch.equal(positions[1:, row, span], own[:, 0]), samples[index].id
        assert positions[0, row, span].tolist() == list(range(length)), "the text row restarts per sample"


@pytest.mark.parametrize("attention", ATTENTION)
@pytest.mark.parametrize("family", PACKABLE_FAMILIES)
def test_attention_never_crosses_samples(family, attention, tiny, samples):
    """Each packed sample's logits are its padded row's; changing the first sample of a row (its text, or
    its video's pixels) changes its own logits and none of the row's other samples'."""
    model, adapter = tiny(family, attention)
    model.eval()
    padded, packed, _ = _batches(adapter, samples, budget=260)
    placed = _placed(packed, padded)
    with torch.no_grad():
        padded_logits = model(**padded).logits
        logits = model(**packed_model_inputs(model, packed)).logits
    for index, row, start, length in placed:
        torch.testing.assert_close(
            logits[row, start : start + length], padded_logits[index, :length], rtol=1e-4, atol=1e-5
        )
    # The row's first sample, with more samples after it in the same row.
    row = next(r for _, r, _, _ in placed if sum(p[1] == r for p in placed) >= 2)
    first = next(p for p in placed if p[1] == row and p[2] == 0)
    others = [p for p in placed if p[1] == row and p is not first]
    span = slice(0, first[3])
    text = (packed["mm_token_type_ids"][row, span] == 0).nonzero().flatten()
    changed = {key: value.clone() for key, value in packed.items()}
    ids = changed["input_ids"][row, span]
    ids[text[5:-3]] = (ids[text[5:-3]] + 7) % 200 + 10  # ordinary tokens (the specials are 0-6)
    with torch.no_grad():
        after = model(**packed_model_inputs(model, changed)).logits
    assert not torch.allclose(after[row, span], logits[row, span], atol=1e-4), "the change is seen"
    for _, r, start, length in others:
        torch.testing.assert_close(after[r, start : start + length], logits[r, start : start + length])
    # Pixels: the videos of the first placed sample holding any (media follow the samples' placement).
    entries = packed[PACKED_SAMPLES].tolist()
    owner, entry = next((p, e) for p, e in zip(placed, entries, strict=True) if e[4])
    pixel_rows = int(packed["video_grid_thw"][: entry[4]].prod(dim=1).sum())
    changed = {key: value.clone() for key, value in packed.items()}
    changed["pixel_values_videos"][:pixel_rows] += 1.0
    with torch.no_grad():
        after = model(**packed_model_inputs(model, changed)).logits
    for index, r, start, length in placed:
        now, before = after[r, start : start + length], logits[r, start : start + length]
        if (index, r, start, length) == owner:
            assert not torch.allclose(now, before, atol=1e-4), "the change is seen"
        else:
            torch.testing.assert_close(now, before)


def test_best_fit_decreasing_is_deterministic_and_within_budget():
    # Longest first, each into the row it fills most tightly: hand-worked.
    assert best_fit_decreasing([5, 4, 3, 3, 2, 2, 1], 10) == [[0, 1, 6], [2, 3, 4, 5]]
    assert best_fit_decreasing([3, 7, 3], 10) == [[1, 0], [2]]  # equal lengths keep the samples' order
    rng = np.random.default_rng(0)
    for _ in range(50):
        lengths = rng.integers(1, 400, int(rng.integers(1, 24))).tolist()
        budget = int(rng.integers(max(lengths), 1200))
        rows = best_fit_decreasing(lengths, budget)
        assert rows == best_fit_decreasing(list(lengths), budget), "deterministic"
        assert sorted(i for row in rows for i in row) == list(range(len(lengths))), "each sample once"
        assert all(sum(lengths[i] for i in row) <= budget for row in rows)
        # No two rows could be merged: best fit never leaves a row another row's samples fit into whole.
        sums = sorted(sum(lengths[i] for i in row) for row in rows)
        assert len(sums) < 2 or sums[0] + sums[1] > budget


def test_a_sample_over_the_budget_gets_a_row_of_its_own(tiny, samples):
    assert best_fit_decreasing([12, 3, 4, 11], 10) == [[0], [3], [2, 1]]
    _, adapter = tiny("qwen2_5_vl")
    padded, packed, _ = _batches(adapter, samples, budget=60)
    lengths = padded["attention_mask"].sum(dim=1).tolist()
    over = [i for i, n in enumerate(lengths) if n > 60]
    assert over, "the budget is below the longest sample"
    placed = _placed(packed, padded)
    for index in over:
        (row,) = [r for i, r, _, _ in placed if i == index]
        assert [i for i, r, _, _ in placed if r == row] == [index], "alone in its row"
    for row in {r for _, r, _, _ in placed}:
        members = [n for i, r, _, n in placed if r == row]
        assert len(members) == 1 or sum(members) <= 60
    assert packed["input_ids"].shape[1] == max(lengths)


def test_a_samples_last_token_never_learns_to_predict_the_next_sample(tiny):
    """Every token a target (labels = ids): a padded row's first token is never predicted, and no more is
    a packed sample's first, so the loss is the same and nothing is learnt across the seam."""
    model, adapter = tiny("qwen2_5_vl")
    ids = torch.randint(10, 500, (3, 12), generator=torch.Generator().manual_seed(0))
    mask = torch.tensor([[1] * 12, [1] * 5 + [0] * 7, [1] * 7 + [0] * 5])
    ids = ids.masked_fill(mask == 0, adapter.pad_id)
    batch = {
        "input_ids": ids,
        "attention_mask": mask,
        "mm_token_type_ids": torch.zeros_like(ids),
        "labels": ids.masked_fill(mask == 0, IGNORE_INDEX),
    }
    packed = pack_batch(batch, [(0, 0)] * 3, adapter.pad_id)
    assert packed[PACKED_SAMPLES].tolist() == [[0, 0, 12, 0, 0], [1, 0, 7, 0, 0], [1, 7, 5, 0, 0]]
    assert packed["labels"][1, 7] == IGNORE_INDEX and packed["labels"][1, 8] == ids[1, 1]
    with torch.no_grad():
        padded_loss = model(**batch).loss
        packed_loss = model(**packed_model_inputs(model, packed)).loss
    assert float(packed_loss) == pytest.approx(float(padded_loss), rel=LOSS_RTOL)


def test_the_recipes_trainer_takes_the_packing_collators_batches(tiny, samples, tmp_path):
    """``RecipeTrainer.compute_loss`` on ``PackingCollator``'s batch (positions from the model it is given,
    a PEFT wrapper here) gives the padded batch's loss."""
    from core.config import PeftConfig, TrainerConfig
    from train.data import Collator, PackingCollator, SampleDataset
    from train.modes import apply_peft
    from train.recipe import training_arguments
    from train.trainer import RecipeTrainer

    model, adapter = tiny("qwen2_5_vl", fresh=True)
    peft_model = apply_peft(model, PeftConfig(dropout=0.0))
    trainer_cfg = TrainerConfig()
    trainer = RecipeTrainer(
        model=peft_model, args=training_arguments(trainer_cfg, tmp_path), trainer_cfg=trainer_cfg
    )
    dataset = SampleDataset(samples, adapter)
    rendered = [dataset[i] for i in range(len(samples))]
    packed = PackingCollator(Collator(adapter), budget=260)(rendered)
    assert PACKED_SAMPLES in packed and packed["input_ids"].shape[0] < len(samples)
    with torch.no_grad():
        padded_loss = trainer.compute_loss(peft_model, Collator(adapter)(rendered))
        packed_loss = trainer.compute_loss(peft_model, packed)
    assert float(packed_loss) == pytest.approx(float(padded_loss), rel=LOSS_RTOL)


def test_pack_batch_refuses_what_it_cannot_rearrange(tiny, samples):
    _, adapter = tiny("qwen2_5_vl")
    rendered = [adapter.render(s, for_generation=False) for s in samples[:2]]
    batch = dict(adapter.training_batch(rendered))
    media = [(len(r.images), len(r.videos)) for r in rendered]
    with pytest.raises(ValueError, match="no rule to pack the batch's \\['cache_position'\\]"):
        pack_batch({**batch, "cache_position": torch.zeros(3)}, media, adapter.pad_id)
    left = dict(adapter.batch(rendered, padding_side="left"))
    left["labels"] = left["input_ids"].clone()
    with pytest.raises(ValueError, match="right-padded"):
        pack_batch(left, media, adapter.pad_id)


# -- refused at resolve time, through the composed config ----------------------------------------------


@pytest.mark.parametrize("family", ["llava_onevision", "internvl"])
def test_a_family_that_cannot_pack_is_refused_at_resolve(family, compose, tmp_path):
    from train.recipe import resolve

    cfg = compose("train", f"output_root={tmp_path}", f"model=tiny_{family}", "data.packing=true")
    with pytest.raises(ConfigError, match=f"model.family={family} cannot pack"):
        resolve(cfg)
    assert not (tmp_path / "data").exists(), "refused before any data was built"
    with pytest.raises(ConfigError, match="cannot pack"):
        check_packable(family, "sdpa")


@pytest.mark.parametrize("attention", ["flash_attention_2", "flex_attention"])
def test_an_attention_that_cannot_keep_samples_apart_is_refused_at_resolve(attention, compose, tmp_path):
    from train.recipe import resolve

    cfg = compose(
        "train", f"output_root={tmp_path}", f"model.attn_implementation={attention}", "data.packing=true"
    )
    with pytest.raises(ConfigError, match=f"attn_implementation={attention} cannot keep packed samples"):
        resolve(cfg)
    assert not (tmp_path / "data").exists()
    cfg = compose("train", f"output_root={tmp_path}", "data.packing=true", "data.pack_tokens=0")
    with pytest.raises(ConfigError, match="data.pack_tokens=0"):
        resolve(cfg)


@pytest.mark.parametrize(
    ("exp", "method"), [("quickstart_dpo", "dpo"), ("quickstart_kto", "kto"), ("quickstart_grpo", "grpo")]
)
def test_preference_and_rl_stages_refuse_packing_with_their_reason(exp, method, compose, tmp_path):
    from train.recipe import METHODS, resolve

    reason = METHODS[method].cannot_pack
    assert reason and METHODS["sft"].cannot_pack is None
    cfg = compose("train", f"+exp={exp}", f"output_root={tmp_path}", "data.packing=true")
    assert cfg.stage.method == method
    with pytest.raises(ConfigError, match=f"stage.method={method} cannot pack: {re.escape(reason)}"):
        resolve(cfg)
    assert not (tmp_path / "data").exists()


# -- a short training through the recipe's Trainer ------------------------------------------------------

STEPS = 30


@pytest.mark.slow
def test_a_packed_training_follows_the_padded_loss_curve(small_train_config, tmp_path, monkeypatch):
    """The quickstart at test size (LoRA dropout off, so both runs draw nothing random per step), 30 steps
    of 4 through ``python -m train``'s own path: the same loss at every step, within 1e-4 (Adam's update
    divides by each gradient's own size, so float-rounding differences of ~1e-7 grow over the steps), and
    the packed run's batches really packed."""
    from train import data
    from train.recipe import train

    calls = []
    pack = data.pack_batch

    def counted(batch, *args, **kwargs):
        packed = pack(batch, *args, **kwargs)
        calls.append((batch["input_ids"].numel(), packed["input_ids"].numel()))
        return packed

    monkeypatch.setattr(data, "pack_batch", counted)
    losses = {}
    for packing in (False, True):
        cfg = small_train_config(
            tmp_path, f"run_name=packing_{packing}", f"data.packing={packing}", f"trainer.max_steps={STEPS}",
            f"trainer.save_steps={STEPS}", "trainer.logging_steps=1", "eval=none", "logger=none",
            "peft.dropout=0.0",
        )  # fmt: skip
        train(cfg)
        state = tmp_path / f"packing_{packing}" / "checkpoints" / f"checkpoint-{STEPS}" / "trainer_state.json"
        losses[packing] = [e["loss"] for e in json.loads(state.read_text())["log_history"] if "loss" in e]
        assert bool(calls) == packing, "only the packed run packs"
    assert len(calls) >= STEPS and sum(p for _, p in calls) < sum(u for u, _ in calls), "fewer token slots"
    assert len(losses[True]) == len(losses[False]) == STEPS
    assert losses[False][-1] < losses[False][0] - 0.5, "the run learns"
    for step, (padded, packed) in enumerate(zip(losses[False], losses[True], strict=True), start=1):
        assert packed == pytest.approx(padded, rel=1e-4), f"step {step}"
    worst = max(abs(p - u) / u for u, p in zip(losses[False], losses[True], strict=True))
    print(f"largest relative loss difference over {STEPS} steps: {worst:.1e}")
