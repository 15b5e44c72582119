"""The held-out preference pairs as a benchmark of the log-likelihood kind (``ovi_pairs``): their records
are stamped and cached like every benchmark's, so a change to the pairs or to the chat format scores them
again instead of reusing stale log-probabilities (the defect of the pairs' earlier, separate scoring)."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest

from core.config import EvalConfig, EvalRunConfig, ModelConfig
from core.decoding import MediaSpec
from core.media import FrameCache
from core.metric_logging import NullLogger
from core.run import Run
from core.rundir import RunDir
from eval.benchmarks import resolve_settings
from eval.benchmarks.ovi_pairs import OviPairsSettings
from eval.evaluation import Evaluation
from eval.predictor import InProcess
from eval.results_cache import item_fingerprint

MEDIA = MediaSpec(num_frames=4)
ITEMS = 10  # the first instance's 7 pairs and 3 of the second's


class Counting:
    """A predictor that counts the completions it is asked to score."""

    def __init__(self, inner):
        self.inner, self.quantization, self.scored = inner, inner.quantization, 0

    def generate(self, samples, protocol, max_new_tokens):
        return self.inner.generate(samples, protocol, max_new_tokens)

    def loglikelihood(self, samples):
        self.scored += len(samples)
        return self.inner.loglikelihood(samples)


@pytest.fixture(scope="module")
def tiny(tiny_checkpoint):
    from models.loading import load_model

    return load_model(ModelConfig(name_or_path=str(tiny_checkpoint)))


def _evaluate(tiny, tiny_checkpoint, root, run_dir, cache_dir) -> tuple[Evaluation, Counting, dict]:
    """ovi_pairs of the OVIBench at ``root`` on the tiny model, as the baseline of ``run_dir``."""
    from models.chat import make_adapter

    model, processor = tiny
    settings = {"ovi_pairs": OviPairsSettings(root=str(root))}
    evaluation_cfg = EvalConfig(benchmarks=["ovi_pairs"], settings=settings, limit=ITEMS, batch_size=4)
    cfg = EvalRunConfig(
        model=ModelConfig(name_or_path=str(tiny_checkpoint)),
        media=MEDIA,
        eval=resolve_settings(evaluation_cfg),
    )
    cache = FrameCache(cache_dir)
    evaluation = Evaluation(Run(cfg, RunDir(run_dir)), NullLogger(), cache)
    predictor = Counting(InProcess(model, make_adapter("qwen2_5_vl", processor, MEDIA, cache)))
    summary = evaluation.evaluate(predictor, "baseline", step=0)
    return evaluation, predictor, summary


def _records(run_dir) -> dict[str, dict]:
    lines = (run_dir / "eval" / "baseline" / "ovi_pairs.jsonl").read_text().splitlines()
    return {record["id"]: record for record in map(json.loads, lines)}  # the last line per id wins


@pytest.mark.slow
def test_changed_pairs_and_a_changed_chat_format_are_scored_again(
    tiny, tiny_checkpoint, synthetic_build, tmp_path, monkeypatch
):
    import models.chat

    root = tmp_path / "ovibench"
    shutil.copytree(synthetic_build.ovibench, root, symlinks=True)
    run_dir, cache = tmp_path / "run", tmp_path / "frames"
    evaluation, first, summary = _evaluate(tiny, tiny_checkpoint, root, run_dir, cache)
    before = _records(run_dir)
    assert first.scored == 2 * ITEMS and len(before) == ITEMS  # a chosen and a rejected completion each
    assert all(len(r["prediction"]) == 2 and r["setting"] and r["item"] for r in before.values())
    entry = summary["benchmarks"]["ovi_pairs"]
    assert entry["n_items"] == ITEMS and entry["metrics"]["accuracy"]["n"] == ITEMS
    assert "accuracy/type/Correction" in entry["metrics"] and "accuracy/form/open" in entry["metrics"]

    # Resumed: nothing left to score.
    assert _evaluate(tiny, tiny_checkpoint, root, run_dir, cache)[1].scored == 0

    # The pairs change (the second instance's right reaction reworded): its pairs are scored again, the first
    # instance's are not.
    rows = [json.loads(line) for line in (root / "ovibench.jsonl").read_text().splitlines()]
    items = {s.id: s for s in evaluation.suites["ovi_pairs"].samples}
    second = sorted({r["id"].rsplit("-", 1)[0] for r in rows})[1]
    reworded = "Understood: the new answer, reworded."
    for row in (row for row in rows if row["id"].startswith(second)):
        row["reference_reaction"] = reworded
        if row["format"] == "mcq":  # the right option is the reaction itself
            row["options"]["ABCD".index(row["answer_letter"])] = reworded
    (root / "ovibench.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    evaluation, changed, _ = _evaluate(tiny, tiny_checkpoint, root, run_dir, cache)
    now = {s.id: s for s in evaluation.suites["ovi_pairs"].samples}
    moved = [i for i in now if i not in items or item_fingerprint(now[i]) != item_fingerprint(items[i])]
    assert moved and len(moved) < ITEMS and all(i.startswith(second) for i in moved)
    assert changed.scored == 2 * len(moved)
    after = _records(run_dir)
    assert all(i not in before or after[i]["item"] != before[i]["item"] for i in moved)

    # The chat format changes (another system turn): every pair is scored again, under a new setting.
    qwen = models.chat.CHAT_FORMATS["qwen2_5_vl"]
    formats = {**models.chat.CHAT_FORMATS, "qwen2_5_vl": replace(qwen, system="Another system turn.")}
    monkeypatch.setattr(models.chat, "CHAT_FORMATS", formats)
    _, rescored, _ = _evaluate(tiny, tiny_checkpoint, root, run_dir, cache)
    assert rescored.scored == 2 * ITEMS
    latest = _records(run_dir)
    assert {r["setting"] for r in latest.values()} != {r["setting"] for r in after.values()}
    assert any(
        latest[i]["prediction"] != after[i]["prediction"] for i in latest
    )  # new prompts, new log-probs
