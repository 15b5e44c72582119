"""The results viewer: one self-contained HTML page of a run's evaluation, baseline against every checkpoint.

The evaluation writes the page beside ``report.md`` whenever it writes the report (``Evaluation``, through
a :class:`Viewer`); ``python -m eval view`` (``eval.view``) writes it again from a finished run's files.
The page opens from disk with no server and no network: its data (one JSON object), its script and its
thumbnails are inline. On top: the headline metrics of every model with the deltas and their 95% intervals,
as bars, and the benchmarks' own plots (the OVIBench radar). Below: every item with the frames the model
saw (``eval.viewer_media``), its question, options and reference, and each model's answer and scores, with
what its benchmark adds (``Benchmark.viewer_item``: for an OVIBench item the timeline of the interruption;
then the cut answer, the reaction, and the judge's scores with its raw verdict); filters, search and paging
run in the page, so a 10,000-item run stays fast (only one page of items is ever drawn).
"""

from __future__ import annotations

import base64
import json
import warnings
from pathlib import Path
from typing import Any

from core.decoding import MediaSpec
from core.files import write_text_atomic
from core.media import FrameCache
from core.rundir import RunDir
from core.sample import Sample
from eval.benchmarks.base import Benchmark
from eval.suites import StoredResults, Suite
from eval.summary import is_graded
from eval.viewer_media import Thumbnails

_TEMPLATE = Path(__file__).with_name("viewer_page.html")
_DATA_MARK = "/*__VIEWER_DATA__*/null"


class Viewer:
    """The viewer page of one run, written from its suites, summary and stored results.

    It keeps the thumbnails it has made: a training writes the page after every checkpoint's evaluation,
    and its items (so their frames) stay the same, so each is encoded once, not once per page.

    Args:
        run_dir: the run (its name, its plots, and where the page goes: ``viewer.html``).
        media: the run's media spec (the frames the model saw).
        frame_cache_dir: the run's frame cache (``data.frame_cache``), read and never created
            (:func:`frame_cache`).
        follow_on: the family samples a video's later spans at its first span's rate
            (``models.chat.follows_on``).
    """

    def __init__(self, run_dir: RunDir, media: MediaSpec, frame_cache_dir: str | None, follow_on: bool):
        self.run_dir = run_dir
        self.thumbnails = Thumbnails(media, frame_cache(frame_cache_dir), follow_on)

    def write(
        self,
        suites: dict[str, Suite],
        summary: dict[str, Any],
        stored: dict[str, StoredResults],
        out: Path | None = None,
    ) -> Path:
        """Write the page (``<run_dir>/viewer.html`` unless ``out``); returns its path.

        Args:
            suites: the run's benchmarks, their items in order.
            summary: the run's summary, as just written.
            stored: each model's results as the summary read them (records and their scores), in model order.
        """
        data = page_data(suites, self.run_dir, summary, stored, self.thumbnails)
        path = Path(out) if out else self.run_dir.viewer_file
        write_text_atomic(path, render_page(data))
        return path

    def write_quietly(
        self, suites: dict[str, Suite], summary: dict[str, Any], stored: dict[str, StoredResults]
    ) -> None:
        """:meth:`write` for the evaluation's own outputs: a page that cannot be written is a warning,
        never the end of a training (the summary and the report are written already)."""
        try:
            self.write(suites, summary, stored)
        except Exception as err:  # noqa: BLE001 - any failure of the page must leave the run going
            warnings.warn(f"the results viewer was not written: {type(err).__name__}: {err}", stacklevel=2)


def frame_cache(root: str | None) -> FrameCache:
    """The run's frame cache, to read the clips its evaluation decoded; none (decode, store nothing) where
    the run has no cache directory, or its path was never resolved (a config built in code keeps
    ``${output_root}/frame_cache`` as it is): the page never creates a cache of its own."""
    if not root or "${" in str(root) or not Path(root).is_dir():
        return FrameCache(None)
    return FrameCache(root)


def render_page(data: dict[str, Any]) -> str:
    """The page: the template with ``data`` inline (``</`` escaped, so no string can close the script)."""
    blob = json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("</", "<\\/")
    return _TEMPLATE.read_text().replace(_DATA_MARK, blob)


# ---------------------------------------------------------------------------------------------------
# The page's data


def page_data(
    suites: dict[str, Suite],
    run_dir: RunDir,
    summary: dict[str, Any],
    stored: dict[str, StoredResults],
    thumbnails: Thumbnails,
) -> dict[str, Any]:
    """Everything the page shows, as one JSON object (the template's script reads it)."""
    models = [summary["baseline"], *summary.get("checkpoints", [])]
    items = []
    benchmarks = {}
    for bench, suite in suites.items():
        answers = {name: _answers(results, bench) for name, results in stored.items()}
        if not any(answers.values()):
            continue
        benchmarks[bench] = {"title": suite.bench.title, "primary": list(suite.bench.headline)}
        for sample in suite.samples:
            by_model = {name: found[sample.id] for name, found in answers.items() if sample.id in found}
            if by_model:
                items.append(_item(suite.bench, sample, by_model, thumbnails))
    shown = {part["key"] for item in items for part in item["media"]}
    return {
        "run": run_dir.path.name,
        "models": [{"name": m["name"], "step": m["step"]} for m in models],
        "headline": _headline(summary),
        "figures": _figures(run_dir),
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


def _item(
    bench: Benchmark, sample: Sample, answers: dict[str, dict], thumbnails: Thumbnails
) -> dict[str, Any]:
    meta = sample.meta
    item: dict[str, Any] = {
        "b": bench.name,
        "id": sample.id,
        "q": meta.get("question") or sample.turns[0].text,
        "ref": sample.turns[-1].text,
        "cat": _categories(answers),
        "media": thumbnails.of_sample(sample),
        "a": answers,
    }
    if meta.get("options"):
        item["opts"] = meta["options"]
    item.update(bench.viewer_item(meta, answers))  # what the benchmark draws of its own (OVIBench's timeline)
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


def _figures(run_dir: RunDir) -> list[dict[str, str]]:
    """The benchmarks' plots beside the report (PNG), inline."""
    return [
        {"name": png.name, "png": base64.b64encode(png.read_bytes()).decode("ascii")}
        for png in run_dir.figure_files()
    ]
