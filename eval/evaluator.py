"""Run both benchmarks on a model, keep per-sample results, and compare against the baseline.

Per-sample results are appended to ``<run_dir>/eval/<model name>/<benchmark>.jsonl`` batch by batch,
so a killed evaluation resumes with only the missing items. After each model, ``summary.json``
and ``report.md`` are rewritten (atomically) from every result on disk, and the metrics with their
deltas against the baseline are logged to W&B at that model's training step.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import torch
from tqdm import tqdm

from data_builders.media import FrameCache, MediaSpec
from data_builders.ovi_format import load_ovibench
from data_builders.sample import Sample
from data_builders.v2p_format import load_v2p_release
from eval.metric_logging import MetricLogger
from eval.report import write_report
from eval.scoring import category_keys, score_ovi, score_v2p
from eval.summary import build_summary
from train.adapter import QwenVLAdapter
from train.config import EvalConfig
from train.data import check_media, quarantine_counts, write_quarantine
from train.errors import ConfigError

SCORERS: dict[str, Callable[[dict], dict]] = {"v2p": score_v2p, "ovi": score_ovi}


def load_benchmark(name: str, cfg: EvalConfig) -> list[Sample]:
    """The benchmark's samples from its release directory (validated; bad rows raise with line numbers)."""
    if name == "v2p":
        if not cfg.v2p_root:
            raise ConfigError("eval.v2p_root is not set (a V2P-Bench release directory)")
        samples = load_v2p_release(cfg.v2p_root, input_order=cfg.input_order)
    elif name == "ovi":
        if not cfg.ovi_root:
            raise ConfigError("eval.ovi_root is not set (an OVIBench directory)")
        samples = load_ovibench(cfg.ovi_root)
    else:
        raise ConfigError(f"eval.benchmarks: unknown benchmark {name!r} (known: v2p, ovi)")
    return samples[: cfg.limit] if cfg.limit else samples


def _read_results(path: Path) -> dict[str, dict]:
    if not path.exists():
        return {}
    results = {}
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by a kill: that item is simply evaluated again
        results[record["id"]] = record
    return results


class Evaluator:
    """Evaluates models on the configured benchmarks and maintains the run's summary and report.

    Args:
        cfg: benchmarks, batch size, generation length, bootstrap settings.
        media: the run's media spec (recorded in the summary).
        cache: the frame cache shared with training.
        run_dir: where ``eval/``, ``summary.json`` and ``report.md`` go.
        logger: W&B (or a null logger).
    """

    def __init__(
        self, cfg: EvalConfig, media: MediaSpec, cache: FrameCache, run_dir: str | Path, logger: MetricLogger
    ):
        self.cfg, self.media, self.cache, self.logger = cfg, media, cache, logger
        self.run_dir = Path(run_dir)
        self.benchmarks: dict[str, list[Sample]] = {}
        self.quarantine: dict[str, dict[str, int]] = {}
        for name in cfg.benchmarks:
            samples, bad = check_media(load_benchmark(name, cfg), media, cache, desc=name)
            self.benchmarks[name] = samples
            self.quarantine[name] = quarantine_counts(bad)
            write_quarantine(self.run_dir, f"eval_{name}", bad)
        # (name, step) of every model evaluated in this run directory; the first is the baseline.
        # Kept on disk so a resumed training still reports the checkpoints evaluated before the kill.
        self._models_file = self.run_dir / "eval" / "models.json"
        self.models: list[tuple[str, int]] = (
            [tuple(m) for m in json.loads(self._models_file.read_text())]
            if self._models_file.exists()
            else []
        )

    @torch.no_grad()
    def generate(self, model, adapter: QwenVLAdapter, samples: list[Sample]) -> list[str]:
        """Greedy answers for a batch of samples."""
        batch = adapter.batch([adapter.render(s, for_generation=True) for s in samples], padding_side="left")
        batch = batch.to(model.device)
        pad_id = adapter.pad_id
        out = model.generate(
            **batch, max_new_tokens=self.cfg.max_new_tokens, do_sample=False, pad_token_id=pad_id
        )
        return adapter.decode_generated(out, batch["input_ids"].shape[1])

    def run_benchmark(self, model, adapter: QwenVLAdapter, model_name: str, name: str) -> list[dict]:
        """Scored per-sample records of one model on one benchmark (resuming from disk)."""
        path = self.run_dir / "eval" / model_name / f"{name}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        done = _read_results(path)
        todo = [s for s in self.benchmarks[name] if s.id not in done]
        size = self.cfg.batch_size
        with path.open("a") as out:
            for start in tqdm(range(0, len(todo), size), desc=f"eval {model_name} {name}", unit="batch"):
                chunk = todo[start : start + size]
                for sample, prediction in zip(chunk, self.generate(model, adapter, chunk), strict=True):
                    record = {
                        "id": sample.id,
                        "task": sample.task,
                        "prediction": prediction,
                        "meta": sample.meta,
                    }
                    record["scores"] = SCORERS[name](record)
                    record["categories"] = category_keys(record)
                    done[sample.id] = record
                    out.write(json.dumps(record) + "\n")
                out.flush()
        return [done[s.id] for s in self.benchmarks[name]]

    def evaluate(self, model, adapter: QwenVLAdapter, model_name: str, step: int) -> dict:
        """Evaluate one model on every benchmark, then refresh summary, report and W&B."""
        was_training = model.training
        model.eval()
        try:
            results = {name: self.run_benchmark(model, adapter, model_name, name) for name in self.benchmarks}
        finally:
            model.train(was_training)
        if (model_name, step) not in self.models:
            self.models.append((model_name, step))
            self._models_file.parent.mkdir(parents=True, exist_ok=True)
            self._models_file.write_text(json.dumps(self.models))
        summary = self.write_summary()
        self._log(summary, model_name, step, results)
        return summary

    def write_summary(self) -> dict:
        """Rebuild summary.json and report.md from every result on disk."""

        def results_of(model_name: str) -> dict[str, list[dict]]:
            return {
                b: list(_read_results(self.run_dir / "eval" / model_name / f"{b}.jsonl").values())
                for b in self.benchmarks
            }

        (base_name, _), *rest = self.models
        checkpoints = [(name, step, results_of(name)) for name, step in rest]
        extra = {
            "media_spec": {**self.media.to_dict(), "fingerprint": self.media.fingerprint},
            "generation": {
                "do_sample": False,
                "max_new_tokens": self.cfg.max_new_tokens,
                "input_order": self.cfg.input_order,
            },
            "quarantine": self.quarantine,
            "judge": "not configured: open-ended OVI items are generated and kept, but not scored",
        }
        summary = build_summary(
            results_of(base_name), checkpoints, extra, n_resamples=self.cfg.bootstrap_resamples
        )
        write_report(summary, self.run_dir)
        return summary

    def _log(self, summary: dict, model_name: str, step: int, results: dict[str, list[dict]]) -> None:
        values = {}
        for bench, table in summary["benchmarks"].items():
            for metric, entry in table["metrics"].items():
                point = entry["checkpoints"].get(model_name)
                values[f"{bench}/{metric}"] = entry["baseline"] if point is None else point["value"]
                if point is not None:
                    values[f"{bench}/{metric}/delta"] = point["delta"]
        self.logger.log(values, step=step)
        for bench, records in results.items():
            self.logger.log_table(f"{bench}/samples_{model_name}", records, step=step)
