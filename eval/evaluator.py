"""Run both benchmarks on a model, keep per-sample results, and compare against the baseline.

Per-sample results are appended to ``<run_dir>/eval/<model name>/<benchmark>.jsonl`` batch by batch,
so a killed evaluation resumes with only the missing items. After each model, ``summary.json``
and ``report.md`` are rewritten (atomically) from every result on disk, and the metrics with their
deltas against the baseline are logged to W&B at that model's training step.

With ``eval.results_cache`` set, results are also shared across runs (:mod:`eval.results_cache`): an
item that the same weights answered under the same settings anywhere is copied into the run's results
instead of generated again. ``Evaluator.weights_of`` names the weights behind each model name.

Open-ended OVIBench items are scored by the LLM judge (``eval.judge``) when one is configured: after
generation, every open-ended record whose judgement is missing, incomplete or by another judge is
judged and appended again (the last line per id wins), so a resumed evaluation re-asks only what failed;
the judge's cache makes the rest free. Metrics that could not be judged are counted in the record's
``n_unjudged_metrics`` and never scored.

Under ``eval.ovi_protocol: simulated``, open-ended OVIBench items are not given the dataset's partial
answer: :mod:`eval.ovi_simulation` lets the model answer, cuts it at the interruption time, appends the
interruption turn and continues from the key/value cache, one item at a time. Their records keep
``truncated_answer`` and ``reaction``; the reaction is the prediction scored and judged, and the judge is
shown the model's own truncated answer as what was said before the interruption.

The V2P hack diagnostics (``eval.diagnostics``, see :mod:`eval.diagnostics`) are transformed copies of
the V2P items evaluated as further benchmarks (``v2p_blind``, ``v2p_z``, ``v2p_shuffled``,
``v2p_text_prompt``); the summary's ``diagnostics`` entry adds what each left out, the frame count behind
the hack ratio, and text- vs visual-prompt accuracy on the same items.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from core import distributed
from core.config import EvalConfig, JudgeConfig
from core.metric_logging import MetricLogger
from data_builders.errors import ConfigError
from data_builders.files import appended_jsonl, close_cut_line, write_text_atomic
from data_builders.media import FrameCache, MediaSpec
from data_builders.ovi_format import load_ovibench
from data_builders.sample import Sample
from data_builders.v2p_format import load_v2p_release
from eval.diagnostics import build_diagnostics, check_names, text_vs_visual
from eval.judge import UNJUDGED, HFJudge, Judge, OpenAICompatibleJudge
from eval.ovi_simulation import DEFAULT_TOKENS_PER_SECOND, simulate_interruption
from eval.report import write_report
from eval.results_cache import ResultsCache, Weights
from eval.rubrics import APPLIES_TO, METRICS, RUBRIC_VERSION, get_metric, metrics_for
from eval.scoring import category_keys, score_ovi, score_v2p
from eval.summary import build_summary
from models.chat import VideoChatAdapter
from train.data import check_media, quarantine_counts, write_quarantine

SCORERS: dict[str, Callable[[dict], dict]] = {"v2p": score_v2p, "ovi": score_ovi}
OVI_PROTOCOLS = ("teacher_forced", "simulated")
NO_JUDGE = "not configured: open-ended OVI items are generated and kept, but not scored"
# A judging pass stops asking after this many records in a row got no reply at all (server down, wrong
# URL): their metrics stay unjudged and are asked again by the next evaluation, instead of every
# remaining request running through its retries first.
_GIVE_UP_AFTER = 20


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


def make_judge(cfg: JudgeConfig, run_dir: str | Path) -> Judge | None:
    """The configured LLM judge, or None for ``backend: none``.

    A literal ``${run_dir}`` in ``cfg.cache`` (a config built in Python rather than composed by Hydra)
    is replaced by ``run_dir``.

    Raises:
        ConfigError: on an unknown backend or metric, or a backend setting that is missing or malformed.
    """
    if cfg.backend == "none":
        return None
    for name in cfg.metrics or []:
        try:
            get_metric(name)
        except ValueError as err:
            raise ConfigError(f"judge.metrics: {err}") from err
    backend: OpenAICompatibleJudge | HFJudge
    if cfg.backend == "openai":
        if not cfg.base_url or not cfg.model:
            raise ConfigError("judge=openai needs judge.base_url and judge.model")
        try:
            backend = OpenAICompatibleJudge(
                cfg.base_url,
                cfg.model,
                api_key_env=cfg.api_key_env,
                timeout_s=cfg.timeout_s,
                max_retries=cfg.max_retries,
                backoff_s=cfg.backoff_s,
                max_tokens=cfg.max_tokens,
            )
        except ValueError as err:
            raise ConfigError(f"judge: {err}") from err
    elif cfg.backend == "hf":
        if not cfg.hf_model:
            raise ConfigError("judge=hf needs judge.hf_model (a local directory or a hub-cache name)")
        backend = HFJudge(cfg.hf_model, max_new_tokens=cfg.hf_max_new_tokens)
    else:
        raise ConfigError(f"judge.backend: unknown backend {cfg.backend!r} (known: none, openai, hf)")
    cache = cfg.cache.replace("${run_dir}", str(run_dir)) if cfg.cache else None
    return Judge(backend, backend.identity, cache)


def judge_summary(judge: Judge | None, metrics: list[str] | None = None) -> str | dict[str, Any]:
    """The summary's ``judge`` entry: what judged the open-ended items, on which metrics and types."""
    if judge is None:
        return NO_JUDGE
    names = [name for name in METRICS if metrics is None or name in metrics]
    return {
        "identity": judge.identity,
        "rubric_version": RUBRIC_VERSION,
        "applies_to": {name: list(APPLIES_TO[name]) for name in names},
        "scales": {name: list(METRICS[name].scale) for name in names},
        "unjudged": "metrics the judge could not score are counted in n_unjudged, never averaged in",
    }


def is_open_ovi(record: dict) -> bool:
    """Whether a record is an open-ended OVIBench item (scored by the judge, not by rule)."""
    return record.get("task") == "ovi" and record.get("meta", {}).get("format") == "open"


def read_results(path: Path) -> dict[str, dict]:
    """Per-sample records of one model on one benchmark by item id (the last line of an id wins; a line
    cut short by a kill is skipped, so that item is simply evaluated again)."""
    return {record["id"]: record for record in appended_jsonl(path)}


class Evaluator:
    """Evaluates models on the configured benchmarks and maintains the run's summary and report.

    Args:
        cfg: benchmarks, batch size, generation length, bootstrap settings.
        media: the run's media spec (recorded in the summary).
        cache: the frame cache shared with training.
        run_dir: where ``eval/``, ``summary.json`` and ``report.md`` go.
        logger: W&B (or a null logger).
        judge: the LLM judge of open-ended OVIBench items; None or ``backend: none`` leaves them unscored.
        weights_of: the weights behind a model name, which key the shared results cache (also settable
            later as ``weights_of``); None: results are not shared.
    """

    def __init__(
        self,
        cfg: EvalConfig,
        media: MediaSpec,
        cache: FrameCache,
        run_dir: str | Path,
        logger: MetricLogger,
        judge: JudgeConfig | None = None,
        weights_of: Callable[[str], Weights] | None = None,
    ):
        self.cfg, self.media, self.cache, self.logger = cfg, media, cache, logger
        self.run_dir = Path(run_dir)
        self.results_cache = ResultsCache(cfg.results_cache) if cfg.results_cache else None
        self.weights_of = weights_of
        self.judge_cfg = judge or JudgeConfig()
        self.judge = make_judge(self.judge_cfg, self.run_dir)  # built once: its cache is read once
        self._ovi_meta: dict[str, dict] | None = None  # OVIBench meta by item id, built on first use
        self.benchmarks: dict[str, list[Sample]] = {}
        self.quarantine: dict[str, dict[str, int]] = {}
        _check_diagnostics(cfg)
        if cfg.ovi_protocol not in OVI_PROTOCOLS:
            raise ConfigError(
                f"eval.ovi_protocol: {cfg.ovi_protocol!r} is not one of {', '.join(OVI_PROTOCOLS)}"
            )
        for name in cfg.benchmarks:
            samples, bad = check_media(load_benchmark(name, cfg), media, cache, desc=name)
            self.benchmarks[name] = samples
            self.quarantine[name] = quarantine_counts(bad)
            if distributed.is_main():
                write_quarantine(self.run_dir, f"eval_{name}", bad)
        # The hack diagnostics: transformed copies of the (media-checked) V2P items, run as benchmarks.
        variants, self.diagnostics = build_diagnostics(
            self.benchmarks.get("v2p", []),
            cfg.diagnostics,
            seed=cfg.diagnostics_seed,
            release_root=cfg.v2p_root,
        )
        self.benchmarks.update(variants)
        # (name, step) of every model evaluated in this run directory; the first is the baseline.
        # Kept on disk so a resumed training still reports the checkpoints evaluated before the kill.
        self._models_file = self.run_dir / "eval" / "models.json"
        self.models: list[tuple[str, int]] = (
            [tuple(m) for m in json.loads(self._models_file.read_text())]
            if self._models_file.exists()
            else []
        )

    @torch.no_grad()
    def generate(
        self, model, adapter: VideoChatAdapter, samples: list[Sample], max_new_tokens: int | None = None
    ) -> list[str]:
        """Greedy answers for a batch of samples (``max_new_tokens`` defaults to ``cfg.max_new_tokens``)."""
        batch = adapter.batch([adapter.render(s, for_generation=True) for s in samples], padding_side="left")
        batch = batch.to(model.device)
        length = max_new_tokens or self.cfg.max_new_tokens
        out = model.generate(**batch, max_new_tokens=length, do_sample=False, pad_token_id=adapter.pad_id)
        return adapter.decode_generated(out, batch["input_ids"].shape[1])

    def generation_length(self, sample: Sample) -> int:
        """New tokens allowed: open-ended reactions need sentences, answers to choose from a few tokens."""
        if sample.task == "ovi" and sample.meta.get("format") == "open":
            return self.cfg.max_new_tokens_open
        return self.cfg.max_new_tokens

    def run_benchmark(
        self, model, adapter: VideoChatAdapter, model_name: str, name: str, key: str | None = None
    ) -> list[dict]:
        """Scored per-sample records of one model on one benchmark (resuming from disk).

        In a multi-process run every rank generates its shard of the missing items and rank 0, the only
        writer of the results file, appends every rank's records after each round of batches: a kill
        loses at most one round, and the next run (with any number of ranks) re-shards what is missing.
        Other ranks return an empty list. ``key`` (rank 0): the shared results cache's key of this model
        and these settings; missing items found there are copied, generated ones stored there.
        """
        path = self.run_dir / "eval" / model_name / f"{name}.jsonl"
        main = distributed.is_main()
        done = self._done(path) if main else {}
        # Rank 0 alone reads the file and tells the others what is missing, so all shard the same list.
        samples = self.benchmarks[name]
        by_id = {sample.id: sample for sample in samples}
        missing = [s.id for s in samples if not _is_current(done.get(s.id), s, self.protocol(s))]
        with path.open("a") if main else nullcontext() as out:
            if main and key:
                reused = self.results_cache.lookup(key, name, [by_id[i] for i in missing])
                self._append(out, done, reused.values())
                missing = [i for i in missing if i not in reused]
            todo = [by_id[i] for i in distributed.broadcast(missing if main else None)]
            rounds = list(self._shard_batches(todo))
            for length, chunk, real in tqdm(
                rounds, desc=f"eval {model_name} {name}", unit="batch", disable=not main
            ):
                records = self._predict(model, adapter, chunk, length)
                mine = [record for record, keep in zip(records, real, strict=True) if keep]
                gathered = [r for shard in distributed.gather(mine) for r in shard]
                if main:
                    self._append(out, done, gathered)
                    if key:
                        self.results_cache.store(key, name, gathered, by_id)
            if not main:
                return []
            current = [done[sample.id] for sample in self.benchmarks[name]]
            for record in self._judge_pending(current, desc=f"judge {model_name} {name}"):
                self._append(out, done, [record])
        return [done[s.id] for s in self.benchmarks[name]]

    @staticmethod
    def _append(out, done: dict[str, dict], records: Iterable[dict]) -> None:
        """Write records to the results file (rank 0) and note them as done."""
        for record in records:
            done[record["id"]] = record
            out.write(json.dumps(record) + "\n")
        out.flush()

    def _done(self, path: Path) -> dict[str, dict]:
        """The records already on disk, with a last line cut by a kill closed off (rank 0 only)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        done = read_results(path)
        close_cut_line(path)
        return done

    def _groups(self, samples: list[Sample]) -> list[tuple[int, list[Sample]]]:
        """``(max_new_tokens, samples)`` groups by generation length, so short answers never wait for
        long ones to finish, and by protocol, so simulated items never share a batch."""
        groups: dict[tuple[int, str], list[Sample]] = {}
        for sample in samples:
            groups.setdefault((self.generation_length(sample), self.protocol(sample)), []).append(sample)
        return [(length, group) for (length, _), group in sorted(groups.items())]

    def _shard_batches(self, samples: list[Sample]) -> Iterator[tuple[int, list[Sample], list[bool]]]:
        """This rank's ``(max_new_tokens, batch, real)`` rounds: rank r takes items r::world_size of each
        group, padded with copies of the group's first item (``real`` False, results dropped) so that
        every rank runs the same rounds with the same batch sizes and lengths. Under ZeRO-3 each forward
        pass gathers weights from all ranks, so a rank that stopped early would leave the others hanging.
        """
        r, n, size = distributed.rank(), distributed.world_size(), self.cfg.batch_size
        for length, group in self._groups(samples):
            mine = group[r::n]
            per_rank = -(-len(group) // n)
            real = [True] * len(mine) + [False] * (per_rank - len(mine))
            mine = mine + [group[0]] * (per_rank - len(mine))
            for start in range(0, per_rank, size):
                yield length, mine[start : start + size], real[start : start + size]

    def protocol(self, sample: Sample) -> str:
        """``"simulated"`` for open-ended OVI items under ``eval.ovi_protocol: simulated``, else
        ``"teacher_forced"`` (every other item is answered from its given turns)."""
        open_ovi = sample.task == "ovi" and sample.meta.get("format") == "open"
        return "simulated" if open_ovi and self.cfg.ovi_protocol == "simulated" else "teacher_forced"

    def _predict(self, model, adapter: VideoChatAdapter, chunk: list[Sample], length: int) -> list[dict]:
        """Scored records of one batch (all of one protocol, see ``_groups``)."""
        if self.protocol(chunk[0]) == "simulated":
            return [self._simulated_record(model, adapter, sample, length) for sample in chunk]
        predictions = self.generate(model, adapter, chunk, max_new_tokens=length)
        return [self._record(s, p) for s, p in zip(chunk, predictions, strict=True)]

    def _simulated_record(
        self, model, adapter: VideoChatAdapter, sample: Sample, length: int
    ) -> dict[str, Any]:
        """The record of an open-ended OVI item under the offline interruption simulation."""
        result = simulate_interruption(model, adapter, sample, max_new_tokens=length)
        record = self._record(sample, result.reaction)
        record["protocol"] = "simulated"
        record["truncated_answer"] = result.truncated_answer
        record["reaction"] = result.reaction
        record["simulation"] = result.stats()
        return record

    def _simulation_settings(self) -> dict[str, Any]:
        """The summary's record of how simulated items were cut (nothing when none are simulated)."""
        if self.cfg.ovi_protocol != "simulated":
            return {}
        return {"ovi_cut": "interruption_time", "ovi_tokens_per_second": DEFAULT_TOKENS_PER_SECOND}

    def _record(self, sample: Sample, prediction: str) -> dict[str, Any]:
        """A scored record; open-ended OVI items start with every applicable metric unjudged."""
        record: dict[str, Any] = {"id": sample.id, "task": sample.task, "prediction": prediction}
        record["meta"] = sample.meta
        record["scores"] = SCORERS[sample.task](record)
        record["categories"] = category_keys(record)
        if is_open_ovi(record):
            record["n_unjudged_metrics"] = len(self.judged_metrics(record))
        return record

    # -----------------------------------------------------------------------------------------------
    # Judging

    def judged_metrics(self, record: dict) -> list[str]:
        """The judge metrics of an open-ended record: those for its type, narrowed by ``judge.metrics``."""
        wanted = self.judge_cfg.metrics
        names = metrics_for(record["meta"]["interruption_type"])
        return [name for name in names if wanted is None or name in wanted]

    def needs_judging(self, record: dict) -> bool:
        """Whether an open-ended record lacks a complete, current judgement by the configured judge."""
        if self.judge is None or not is_open_ovi(record):
            return False
        judgements = record.get("judgements")
        if judgements is None or record.get("n_unjudged_metrics", 0) > 0:
            return True
        if set(judgements) != set(self.judged_metrics(record)):
            return True
        return any(
            j.get("judge") != self.judge.identity or j.get("rubric_version") != RUBRIC_VERSION
            for j in judgements.values()
        )

    def judge_record(self, record: dict) -> dict:
        """A copy of ``record`` with judged scores merged in, its judgements and its unjudged count.

        Earlier judged scores are dropped first, so a metric that fails now is not kept from a stale run.
        """
        meta = self._current_meta(record)
        if "truncated_answer" in record:  # simulated: the answer cut by the interruption is the model's own
            meta = {**meta, "partial_answer": record["truncated_answer"]}
        judged = {**record, "meta": meta}
        result = self.judge.judge_record(judged, self.judged_metrics(judged))
        judged["scores"] = {**SCORERS["ovi"](judged), **result.scores}
        judged["n_unjudged_metrics"] = result.n_unjudged
        judged["judgements"] = result.judgements
        return judged

    def _current_meta(self, record: dict) -> dict:
        """The benchmark's meta for the record's item (records from older runs may lack judge fields)."""
        if self._ovi_meta is None:
            self._ovi_meta = {sample.id: sample.meta for sample in self.benchmarks.get("ovi", [])}
        return self._ovi_meta.get(record["id"], record["meta"])

    def _judge_pending(self, records: list[dict], desc: str) -> Iterator[dict]:
        """Judge every record that needs it, yielding each judged record in order."""
        pending = [record for record in records if self.needs_judging(record)]
        if not pending:
            return
        # An HF judge shares this process's GPU: one at a time. HTTP requests overlap.
        workers = self.judge_cfg.workers if self.judge_cfg.backend == "openai" else 1
        failed_in_a_row = 0
        pool = ThreadPoolExecutor(max_workers=max(1, workers))
        try:
            for record in tqdm(
                self._bounded(pool, pending, workers), total=len(pending), desc=desc, unit="item"
            ):
                failed_in_a_row = failed_in_a_row + 1 if _no_reply(record) else 0
                yield record
                if failed_in_a_row >= _GIVE_UP_AFTER:
                    warnings.warn(
                        f"{desc}: the judge gave no reply for {failed_in_a_row} items in a row; the rest "
                        "stay unjudged and are asked again by the next evaluation",
                        stacklevel=2,
                    )
                    return
        finally:
            pool.shutdown(wait=True, cancel_futures=True)  # requests already sent are let finish

    def _bounded(self, pool: ThreadPoolExecutor, records: list[dict], workers: int) -> Iterable[dict]:
        """Judged records in order, with at most ``2 * workers`` submitted ahead, so giving up is quick."""
        ahead = max(1, 2 * workers)
        futures = [pool.submit(self.judge_record, record) for record in records[:ahead]]
        for index in range(len(records)):
            if index + ahead < len(records):
                futures.append(pool.submit(self.judge_record, records[index + ahead]))
            yield futures[index].result()

    def evaluate(self, model, adapter: VideoChatAdapter, model_name: str, step: int) -> dict:
        """Evaluate one model on every benchmark, then refresh summary, report and W&B.

        Every rank of a multi-process run must call this (each generates its shard); rank 0 alone
        writes and logs, and returns the summary; the others return an empty dict once rank 0 is done.
        """
        _check_sharded_protocol(self.cfg)
        key = self._cache_key(model, model_name) if distributed.is_main() else None
        was_training = model.training
        model.eval()
        try:
            results = {
                name: self.run_benchmark(model, adapter, model_name, name, key) for name in self.benchmarks
            }
        finally:
            model.train(was_training)
        summary: dict = {}
        if distributed.is_main():
            if (model_name, step) not in self.models:
                self.models.append((model_name, step))
                self._models_file.parent.mkdir(parents=True, exist_ok=True)
                # Whole or not at all: a watcher restarted after a kill, or its test, reads it.
                write_text_atomic(self._models_file, json.dumps(self.models))
            summary = self.write_summary()
            self._log(summary, model_name, step, results)
        distributed.barrier()  # training resumes on every rank together, after rank 0 has written
        return summary

    def _cache_key(self, model, model_name: str) -> str | None:
        """The shared results cache's key of this model's weights under these settings (None: no cache,
        or weights that cannot be identified)."""
        if self.results_cache is None or self.weights_of is None:
            return None
        settings = {
            **self._generation_settings(),
            "media": self.media.fingerprint,
            "dtype": str(model.dtype),
            "quantization": str(getattr(model, "quantization_method", None)),  # a QLoRA base: 4-bit
        }
        return self.results_cache.key(self.weights_of(model_name), settings)

    def _generation_settings(self) -> dict[str, Any]:
        """How answers are generated: recorded in the summary, and part of the results cache key."""
        return {
            "do_sample": False,
            "max_new_tokens": self.cfg.max_new_tokens,
            "max_new_tokens_open": self.cfg.max_new_tokens_open,
            "input_order": self.cfg.input_order,
            "ovi_protocol": self.cfg.ovi_protocol,
            **self._simulation_settings(),
        }

    def write_summary(self) -> dict:
        """Rebuild summary.json and report.md from every result on disk."""

        def results_of(model_name: str) -> dict[str, list[dict]]:
            return {
                b: list(read_results(self.run_dir / "eval" / model_name / f"{b}.jsonl").values())
                for b in self.benchmarks
            }

        (base_name, _), *rest = self.models
        checkpoints = [(name, step, results_of(name)) for name, step in rest]
        extra = {
            "media_spec": {**self.media.to_dict(), "fingerprint": self.media.fingerprint},
            "generation": self._generation_settings(),
            "quarantine": self.quarantine,
            "judge": judge_summary(self.judge, self.judge_cfg.metrics),
        }
        if self.cfg.diagnostics:
            extra["diagnostics"] = self._diagnostics_summary(base_name, results_of)
        summary = build_summary(
            results_of(base_name), checkpoints, extra, n_resamples=self.cfg.bootstrap_resamples
        )
        write_report(summary, self.run_dir)
        return summary

    def _diagnostics_summary(
        self, base_name: str, results_of: Callable[[str], dict[str, list[dict]]]
    ) -> dict[str, dict[str, Any]]:
        """The summary's ``diagnostics`` entry: per diagnostic benchmark what was left out (or why it was
        skipped), the frame count behind the hack ratio, and text- vs visual-prompt accuracy per model."""
        info = {bench: dict(entry) for bench, entry in self.diagnostics.items()}
        if "v2p_shuffled" in info:
            info["v2p_shuffled"]["frames"] = _frame_count(self.media)
        if "v2p_text_prompt" in self.benchmarks:
            side_by_side = {}
            for name, _ in self.models:
                results = results_of(name)
                label = "baseline" if name == base_name else name
                side_by_side[label] = text_vs_visual(results.get("v2p", []), results["v2p_text_prompt"])
            info["v2p_text_prompt"]["text_vs_visual"] = side_by_side
        return info

    def _log(self, summary: dict, model_name: str, step: int, results: dict[str, list[dict]]) -> None:
        values = {}
        for bench, table in summary["benchmarks"].items():
            values[f"{bench}/n_unjudged"] = table["n_unjudged"]
            for metric, entry in table["metrics"].items():
                point = entry["checkpoints"].get(model_name)
                values[f"{bench}/{metric}"] = entry["baseline"] if point is None else point["value"]
                if point is not None:
                    values[f"{bench}/{metric}/delta"] = point["delta"]
        text = summary.get("diagnostics", {}).get("v2p_text_prompt", {}).get("text_vs_visual", {})
        paired = text.get("baseline" if model_name == self.models[0][0] else model_name)
        if paired and paired["n"]:
            values["v2p_text_prompt/same_items/text_prompt"] = paired["text_prompt"]
            values["v2p_text_prompt/same_items/visual_prompt"] = paired["visual_prompt"]
        self.logger.log(values, step=step)
        for bench, records in results.items():
            self.logger.log_table(f"{bench}/samples_{model_name}", records, step=step)


def _check_diagnostics(cfg: EvalConfig) -> None:
    """Fail fast on unknown diagnostics, or diagnostics without the V2P benchmark they transform."""
    try:
        check_names(cfg.diagnostics)
    except ValueError as err:
        raise ConfigError(f"eval.diagnostics: {err}") from err
    if cfg.diagnostics and "v2p" not in cfg.benchmarks:
        raise ConfigError("eval.diagnostics transform V2P-Bench: add v2p to eval.benchmarks")


def _check_sharded_protocol(cfg: EvalConfig) -> None:
    """Refuse the simulated OVI protocol under multi-rank ZeRO-3: it runs its own forward loop, item by
    item, whose length depends on the item, so ranks would wait on each other's weight gathers forever."""
    from transformers.integrations import is_deepspeed_zero3_enabled

    if cfg.ovi_protocol == "simulated" and distributed.world_size() > 1 and is_deepspeed_zero3_enabled():
        raise ConfigError(
            "eval.ovi_protocol=simulated does not run under ZeRO-3 with several ranks: use teacher_forced, "
            "or evaluate the checkpoints afterwards with python -m eval"
        )


def _is_current(record: dict | None, sample: Sample, protocol: str = "teacher_forced") -> bool:
    """Whether a stored result answers this very input (a diagnostic's pairing may change with the items)
    under the same OVI protocol (records from before the protocol existed are teacher-forced)."""
    if record is None or record.get("protocol", "teacher_forced") != protocol:
        return False
    return record.get("meta", {}).get("variant") == sample.meta.get("variant")


def _frame_count(media: MediaSpec) -> int | str:
    """Frames per video under ``media``: the hack ratio holds for one frame count."""
    if media.num_frames is not None:
        return media.num_frames
    return f"{media.fps:g} fps, at most {media.max_frames}"


def _no_reply(record: dict) -> bool:
    """Whether the judge gave no reply at all for any metric of a judged record."""
    judgements = record.get("judgements") or {}
    return bool(judgements) and all(j["status"] == UNJUDGED for j in judgements.values())
