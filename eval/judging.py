"""Judge what is pending: every open-ended item whose judgement by the configured judge is missing or
incomplete is judged, and its record appended again with the judgements (the last line per id wins), so
a resumed evaluation asks only what failed, and the judge's cache makes the rest free."""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tqdm import tqdm

from core.config import JudgeConfig
from core.errors import ConfigError
from core.text_models import TextBackend, make_text_model
from eval.benchmarks.base import Benchmark
from eval.judge import UNJUDGED, Judge
from eval.rubrics import APPLIES_TO, METRICS, RUBRIC_VERSION, get_metric
from eval.scored import judged_metrics, judged_scores

NO_JUDGE = "not configured: open-ended OVI items are generated and kept, but not scored"
# A judging pass stops asking after this many records in a row got no reply at all (server down, wrong
# URL): their metrics stay unjudged and are asked again by the next evaluation, instead of every
# remaining request running through its retries first.
GIVE_UP_AFTER = 20


def make_judge(cfg: JudgeConfig, run_dir: str | Path, key: str = "judge") -> Judge | None:
    """The configured LLM judge, or None for ``backend: none``; ``key``: where ``cfg`` sits in the config
    (named in errors).

    A literal ``${run_dir}`` in ``cfg.cache`` (a config built in Python rather than composed by Hydra)
    is replaced by ``run_dir``.

    Raises:
        ConfigError: on an unknown metric, or a backend setting that is missing or malformed.
    """
    for name in cfg.metrics or []:
        try:
            get_metric(name)
        except ValueError as err:
            raise ConfigError(f"{key}.metrics: {err}") from err
    model = make_text_model(cfg, key)
    if model is None:
        return None
    cache = cfg.cache.replace("${run_dir}", str(run_dir)) if cfg.cache else None
    return Judge(model, cache)


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
        "reconstructed": {
            name: METRICS[name].source for name in names if "reconstructed" in METRICS[name].source
        },
        "unjudged": "metrics the judge gave no reply for are counted in n_unjudged, never averaged in",
        "zeros": (
            "a reply of N/A, below 1 on the 1-10 scale or with no score counts 0, as the paper's means "
            "count them (its False-Trigger CFS is 0.69); counted in n_zero"
        ),
        # The paper's judge saw the video; ours is a text model, so the summary says what it saw instead.
        "evidence": (
            "text only, no frames: each item's visual_evidence (the source's captions up to the "
            "interruption) where the dataset has it, else the full answer and the reference reaction"
        ),
    }


class Judging:
    """The configured judge applied to a benchmark's result records.

    Args:
        judge: the judge (None: nothing is judged).
        cfg: the judge settings (which metrics, how many requests at once).
    """

    def __init__(self, judge: Judge | None, cfg: JudgeConfig):
        self.judge, self.cfg = judge, cfg
        self.identity = judge.identity if judge else None
        # A local judge shares this process's GPU: one at a time. HTTP requests overlap.
        self.workers = max(1, cfg.endpoint.workers) if cfg.backend == TextBackend.endpoint else 1

    def metrics(self, bench: Benchmark, record: dict) -> list[str]:
        return judged_metrics(bench, record["meta"], self.cfg.metrics)

    def needs_judging(self, bench: Benchmark, record: dict) -> bool:
        """Whether the record lacks a score of this judge, under the current rubric, for a metric it has."""
        if self.judge is None:
            return False
        wanted = self.metrics(bench, record)
        scores, _ = judged_scores(record, wanted, self.identity)
        return len(scores) < len(wanted)

    def judge_record(self, bench: Benchmark, record: dict) -> dict:
        """A copy of ``record`` with this judge's judgements of its metrics (earlier ones replaced)."""
        meta = record["meta"]
        if "truncated_answer" in record:  # simulated: the answer cut by the interruption is the model's own
            finished = bool(record.get("simulation", {}).get("answer_finished"))
            meta = {**meta, "partial_answer": record["truncated_answer"], "own_answer": True}
            meta.update({"answer_finished": True} if finished else {})
        result = self.judge.judge_record({**record, "meta": meta}, self.metrics(bench, record))
        return {**record, "judgements": result.judgements}

    def pending(self, bench: Benchmark, records: list[dict], desc: str) -> Iterator[dict]:
        """Judge every record that needs it, yielding each judged record in order."""
        todo = [record for record in records if self.needs_judging(bench, record)]
        if not todo:
            return
        failed_in_a_row = 0
        pool = ThreadPoolExecutor(max_workers=self.workers)
        try:
            judged = self._bounded(pool, bench, todo)
            for record in tqdm(judged, total=len(todo), desc=desc, unit="item"):
                failed_in_a_row = failed_in_a_row + 1 if _no_reply(record) else 0
                yield record
                if failed_in_a_row >= GIVE_UP_AFTER:
                    warnings.warn(
                        f"{desc}: the judge gave no reply for {failed_in_a_row} items in a row; the rest "
                        "stay unjudged and are asked again by the next evaluation",
                        stacklevel=2,
                    )
                    return
        finally:
            pool.shutdown(wait=True, cancel_futures=True)  # requests already sent are let finish

    def _bounded(self, pool: ThreadPoolExecutor, bench: Benchmark, records: list[dict]) -> Iterable[dict]:
        """Judged records in order, with at most ``2 * workers`` submitted ahead, so giving up is quick."""
        ahead = 2 * self.workers
        futures = [pool.submit(self.judge_record, bench, record) for record in records[:ahead]]
        for index in range(len(records)):
            if index + ahead < len(records):
                futures.append(pool.submit(self.judge_record, bench, records[index + ahead]))
            yield futures[index].result()


def _no_reply(record: dict) -> bool:
    """Whether the judge gave no reply at all for any metric of a judged record."""
    judgements = record.get("judgements") or {}
    return bool(judgements) and all(j["status"] == UNJUDGED for j in judgements.values())
