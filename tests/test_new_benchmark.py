"""A new benchmark is one file and one entry in ``eval.benchmarks.BENCHMARKS``: a toy benchmark defined here,
with settings of its own, is evaluated, stamped, summarised, reported, logged and printed in the headline
by the common path, with no other change to the project."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from core.config import EvalConfig, EvalRunConfig, LoggerConfig, ModelConfig
from core.decoding import MediaSpec
from core.media import FrameCache
from core.run import Run
from core.rundir import RunDir
from core.sample import Part, Sample, Turn
from eval.benchmarks.base import Benchmark


@dataclass
class ToySettings:
    """``eval.settings.toy``."""

    size: int = 4  # how many questions
    max_new_tokens: int = 2


def _load(settings: ToySettings) -> list[Sample]:
    """Text-only questions whose answer is the letter A, B, A, B …"""
    samples = []
    for index in range(settings.size):
        answer = "AB"[index % 2]
        turns = [
            Turn("user", [Part.txt(f"Question {index}: answer {answer}.")]),
            Turn("assistant", [Part.txt(answer)], loss=True),
        ]
        samples.append(
            Sample(f"toy-{index}", "toy", turns, "toy", f"q{index}", (0.0, 0.0), {"answer": answer})
        )
    return samples


TOY = Benchmark(
    name="toy",
    version=1,
    title="Toy letters",
    load=_load,
    score=lambda prediction, meta: {"right": float((prediction or "").strip()[:1] == meta["answer"])},
    categories=lambda meta: {"letter": meta["answer"]},
    made_with=lambda settings: {"max_new_tokens": settings.max_new_tokens},
    settings_class=ToySettings,
    max_new_tokens=lambda meta, settings: settings.max_new_tokens,
    headline=("right",),
    logged=lambda entry, name: {"toy/items_seen": float(entry["n_items"])},
)


@pytest.mark.slow
def test_a_toy_benchmark_is_evaluated_summarised_reported_and_logged(tiny_checkpoint, tmp_path, monkeypatch):
    import eval.benchmarks
    from core.metric_logging import logger_for_run
    from eval.benchmarks import resolve_settings
    from eval.evaluation import Evaluation
    from eval.headline import headline
    from eval.predictor import InProcess
    from models.chat import make_adapter
    from models.loading import load_model

    monkeypatch.setitem(eval.benchmarks.BENCHMARKS, "toy", TOY)  # the one dict entry
    settings = {"toy": {"size": 6}}  # as a config file gives it: typed by the benchmark's own dataclass
    cfg = EvalRunConfig(
        model=ModelConfig(name_or_path=str(tiny_checkpoint)),
        eval=resolve_settings(EvalConfig(benchmarks=["toy"], settings=settings, bootstrap_resamples=50)),
        logger=LoggerConfig(wandb=False),
        run_dir=str(tmp_path / "run"),
    )
    assert cfg.eval.settings["toy"] == ToySettings(size=6)
    model, processor = load_model(cfg.model)
    run = Run(cfg, RunDir(cfg.run_dir))
    logger = logger_for_run(cfg)
    cache = FrameCache(None)
    evaluation = Evaluation(run, logger, cache)
    predictor = InProcess(model, make_adapter("qwen2_5_vl", processor, MediaSpec(), cache))
    evaluation.evaluate(predictor, "baseline", step=0)
    summary = evaluation.evaluate(predictor, "checkpoint-1", step=1)
    logger.finish()

    records = [
        json.loads(line) for line in (tmp_path / "run/eval/baseline/toy.jsonl").read_text().splitlines()
    ]
    assert len(records) == 6 and all(r["setting"] and r["item"] for r in records)
    entry = summary["benchmarks"]["toy"]
    assert entry["n_items"] == 6 and entry["version"] == 1 and entry["settings"] == {"max_new_tokens": 2}
    assert entry["metrics"]["right"]["n"] == 6 and entry["metrics"]["right/letter/A"]["n"] == 3
    assert entry["metrics"]["right"]["checkpoints"]["checkpoint-1"]["delta"] == 0.0  # the same weights
    assert summary["generation"]["max_new_tokens"] == 2
    report = (tmp_path / "run/report.md").read_text()
    assert "## Toy letters (`toy`)" in report and "### right by letter" in report
    assert "  toy right: " in headline(summary)
    logged = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    assert any(row.get("toy/right") is not None and row.get("toy/items_seen") == 6.0 for row in logged)
