"""OVIBench's offline interruption simulation on the tiny model: the cut, the appended turn with the second
video span, key/value-cache continuation against a full re-run (identical token ids), and a simulated
evaluation end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from core.decoding import MediaSpec
from core.formats.ovi import ovi_row_to_sample, write_ovibench
from core.media import FrameCache
from core.video_io import write_mp4
from models import cached_decoder, ovi_simulation
from models.ovi_simulation import MIN_CUT_TOKENS, interruption_cut, prepare_inputs, simulate_interruption

FPS, DURATION = 8.0, 10.0
REACTION_TOKENS = 12
# (id, type, t_q, t_i): 3 s after t_q is 9 answer tokens at 3 tokens/s; the last item is interrupted the
# moment it is asked (cut after the first 3 tokens all the same, no new frames).
ITEMS = [
    ("corr", "Correction", 4.0, 7.0),
    ("canc", "Cancellation", 2.5, 4.0),
    ("false", "False Trigger", 6.0, 9.4),
    ("now", "Correction", 5.0, 5.0),
]


def _row(item_id: str, kind: str, t_q: float, t_i: float, fmt: str = "open") -> dict:
    row = {
        "id": item_id,
        "video_path": "videos/v.mp4",
        "duration": DURATION,
        "source": "test",
        "source_id": "v",
        "segment": [0.0, DURATION],
        "question_time": t_q,
        "question": "What happens in the video?",
        "answer": "a red circle appears and moves to the right.",
        "interruption_time": t_i,
        "partial_answer": "a red circle",
        "interruption_type": kind,
        "interruption": {"Correction": "Sorry, I meant the", "Cancellation": "Stop, never mind."}.get(
            kind, "Uh-huh."
        ),
        "reference_reaction": "Okay, I'll stop here.",
        "format": fmt,
    }
    if fmt == "mcq":
        row["options"] = ["Okay, I'll stop here.", "a blue square enters.", "the green triangle", "Uh-huh."]
        row["answer_letter"] = "A"
    return row


@pytest.fixture(scope="module")
def ovi_root(tmp_path_factory):
    """An OVIBench directory: one noise video (every frame differs, so spans are told apart)."""
    root = tmp_path_factory.mktemp("ovibench")
    frames = np.random.default_rng(0).integers(0, 255, (int(DURATION * FPS), 112, 112, 3), dtype=np.uint8)
    write_mp4(root / "videos" / "v.mp4", frames, fps=FPS)
    return root


@pytest.fixture(scope="module")
def samples(ovi_root):
    return {item[0]: ovi_row_to_sample(_row(*item), ovi_root) for item in ITEMS}


@pytest.fixture(scope="module")
def tiny(tiny_checkpoint):
    """The tiny model in eval mode and its adapter (4 frames per span within 84x84)."""
    from core.config import ModelConfig
    from models.chat import VideoChatAdapter
    from models.loading import load_model

    model, processor = load_model(ModelConfig(name_or_path=str(tiny_checkpoint)))
    model.eval()
    return model, VideoChatAdapter(processor, MediaSpec(num_frames=4), FrameCache(None))


def _both(tiny, sample, reset=lambda: None, **kwargs):
    """The simulation continued from the cache, then re-run from scratch (``reset`` runs in between)."""
    model, adapter = tiny
    kwargs = {"max_new_tokens": REACTION_TOKENS, **kwargs}
    cached = simulate_interruption(model, adapter, sample, continue_from_cache=True, **kwargs)
    reset()
    rerun = simulate_interruption(model, adapter, sample, continue_from_cache=False, **kwargs)
    return cached, rerun


def _decode_logits(monkeypatch) -> list[torch.Tensor]:
    """From now on, the logits every greedy decoding starts from (two per simulation: answer, reaction)."""
    seen: list[torch.Tensor] = []
    decode = cached_decoder.CachedDecoder.decode

    def keep(self, logits, limit, synced=False):
        seen.append(logits.clone())
        return decode(self, logits, limit, synced)

    monkeypatch.setattr(cached_decoder.CachedDecoder, "decode", keep)
    return seen


def _first_reaction_logits(tiny, sample, monkeypatch, **kwargs) -> torch.Tensor:
    """The logits the reaction's first token is chosen from."""
    with monkeypatch.context() as patch:
        seen = _decode_logits(patch)
        model, adapter = tiny
        simulate_interruption(model, adapter, sample, max_new_tokens=1, **kwargs)
    return seen[-1]


def _assert_same_continuation(tiny, sample, monkeypatch, **cut) -> None:
    """Identical token ids both ways, and logits that differ by float32 rounding only: the tiny random
    model's greedy choices are robust enough to hide a wrong position, its logits are not."""
    with monkeypatch.context() as patch:
        seen = _decode_logits(patch)
        cached, rerun = _both(tiny, sample, **cut)
    assert cached.answer_ids and cached.answer_ids == rerun.answer_ids, sample.id
    assert len(cached.reaction_ids) == REACTION_TOKENS, f"{sample.id}: a reaction to compare"
    assert cached.reaction_ids == rerun.reaction_ids, sample.id
    assert (cached.truncated_answer, cached.reaction) == (rerun.truncated_answer, rerun.reaction)
    assert (seen[1] - seen[3]).abs().max() < 1e-5, sample.id
    # The cache encodes the appended turn and the answer's last (sampled, unfed) token; the re-run all.
    assert cached.encoded_tokens == cached.appended_tokens + (0 if cached.answer_finished else 1)
    assert rerun.encoded_tokens == cached.prompt_tokens + len(cached.answer_ids) + cached.appended_tokens


# ---------------------------------------------------------------------------------------------------
# The interruption point


def test_interruption_time_maps_to_tokens_at_the_speaking_rate(samples):
    assert interruption_cut(samples["corr"]) == 9  # (7 - 4) s x 3 tokens/s
    assert interruption_cut(samples["canc"]) == 4  # 1.5 s x 3 = 4.5: the tokens fully spoken by t_i
    assert interruption_cut(samples["false"], tokens_per_second=2.5) == 8  # 3.4 x 2.5 = 8.5
    assert interruption_cut(samples["now"]) == MIN_CUT_TOKENS  # never cut before 3 tokens
    assert interruption_cut(samples["corr"], cut_tokens=5) == 5  # a fixed offset overrides the time
    with pytest.raises(ValueError, match="cut_tokens"):
        interruption_cut(samples["corr"], cut_tokens=-1)
    with pytest.raises(ValueError, match="tokens_per_second"):
        interruption_cut(samples["corr"], tokens_per_second=0)


def test_floating_point_times_do_not_lose_a_token(ovi_root):
    # (4.1 - 1.1) x 3 = 8.999999999999998 and (5.1 - 4.8) x 20 = 5.999999999999996: 9 and 6 tokens.
    assert interruption_cut(ovi_row_to_sample(_row("a", "Correction", 1.1, 4.1), ovi_root)) == 9
    assert interruption_cut(ovi_row_to_sample(_row("b", "Correction", 4.8, 5.1), ovi_root), None, 20.0) == 6


@pytest.mark.parametrize("cut", [{"cut_tokens": 5}, {"tokens_per_second": 3.0}], ids=["tokens", "time"])
def test_the_answer_is_cut_where_configured(tiny, samples, cut):
    model, adapter = tiny
    sample = samples["corr"]
    uncut = simulate_interruption(model, adapter, sample, cut_tokens=64, max_new_tokens=1)
    result = simulate_interruption(model, adapter, sample, max_new_tokens=1, **cut)
    expected = 5 if "cut_tokens" in cut else 9
    assert result.cut_tokens == expected
    # The model's own greedy answer, up to the cut (the tiny model does not end its answer this early).
    assert len(uncut.answer_ids) > expected and not result.answer_finished
    assert result.answer_ids == uncut.answer_ids[:expected]
    assert result.truncated_answer == adapter.processor.tokenizer.decode(
        result.answer_ids, skip_special_tokens=True
    )


def test_an_answer_ending_before_the_cut_is_kept_whole(tiny, samples, monkeypatch):
    model, adapter = tiny
    end = adapter.processor.tokenizer.convert_tokens_to_ids("<|im_end|>")
    step, steps = cached_decoder.CachedDecoder.step, {"count": 0}

    def step_then_end(self, tokens):
        """The model's own step, except that the 4th answer token is the end of turn."""
        logits = step(self, tokens)
        steps["count"] += 1
        if steps["count"] == 3:
            logits = logits.clone()
            logits[..., end] = 1e9
        return logits

    monkeypatch.setattr(cached_decoder.CachedDecoder, "step", step_then_end)
    cached, rerun = _both(tiny, samples["corr"], max_new_tokens=4, reset=lambda: steps.update(count=0))
    assert cached.cut_tokens == 9 and cached.answer_finished and len(cached.answer_ids) == 3
    assert cached.answer_ids == rerun.answer_ids and cached.reaction_ids == rerun.reaction_ids
    # All three answer tokens were fed while answering: only the appended turn is encoded.
    assert cached.encoded_tokens == cached.appended_tokens


# ---------------------------------------------------------------------------------------------------
# The appended turn


def test_the_appended_turn_carries_the_frames_from_t_q_to_t_i(tiny, samples):
    _, adapter = tiny
    sample, video = samples["corr"], samples["corr"].turns[0].parts[0].path
    inputs = prepare_inputs(adapter, sample)
    media = adapter.media
    first, second = adapter.cache.clip(video, 0.0, 4.0, media), adapter.cache.clip(video, 4.0, 7.0, media)
    assert inputs.appended_video_spans == [(4.0, 7.0)]
    (appended_frames,) = inputs.appended_rendered.videos
    assert np.array_equal(appended_frames, second.frames)
    assert not np.array_equal(appended_frames, first.frames)
    # The prompt holds only the first span; the appended piece only the second, after the truncated answer.
    video_id = adapter.processor.tokenizer.convert_tokens_to_ids("<|video_pad|>")
    for batch in (inputs.prefix, inputs.appended):
        assert batch["video_grid_thw"].shape[0] == 1
        assert (batch["input_ids"] == video_id).sum() == batch["video_grid_thw"].prod() // 4  # 2x2 merge
    text = inputs.appended_rendered.text
    assert text.startswith("<|im_end|>\n<|im_start|>user\n<|vision_start|><|video_pad|><|vision_end|>")
    assert text.endswith("Sorry, I meant the<|im_end|>\n<|im_start|>assistant\n")


def test_an_interruption_at_t_q_appends_no_frames(tiny, samples):
    model, adapter = tiny
    inputs = prepare_inputs(adapter, samples["now"])
    assert inputs.appended_video_spans == [] and "pixel_values_videos" not in inputs.appended
    cached, rerun = _both(tiny, samples["now"])
    assert cached.cut_tokens == MIN_CUT_TOKENS  # interrupted as it is asked: after the first 3 tokens
    assert len(cached.answer_ids) == MIN_CUT_TOKENS and cached.reaction_ids == rerun.reaction_ids


def test_a_sample_of_another_shape_is_refused(tiny, samples):
    model, adapter = tiny
    sample = samples["corr"]
    short = ovi_simulation._with_turns(sample, [sample.turns[0], sample.turns[3]])
    with pytest.raises(ValueError, match="question, answer, interruption, reaction"):
        simulate_interruption(model, adapter, short)


# ---------------------------------------------------------------------------------------------------
# Key/value-cache continuation against the full re-run


@pytest.mark.parametrize("cut", [{"cut_tokens": 5}, {"tokens_per_second": 3.0}], ids=["tokens", "time"])
def test_cache_continuation_and_full_rerun_give_identical_token_ids(tiny, samples, cut, monkeypatch):
    for item_id in ("corr", "canc", "false"):
        _assert_same_continuation(tiny, samples[item_id], monkeypatch, **cut)


def test_identical_also_when_the_video_outruns_its_spatial_extent(tiny, ovi_root, monkeypatch):
    """8 frames over [0, 9.5] s: temporal ids 9.5 apart run far past the video's height and width ids; the
    text after the video starts past them (models/rope.py), so the prompt ends on its largest id."""
    from models.chat import VideoChatAdapter

    model, adapter = tiny
    tiny8 = (model, VideoChatAdapter(adapter.processor, MediaSpec(num_frames=8), FrameCache(None)))
    sample = ovi_row_to_sample(_row("late", "Correction", 9.5, 10.0), ovi_root)
    prefix = prepare_inputs(tiny8[1], sample).prefix
    positions = cached_decoder.CachedDecoder(*tiny8).positions(prefix)
    video = positions[..., prefix["mm_token_type_ids"][0] == 2]
    assert video[0].max() - video[0].min() > video[1].max() - video[1].min(), "the case this test is about"
    assert positions.max() == positions[..., -1].max()
    _assert_same_continuation(tiny8, sample, monkeypatch, cut_tokens=5)


def test_the_appended_video_needs_its_multimodal_positions(tiny, samples, monkeypatch):
    """Why positions are computed over the whole conversation: continuing with positions that simply
    count on from the cache (what a stale ``rope_deltas`` gives the new video's tokens) changes the output
    far beyond rounding, while the cached and re-run logits agree to float32 rounding. The remaining
    ~1e-7 difference is a one-row matmul (a decode step) against a many-row one (the re-encode) summing
    in another order; it never flips a greedy choice on these items (the test above)."""
    sample = samples["corr"]
    rerun = _first_reaction_logits(tiny, sample, monkeypatch, continue_from_cache=False, cut_tokens=5)
    cached = _first_reaction_logits(tiny, sample, monkeypatch, continue_from_cache=True, cut_tokens=5)

    def counting_on(positions, start):
        first = positions[..., start : start + 1]
        return first + torch.arange(positions.shape[-1] - start)

    monkeypatch.setattr(ovi_simulation, "_slice_positions", counting_on)
    naive = _first_reaction_logits(tiny, sample, monkeypatch, continue_from_cache=True, cut_tokens=5)
    assert (cached - rerun).abs().max() < 1e-5
    assert (naive - rerun).abs().max() > 1e-3


def test_the_answer_is_the_models_ordinary_greedy_answer(tiny, samples):
    """The hand-written decoding loop gives what ``generate`` gives (media placeholders banned in both;
    the prompt's last text position is its largest id here, see ``models.ovi_simulation``)."""
    model, adapter = tiny
    sample = samples["corr"]
    inputs = prepare_inputs(adapter, sample)
    config = model.config
    banned = [[config.image_token_id], [config.video_token_id], [config.vision_start_token_id]]
    banned.append([config.vision_end_token_id])
    with torch.no_grad():
        out = model.generate(
            **inputs.prefix,
            max_new_tokens=12,
            do_sample=False,
            pad_token_id=adapter.pad_id,
            bad_words_ids=banned,
        )
    ours = simulate_interruption(model, adapter, sample, cut_tokens=12, max_new_tokens=1)
    assert ours.answer_ids == out[0, inputs.prefix["input_ids"].shape[1] :].tolist()


# ---------------------------------------------------------------------------------------------------
# The evaluator under eval.settings.ovi.protocol=simulated


def _simulated_config(tmp_path, ovi_root, protocol="simulated"):
    """An OVIBench of two open-ended items and a multiple-choice one, evaluated under ``protocol``."""
    from core.config import EvalConfig
    from eval.benchmarks import resolve_settings
    from eval.benchmarks.ovi import OviSettings

    root = tmp_path / "ovibench"
    if not root.exists():
        (root / "videos").mkdir(parents=True)
        (root / "videos" / "v.mp4").symlink_to(ovi_root / "videos" / "v.mp4")
    rows = [_row(*item) for item in ITEMS[:2]] + [_row("mcq", "Cancellation", 3.0, 5.0, fmt="mcq")]
    write_ovibench(rows, root)
    ovi = OviSettings(root=str(root), protocol=protocol, max_new_tokens=4, max_new_tokens_open=6)
    return resolve_settings(EvalConfig(benchmarks=["ovi"], settings={"ovi": ovi}, bootstrap_resamples=20))


def test_a_simulated_evaluation_runs_end_to_end(tiny, ovi_root, tmp_path):
    from core.config import EvalRunConfig, JudgeConfig, ModelConfig
    from core.metric_logging import NullLogger
    from core.run import Run
    from core.rundir import RunDir
    from eval.benchmarks.ovi import OVI
    from eval.evaluation import Evaluation
    from eval.judging import Judging
    from eval.predictor import InProcess

    model, adapter = tiny
    cfg = _simulated_config(tmp_path, ovi_root)
    run_cfg = EvalRunConfig(model=ModelConfig(name_or_path="tiny"), media=adapter.media, eval=cfg)
    evaluation = Evaluation(Run(run_cfg, RunDir(tmp_path / "run")), NullLogger(), adapter.cache)
    summary = evaluation.evaluate(InProcess(model, adapter), "baseline", step=0)
    lines = (tmp_path / "run" / "eval" / "baseline" / "ovi.jsonl").read_text().splitlines()
    records = {record["id"]: record for record in map(json.loads, lines)}
    items = {sample.id: sample for sample in evaluation.suites["ovi"].samples}
    for item_id, cut in (("corr", 9), ("canc", 4)):
        record = records[item_id]
        direct = simulate_interruption(model, adapter, items[item_id], max_new_tokens=6)
        assert record["protocol"] == "simulated"
        assert (record["truncated_answer"], record["prediction"]) == (
            direct.truncated_answer,
            direct.reaction,
        )
        assert record["truncated_answer"] and record["simulation"]["cut_tokens"] == cut
    # Multiple choice is answered from its given turns, as under teacher forcing.
    assert "truncated_answer" not in records["mcq"] and records["mcq"]["protocol"] == "teacher_forced"
    assert summary["generation"]["ovi_protocol"] == "simulated"
    # The judge is shown the model's own truncated answer as what was said before the interruption.
    seen = []

    class Recorder:
        identity = "recorder"

        def judge_record(self, record, metrics):
            from eval.judge import RecordJudgement

            seen.append(record["meta"]["partial_answer"])
            return RecordJudgement()

    Judging(Recorder(), JudgeConfig()).judge_record(OVI, records["corr"])
    assert seen == [records["corr"]["truncated_answer"]]


def test_teacher_forced_records_are_not_reused_for_a_simulated_run(tiny, ovi_root, tmp_path):
    from core.files import JsonlStore
    from core.rundir import RunDir
    from eval.generation import current_records
    from eval.suites import load_suites

    _, adapter = tiny
    run_dir = RunDir(tmp_path / "run")
    suites = [  # the same items, under each protocol
        load_suites(
            _simulated_config(tmp_path, ovi_root, protocol), adapter.media, adapter.cache, run_dir, {}
        )
        for protocol in ("teacher_forced", "simulated")
    ]
    teacher, simulation = (suite["ovi"] for suite in suites)
    assert teacher.items == simulation.items
    assert teacher.setting != simulation.setting
    store = JsonlStore(tmp_path / "results.jsonl")
    store.append(
        [{"id": s.id, "setting": teacher.setting, "item": teacher.items[s.id]} for s in teacher.samples]
    )
    stored = store.read()
    current = current_records(stored, teacher.samples, teacher.setting, teacher.items)
    assert current.keys() == teacher.items.keys()
    assert current_records(stored, simulation.samples, simulation.setting, simulation.items) == {}
