"""A run's benchmarks as the evaluation holds them: each one's items, settings and stamp (``Suite``,
loaded by ``load_suites``), and one model's stored results as a summary reads them (``StoredResults``).
The evaluation (``eval.evaluation``) makes them; the summary, the report and the results viewer read them."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from core.config import EvalConfig
from core.decoding import MediaSpec
from core.media import FrameCache, check_media
from core.rundir import RunDir
from core.sample import Sample
from eval.benchmarks import BENCHMARKS, settings_of
from eval.benchmarks.base import Benchmark, Settings
from eval.results_cache import item_fingerprint


@dataclass
class Suite:
    """One benchmark of a run, ready to evaluate: its settings, its items, and how their predictions are
    stamped."""

    bench: Benchmark
    settings: Settings
    samples: list[Sample]
    made_with: dict[str, Any]  # everything but the weights that changes a prediction, readable
    items: dict[str, str] = field(default_factory=dict)  # item id -> fingerprint
    info: dict[str, Any] = field(default_factory=dict)  # a derived benchmark's account of its items

    @property
    def setting(self) -> str:
        """The digest every result record is stamped with (eval.generation)."""
        return _digest(self.made_with)


@dataclass
class StoredResults:
    """One model's results as a summary reads them, per benchmark: the records that answer today's items
    under today's settings (in item order), their scores, and why other stored records are left out."""

    records: dict[str, list[dict]]
    scored: dict[str, list[dict]]
    left_out: dict[str, str]

    def tables(self) -> dict[str, list[dict]]:
        """Per-item tables for W&B: each record with its scores and categories."""
        return {
            bench: [{**record, **row} for record, row in zip(records, self.scored[bench], strict=True)]
            for bench, records in self.records.items()
        }


def load_suites(
    cfg: EvalConfig,
    media: MediaSpec,
    cache: FrameCache,
    run_dir: RunDir,
    common: dict[str, Any],
    *,
    follow_on: bool = True,
) -> dict[str, Suite]:
    """The configured benchmarks' items, media-checked (a quarantine file per benchmark), in config order;
    ``cfg`` as ``eval.benchmarks.resolve_settings`` returned it; ``follow_on`` as the model family samples a
    video's later spans (``models.chat.follows_on``)."""
    suites: dict[str, Suite] = {}
    for name in sorted(cfg.benchmarks, key=lambda n: BENCHMARKS[n].source is not None):  # sources first
        bench = BENCHMARKS[name]
        settings = settings_of(bench, cfg)
        made_with = {"benchmark": name, "version": bench.version, **common, **bench.made_with(settings)}
        if bench.source is None:
            samples = bench.load(settings)
            samples, bad = check_media(
                samples[: cfg.limit] if cfg.limit else samples, media, cache, desc=name, follow_on=follow_on
            )
            run_dir.write_quarantine(f"eval_{name}", bad)
            suites[name] = Suite(bench, settings, samples, made_with)
            continue
        derived = bench.derive(suites[bench.source].samples, settings)
        info = {**derived.info, "n_items": len(derived.samples)}
        suites[name] = Suite(bench, settings, derived.samples, made_with, info=info)
    for suite in suites.values():
        suite.items = {sample.id: item_fingerprint(sample) for sample in suite.samples}
    order = {name: i for i, name in enumerate(cfg.benchmarks)}
    return dict(sorted(suites.items(), key=lambda pair: order[pair[0]]))


def _digest(value: Any) -> str:
    return hashlib.sha1(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]
