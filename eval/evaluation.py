"""The evaluation of a run: its benchmarks, evaluated on any model the run produces.

``Evaluation`` is built once, from the resolved run (``core.run.Run``), by the training (inline
evaluation), the evaluation watcher and ``python -m eval`` alike; it is the one entry training uses. It
loads the run's benchmarks (``eval.suites``); each model comes as a predictor (``eval.predictor``: in
process, or served), and ``evaluate`` takes it through three jobs, each in a module of its own:

1. predict what is missing (``eval.generation``: answers generated, or completions' log-likelihoods;
   sharded over ranks, resumed, shared through the results cache);
2. judge what is pending (``eval.judging``: open-ended items, when a judge is configured);
3. write the outputs (``eval.outputs``: ``summary.json``, ``report.md``, metrics and tables to W&B; and
   ``eval.viewer``: ``viewer.html``), scoring every stored prediction afresh (``eval.scored``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from core import distributed
from core.files import JsonlStore, write_json_atomic
from core.media import FrameCache
from core.metric_logging import MetricLogger
from core.run import Run
from eval.benchmarks.base import Benchmark, SummaryContext
from eval.generation import Generation, current_records
from eval.headline import headline
from eval.judging import Judging, judge_summary, make_judge
from eval.outputs import log_model, write_summary
from eval.predictor import Predictor
from eval.results_cache import ResultsCache, Weights
from eval.rubrics import RUBRIC_VERSION
from eval.scored import scored_record
from eval.suites import StoredResults, Suite, load_suites
from eval.training_curves import training_curves
from eval.viewer import Viewer
from models.chat import chat_format_for, follows_on
from models.loading import resolve_dtype
from models.served import ENGINE, NotServed


class Evaluation:
    """The run's benchmarks, evaluated on each model it is given; rank 0 keeps ``summary.json``,
    ``report.md`` and W&B up to date after every model.

    Build it on every rank, before the model loads: a bad benchmark or judge setting fails fast, and each
    rank decodes the benchmarks' media into the frame cache (quarantining what does not decode).

    Args:
        run: the resolved run (training's or ``python -m eval``'s): benchmarks and their settings, judge,
            media, model family, run directory.
        logger: metrics.jsonl and W&B (the null logger on ranks other than 0).
        cache: the frame cache shared with training.
    """

    def __init__(self, run: Run, logger: MetricLogger, cache: FrameCache):
        cfg = run.cfg
        self.cfg, self.run_dir, self.logger = cfg, run.dir, logger
        self.judge = make_judge(cfg.judge, run.dir.path)  # built once: its cache is read once
        self.judging = Judging(self.judge, cfg.judge)
        self.results_cache = ResultsCache(cfg.eval.results_cache) if cfg.eval.results_cache else None
        common = {
            "media": cfg.media.fingerprint,
            "chat_format": chat_format_for(cfg.model.family, cfg.model.chat_format).fingerprint,
            "dtype": str(resolve_dtype(cfg.model.dtype)),
        }
        if cfg.eval.server.enabled:  # absent for in-process generation, whose settings predate servers
            common["engine"] = ENGINE
        follow_on = follows_on(cfg.model.family)
        self.suites = load_suites(cfg.eval, cfg.media, cache, run.dir, common, follow_on=follow_on)
        # After the media check, which filled the run's frame cache: the page reads its clips from it.
        self.viewer = Viewer(run.dir, cfg.media, cfg.data.frame_cache, follow_on)

    # -- evaluating a model --------------------------------------------------------------------------

    def evaluate(self, predictor: Predictor, name: str, step: int, checkpoint: Path | None = None) -> dict:
        """Evaluate one model on every benchmark, then refresh the summary, the report and W&B.

        Every rank of a multi-process run must call this (each predicts its shard); rank 0 alone writes
        and logs, and returns the summary; the others return an empty dict once rank 0 is done.

        Args:
            predictor: the model (``eval.predictor``).
            name, step: the model's name in results and reports (``baseline``, ``checkpoint-N``) and its
                training step.
            checkpoint: the training checkpoint the model holds on the run's base model (None: the base
                itself); with the base, what keys its results in ``eval.results_cache``.
        """
        main = distributed.is_main()
        weights = Weights(self.cfg.model.name_or_path, checkpoint)
        not_scored: dict[str, str] = {}  # benchmark -> why this predictor cannot score it
        for suite in self.suites.values():
            bench = suite.bench.name
            results = JsonlStore(self.run_dir.results_file(name, bench)) if main else None
            key = self._cache_key(predictor, weights, suite) if main else None
            generation = Generation(
                suite.bench,
                suite.samples,
                suite.settings,
                self.cfg.eval.batch_size,
                suite.setting,
                suite.items,
            )
            try:
                records = generation.run(
                    predictor, results, self.results_cache, key, desc=f"eval {name} {bench}"
                )
            except NotServed as err:
                not_scored[bench] = str(err)
                continue
            if main:
                self._judge(suite.bench, list(records.values()), results, desc=f"judge {name} {bench}")
        summary: dict = {}
        if main:
            made_with = {
                bench: {
                    **suite.made_with,
                    "setting": suite.setting,
                    **_note("judge", self._judge_identity(suite.bench)),
                    **_note("not_scored", not_scored.get(bench)),
                }
                for bench, suite in self.suites.items()
            }
            write_json_atomic(self.run_dir.settings_file(name), made_with, indent=2)
            self.run_dir.add_model(name, step)
            summary, stored = self._summarise()
            log_model(self.logger, summary, name, step, stored[name].tables(), self.benchmarks)
        distributed.barrier()  # training resumes on every rank together, after rank 0 has written
        return summary

    @property
    def benchmarks(self) -> dict[str, Benchmark]:
        return {name: suite.bench for name, suite in self.suites.items()}

    def _judge_identity(self, bench: Benchmark) -> str | None:
        """What judges ``bench``'s open-ended items (model, endpoint or local, decoding, rubric version),
        for settings.json; None where nothing is judged. Compare checks it against the records' own."""
        if self.judge is None or not bench.has_judge:
            return None
        return f"{self.judge.identity} (rubric {RUBRIC_VERSION})"

    def _judge(self, bench: Benchmark, records: list[dict], results: JsonlStore, desc: str) -> None:
        """Judge what is pending; append each record whose judgements changed."""
        before = {record["id"]: record.get("judgements") for record in records}
        for judged in self.judging.pending(bench, records, desc):
            if judged.get("judgements") != before[judged["id"]]:
                results.append([judged])

    def _cache_key(self, predictor: Predictor, weights: Weights, suite: Suite) -> str | None:
        """The results cache's key of these weights under this benchmark's setting (None: no cache, or
        weights that cannot be identified)."""
        if self.results_cache is None:
            return None
        settings = {"setting": suite.setting, "quantization": predictor.quantization}
        return self.results_cache.key(weights, settings)

    # -- outputs -------------------------------------------------------------------------------------

    def read_results(self, name: str, reference: StoredResults | None = None) -> StoredResults:
        """A model's results, each results file read once: the current records (those that answer today's
        items under today's settings), scored (against ``reference``'s records of the same items, for a
        benchmark that scores relative to the run's first model), and per benchmark what the others are
        (made under another benchmark version, generation, media spec, chat format or dtype, or for items
        since changed): they are left out of every comparison, and the summary says so."""
        records, left_out = {}, {}
        for bench, suite in self.suites.items():
            stored = JsonlStore(self.run_dir.results_file(name, bench)).read()
            current = current_records(stored, suite.samples, suite.setting, suite.items)
            records[bench] = [current[s.id] for s in suite.samples if s.id in current]
            ids = {sample.id for sample in suite.samples}
            other = [i for i in stored if i in ids and i not in current]
            if other:
                left_out[bench] = (
                    f"{len(other)} item(s) of {name} were evaluated under other settings or for changed "
                    "items and are left out: evaluate the model again to compare it"
                )
        return StoredResults(records, self.scored(records, reference and reference.records), left_out)

    def scored(
        self, results: dict[str, list[dict]], reference: dict[str, list[dict]] | None = None
    ) -> dict[str, list[dict]]:
        """Records per benchmark (``results``), scored; against ``reference``'s records where given."""
        identity, wanted = self.judging.identity, self.cfg.judge.metrics
        scored = {}
        for bench, records in results.items():
            suite = self.suites[bench]
            theirs = {r["id"]: r for r in (reference or {}).get(bench, [])}
            scored[bench] = [
                scored_record(suite.bench, r, identity, wanted, suite.settings, theirs.get(r["id"]))
                for r in records
            ]
        return scored

    def write_summary(self) -> dict:
        """Rebuild ``summary.json`` and ``report.md`` from every prediction on disk (rank 0)."""
        return self._summarise()[0]

    def _summarise(self) -> tuple[dict, dict[str, StoredResults]]:
        """:meth:`write_summary`, also returning each model's results as it read them."""
        models = self.run_dir.models()
        (first, _), *rest = models
        stored = {first: self.read_results(first)}
        stored.update((name, self.read_results(name, stored[first])) for name, _ in rest)
        scored = {name: results.scored for name, results in stored.items()}
        extra: dict[str, Any] = {
            "media_spec": {**self.cfg.media.to_dict(), "fingerprint": self.cfg.media.fingerprint},
            "generation": self.generation_settings(),
            "quarantine": self._quarantine(),
            "judge": judge_summary(self.judge, self.cfg.judge.metrics),
        }
        curves = training_curves(self.run_dir.metrics_file)
        if curves:
            extra["training"] = curves
        described = {bench: self._described(suite, scored) for bench, suite in self.suites.items()}
        for name, results in stored.items():
            for bench, why in results.left_out.items():
                described[bench].setdefault("not_comparable", {})[name] = why
        summary = write_summary(
            self.run_dir, models, scored, extra, self.cfg.eval.bootstrap_resamples, described, self.benchmarks
        )
        self.viewer.write_quietly(self.suites, summary, stored)  # viewer.html beside the report
        return summary, stored

    def _described(self, suite: Suite, scored: dict[str, dict[str, list[dict]]]) -> dict[str, Any]:
        """What a benchmark's summary entry says of how its numbers were made, beyond its metrics."""
        context = SummaryContext(suite.settings, self.cfg.media, suite.info, scored)
        entry = {
            "version": suite.bench.version,
            "settings": suite.bench.made_with(suite.settings),
            **suite.bench.notes(suite.settings),
            **suite.bench.summary(context),
        }
        for name, _ in self.run_dir.models():  # what a model's evaluation could not score (settings.json)
            recorded = _read_json(self.run_dir.settings_file(name)).get(suite.bench.name, {})
            entry.update(_note("not_scored", recorded.get("not_scored")))
        return entry

    @staticmethod
    def headline(summary: dict) -> str:
        """The lines a run prints when it ends: each benchmark's headline metrics, baseline → last model."""
        return headline(summary)

    def generation_settings(self) -> dict[str, Any]:
        """How answers are generated, over every benchmark of the run (recorded in the summary)."""
        settings: dict[str, Any] = {"do_sample": False, "dtype": str(resolve_dtype(self.cfg.model.dtype))}
        for suite in self.suites.values():
            settings.update(suite.bench.made_with(suite.settings))
        return settings

    def _quarantine(self) -> dict[str, dict[str, int]]:
        """Items left out, by reason: the training's and each benchmark's."""
        counts = self.run_dir.quarantine_counts()
        return {name: found for name, found in counts.items() if name == "train" or name in self.suites}


def _note(key: str, value: Any) -> dict[str, Any]:
    return {} if value is None else {key: value}


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.exists() else {}
