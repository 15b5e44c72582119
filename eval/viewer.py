"""The results viewer: one self-contained HTML page of a run's evaluation, baseline against every checkpoint.

    python -m eval view outputs/quickstart            # writes outputs/quickstart/viewer.html
    python -m eval view outputs/quickstart --out quickstart.html

The evaluation writes the page beside ``report.md`` whenever it writes the report (``Evaluation``);
``view`` writes it again from a finished run's files. The page opens from disk with no server and no
network: its data (one JSON object), its script and its thumbnails are inline. On top: the headline metrics
of every model with the deltas and their 95% intervals, as bars, and the benchmarks' own plots (the OVIBench
radar). Below: every item with the frames the model saw (``eval.viewer_media``), its question, options and
reference, and each model's answer and scores (for an OVIBench item the timeline of the interruption, the
cut answer, the reaction, and the judge's scores with its raw verdict); filters, search and paging run in
the page, so a 10,000-item run stays fast (only one page of items is ever drawn).
"""

from __future__ import annotations

import argparse
import base64
import json
import warnings
import weakref
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from core.cli import run_cli
from core.config import EvalRunConfig
from core.errors import DataError
from core.files import write_text_atomic
from core.media import FrameCache
from core.metric_logging import NullLogger
from core.run import Run
from core.rundir import RunDir
from core.sample import Sample
from eval.benchmarks import resolve_settings
from eval.summary import is_graded
from eval.viewer_media import Thumbnails
from models.chat import follows_on

if TYPE_CHECKING:
    from eval.evaluation import Evaluation, StoredResults

VIEWER_FILE = "viewer.html"
_TEMPLATE = Path(__file__).with_name("viewer_page.html")
_DATA_MARK = "/*__VIEWER_DATA__*/null"
_EVAL_CONFIG = Path(".hydra") / "config.yaml"  # what `python -m eval` composed (Hydra writes it)


def write_viewer(
    evaluation: Evaluation, summary: dict[str, Any], stored: dict[str, StoredResults], out: Path | None = None
) -> Path:
    """Write the viewer page of ``evaluation``'s run (``<run_dir>/viewer.html`` unless ``out``).

    Args:
        summary: the run's summary, as just written.
        stored: each model's results as the summary read them (records and their scores), in model order.
    """
    data = page_data(evaluation, summary, stored, _thumbnails(evaluation))
    path = Path(out) if out else evaluation.run_dir.path / VIEWER_FILE
    write_text_atomic(path, render_page(data))
    return path


# One thumbnail table per evaluation: a training writes the page after every checkpoint's evaluation, and
# its items (so their frames) stay the same, so each is encoded once, not once per page.
_THUMBNAILS: weakref.WeakKeyDictionary[Evaluation, Thumbnails] = weakref.WeakKeyDictionary()


def _thumbnails(evaluation: Evaluation) -> Thumbnails:
    if evaluation not in _THUMBNAILS:
        cfg = evaluation.cfg
        cache = frame_cache(cfg.data.frame_cache)
        _THUMBNAILS[evaluation] = Thumbnails(cfg.media, cache, follows_on(cfg.model.family))
    return _THUMBNAILS[evaluation]


def frame_cache(root: str | None) -> FrameCache:
    """The run's frame cache, to read the clips its evaluation decoded; none (decode, store nothing) where
    the run has no cache directory, or its path was never resolved (a config built in code keeps
    ``${output_root}/frame_cache`` as it is): the page never creates a cache of its own."""
    if not root or "${" in str(root) or not Path(root).is_dir():
        return FrameCache(None)
    return FrameCache(root)


def write_viewer_quietly(
    evaluation: Evaluation, summary: dict[str, Any], stored: dict[str, StoredResults]
) -> None:
    """:func:`write_viewer` for the evaluation's own outputs: a page that cannot be written is a warning,
    never the end of a training (the summary and the report are written already)."""
    try:
        write_viewer(evaluation, summary, stored)
    except Exception as err:  # noqa: BLE001 - any failure of the page must leave the run going
        warnings.warn(f"the results viewer was not written: {type(err).__name__}: {err}", stacklevel=2)


def render_page(data: dict[str, Any]) -> str:
    """The page: the template with ``data`` inline (``</`` escaped, so no string can close the script)."""
    blob = json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("</", "<\\/")
    return _TEMPLATE.read_text().replace(_DATA_MARK, blob)


# ---------------------------------------------------------------------------------------------------
# The page's data


def page_data(
    evaluation: Evaluation, summary: dict[str, Any], stored: dict[str, StoredResults], thumbnails: Thumbnails
) -> dict[str, Any]:
    """Everything the page shows, as one JSON object (the template's script reads it)."""
    models = [summary["baseline"], *summary.get("checkpoints", [])]
    items = []
    benchmarks = {}
    for bench, suite in evaluation.suites.items():
        answers = {name: _answers(results, bench) for name, results in stored.items()}
        if not any(answers.values()):
            continue
        benchmarks[bench] = {"title": suite.bench.title, "primary": list(suite.bench.headline)}
        for sample in suite.samples:
            by_model = {name: found[sample.id] for name, found in answers.items() if sample.id in found}
            if by_model:
                items.append(_item(bench, sample, by_model, thumbnails))
    shown = {part["key"] for item in items for part in item["media"]}
    return {
        "run": evaluation.run_dir.path.name,
        "models": [{"name": m["name"], "step": m["step"]} for m in models],
        "headline": _headline(summary),
        "figures": _figures(evaluation.run_dir.path),
        "benchmarks": benchmarks,
        "items": items,
        # Only the media of this page's items: the table may hold those of an earlier page's too.
        "media": {key: thumbs for key, thumbs in thumbnails.table.items() if key in shown},
        "missing": {key: why for key, why in thumbnails.missing.items() if key in shown},
    }


def _answers(results: StoredResults, bench: str) -> dict[str, dict[str, Any]]:
    """Item id -> what one model said of it and how it scored."""
    found = {}
    for record, row in zip(results.records.get(bench, []), results.scored.get(bench, []), strict=True):
        answer: dict[str, Any] = {
            "p": _text(record.get("prediction")),
            "s": row["scores"],
            "c": row["categories"],
        }
        if "truncated_answer" in record:  # the interruption simulation: the model's own answer, cut
            answer["cut"] = record["truncated_answer"]
            simulation = record.get("simulation") or {}
            answer["sim"] = {k: simulation.get(k) for k in ("cut_tokens", "answer_tokens", "answer_finished")}
        judgements = record.get("judgements") or {}
        if judgements:
            answer["j"] = {
                m: {"score": j.get("score"), "raw": j.get("raw", "")} for m, j in judgements.items()
            }
        found[record["id"]] = answer
    return found


def _item(bench: str, sample: Sample, answers: dict[str, dict], thumbnails: Thumbnails) -> dict[str, Any]:
    meta = sample.meta
    item: dict[str, Any] = {
        "b": bench,
        "id": sample.id,
        "q": meta.get("question") or sample.turns[0].text,
        "ref": sample.turns[-1].text,
        "cat": _categories(answers),
        "media": thumbnails.of_sample(sample),
        "a": answers,
    }
    if meta.get("options"):
        item["opts"] = meta["options"]
    if "interruption_time" in meta:  # an OVIBench item: its timeline
        item["ovi"] = {
            "tq": meta.get("question_time"),
            "ti": meta.get("interruption_time"),
            "duration": meta.get("duration"),
            "type": meta.get("interruption_type"),
            "words": meta.get("interruption"),
            "partial": meta.get("partial_answer"),
            "format": meta.get("format"),
        }
        # Where the simulation cut the model's own answer (the same for every model: it follows the times).
        cuts = [a["sim"]["cut_tokens"] for a in answers.values() if (a.get("sim") or {}).get("cut_tokens")]
        if cuts:
            item["ovi"]["cut"] = cuts[0]
    return item


def _categories(answers: dict[str, dict]) -> dict[str, str]:
    """The item's categories, taken off every model's answer: they come from the item's meta, the same
    for every model."""
    found = [answer.pop("c", {}) for answer in answers.values()]
    return found[0]


def _text(prediction: Any) -> str:
    return prediction if isinstance(prediction, str) else json.dumps(prediction)


def _headline(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Each benchmark's overall metrics: every model's value, each checkpoint's delta and interval."""
    rows = []
    for bench, entry in summary.get("benchmarks", {}).items():
        for key, metric in entry.get("metrics", {}).items():
            if "/" in key:
                continue
            rows.append(
                {
                    "bench": bench,
                    "metric": key,
                    "graded": is_graded(bench, key),
                    "n": metric.get("n"),
                    "baseline": metric.get("baseline"),
                    "checkpoints": {
                        name: {k: point.get(k) for k in ("value", "delta", "delta_ci95", "mcnemar_p")}
                        for name, point in metric.get("checkpoints", {}).items()
                    },
                }
            )
    return rows


def _figures(run_dir: Path) -> list[dict[str, str]]:
    """The benchmarks' plots beside the report (PNG), inline."""
    return [
        {"name": png.name, "png": base64.b64encode(png.read_bytes()).decode("ascii")}
        for png in sorted(run_dir.glob("*.png"))
    ]


# ---------------------------------------------------------------------------------------------------
# `python -m eval view <run_dir>`


def view(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Write the viewer page of a finished run (a training's or ``python -m eval``'s) from its files.

    Raises:
        DataError: the directory holds no evaluation, or no config to find its items by.
    """
    from eval.evaluation import Evaluation

    directory = RunDir(run_dir)
    if not directory.models():
        raise DataError(str(directory.models_file), "not found: no evaluation in this run directory")
    run = _run_of(directory)
    evaluation = Evaluation(run, NullLogger(), FrameCache(run.cfg.data.frame_cache))
    models = directory.models()
    (first, _), *rest = models
    stored = {first: evaluation.read_results(first)}
    stored.update((name, evaluation.read_results(name, stored[first])) for name, _ in rest)
    summary = json.loads(directory.summary_file.read_text()) if directory.summary_file.exists() else None
    if summary is None:
        raise DataError(str(directory.summary_file), "not found: the run has no summary yet")
    return write_viewer(evaluation, summary, stored, Path(out) if out else None)


def _run_of(directory: RunDir) -> Run:
    """The run as its evaluation resolved it: a training's resolved config, else the config
    ``python -m eval`` composed (``.hydra/config.yaml``), resolved again."""
    if directory.config_file.exists():
        cfg = directory.read_config()
        return Run(replace(cfg, eval=resolve_settings(cfg.eval)), directory)
    composed = directory.path / _EVAL_CONFIG
    if not composed.exists():
        raise DataError(str(directory.config_file), "not found (nor .hydra/config.yaml): which run is this?")
    try:
        merged = OmegaConf.merge(OmegaConf.structured(EvalRunConfig), OmegaConf.load(composed))
        merged.run_dir = str(directory.path)  # where the run is now (it may have been moved or copied)
        cfg = OmegaConf.to_object(merged)
    except OmegaConfBaseException as err:
        raise DataError(str(composed), f"not an evaluation config: {str(err).splitlines()[0]}") from None
    from eval.run import resolve

    return resolve(cfg)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m eval view", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", help="a run directory with an evaluation (summary.json, eval/)")
    parser.add_argument("--out", default=None, help=f"the page to write (default: <run_dir>/{VIEWER_FILE})")
    args = parser.parse_args(argv)
    run_cli(lambda: print(f"viewer: {view(args.run_dir, args.out)}"))
