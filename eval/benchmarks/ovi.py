"""OVIBench: answering a question about a video when the user interrupts the answer halfway.

Multiple-choice items are scored by rule: ``ma`` (the right continuation chosen) and ``ca`` (the
interruption type named). Open-ended items are scored by the LLM judge on the metrics of
``eval/rubrics.py`` that apply to their interruption type; under ``eval.settings.ovi.protocol=simulated``
(the default) the model answers in its own words, is cut off at the interruption and reacts
(``models/ovi_simulation.py``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.answers import parse_ovi_mcq
from core.config import OviProtocol
from core.errors import ConfigError
from core.formats.ovi import load_ovibench
from core.sample import Sample
from core.vocab import INTERRUPTION_TYPES
from eval.benchmarks.base import Benchmark, Meta
from eval.radar import write_radar
from eval.rubrics import BINARY, METRICS, metrics_for
from eval.summary_schema import reference_name
from models.ovi_simulation import DEFAULT_TOKENS_PER_SECOND, MIN_CUT_TOKENS


@dataclass
class OviSettings:
    """``eval.settings.ovi``: the benchmark directory, the protocol and the answers' lengths."""

    root: str | None = None  # an OVIBench directory (ovibench.jsonl, videos/)
    protocol: OviProtocol = OviProtocol.simulated  # the paper's; teacher_forced is a cheaper proxy
    max_new_tokens: int = 64  # multiple-choice answers ("B (Correction)")
    max_new_tokens_open: int = 128  # open-ended reactions (batched apart, so MCQ batches stay short)


# The judge's 1-10 scores: means, not proportions.
GRADED_METRICS = frozenset(name for name, metric in METRICS.items() if metric.scale != BINARY)


def load(settings: OviSettings) -> list[Sample]:
    """The benchmark's items (validated; bad rows raise naming the file, line and field)."""
    if not settings.root:
        raise ConfigError("eval.settings.ovi.root is not set (an OVIBench directory)")
    return load_ovibench(settings.root)


def is_open(meta: Meta) -> bool:
    return meta["format"] == "open"


def is_open_item(sample: Sample) -> bool:
    """Whether a sample is an open OVIBench item: a reaction in words, judged, and simulated under the
    simulated protocol. GRPO picks the same items (its interruption rollouts, its open OVI rewards)."""
    return sample.task == "ovi" and is_open(sample.meta)


def score(prediction: str, meta: Meta) -> dict[str, float]:
    """MCQ: ``ma`` (answer) and ``ca`` (interruption type), 0/1; open-ended: ``{}`` (the judge scores)."""
    if is_open(meta):
        return {}
    letter, kind = parse_ovi_mcq(prediction or "")
    return {"ma": float(letter == meta["answer_letter"]), "ca": float(kind == meta["interruption_type"])}


def categories(meta: Meta) -> dict[str, str]:
    """Type and format; and the phrase bank of the interruption's words where the build recorded it, so
    the paraphrased items (held out from training in wording too) are reported apart."""
    found = {"type": meta["interruption_type"], "format": meta["format"]}
    if meta.get("phrasing"):
        found["phrasing"] = meta["phrasing"]
    return found


def max_new_tokens(meta: Meta, settings: OviSettings) -> int:
    """Open-ended reactions need sentences; a choice, a few tokens."""
    return settings.max_new_tokens_open if is_open(meta) else settings.max_new_tokens


def judged_metrics(meta: Meta) -> list[str]:
    return metrics_for(meta["interruption_type"]) if is_open(meta) else []


def simulated(meta: Meta, settings: OviSettings) -> bool:
    return is_open(meta) and settings.protocol == OviProtocol.simulated


# Said wherever ca_open is reported (eval/rubrics.py CA_OPEN has the evidence).
CA_OPEN_NOTE = (
    "the type the reaction implies, named by the judge (close to IAC); the paper's open-ended CA cannot be "
    "this (its Cancellation CA is 100% for every model, their IAC 51-96%), fits the model naming the type as "
    "in the multiple-choice form, and is not reproduced: the paper does not say how it was asked"
)


def notes(settings: OviSettings) -> dict[str, Any]:
    """The protocol, named in every output (the teacher-forced proxy is logged apart from the paper's),
    and the phrase banks the set was built with, when its ``build_info.json`` records them."""
    found: dict[str, Any] = {**_phrasings(settings.root), "reconstructed": {"ca_open": CA_OPEN_NOTE}}
    if settings.protocol == OviProtocol.simulated:
        protocol = "simulated: the paper's offline simulation (the model's own answer, interrupted)"
        return {"protocol": protocol, **found}
    protocol = (
        "teacher_forced: a cheaper proxy, NOT the paper's protocol (the dataset's partial answer is "
        "given as the model's own)"
    )
    return {"protocol": protocol, "logged_as": "ovi_teacher_forced", **found}


def _phrasings(root: str | None) -> dict[str, Any]:
    info = Path(root, "build_info.json") if root else None
    if info is None or not info.is_file():
        return {}  # a release, or a set built elsewhere: its wording is its own
    built = json.loads(info.read_text())
    phrasings = built.get("settings", {}).get("phrasings")
    return {"phrasings": {**phrasings, "rows": built.get("by_phrasing", {})}} if phrasings else {}


def radar(summary: dict[str, Any], out_dir: Path) -> list[str]:
    """The radar plot per interruption type (``eval.radar``), drawn beside the report, and its lines."""
    plot = write_radar(summary, out_dir)
    if plot is None:
        return []
    reference, last = reference_name(summary), summary.get("checkpoints")
    compared = f"{reference} vs {last[-1]['name']}" if last else reference
    return [
        f"### OVIBench per interruption type ({compared})",
        "",
        "CA and the judged metrics, each scaled to 0–1 (1–10 scores as (score − 1) / 9).",
        "",
        f"![OVIBench radar plot per interruption type]({plot.name})",
        "",
    ]


def viewer_timeline(meta: Meta, answers: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The item's timeline in the results viewer (``eval.viewer``): when the question is asked, when the
    user interrupts and how, and where the simulation cut the models' own answer."""
    timeline = {
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
        timeline["cut"] = cuts[0]
    return {"ovi": timeline}


def made_with(settings: OviSettings) -> dict[str, Any]:
    """Generation lengths and the protocol; under simulation, how the answer is cut."""
    recorded: dict[str, Any] = {
        "max_new_tokens": settings.max_new_tokens,
        "max_new_tokens_open": settings.max_new_tokens_open,
        "ovi_protocol": str(settings.protocol),  # the name results were stamped with before settings nodes
    }
    if settings.protocol == OviProtocol.simulated:
        recorded.update(
            ovi_cut="interruption_time",
            ovi_tokens_per_second=DEFAULT_TOKENS_PER_SECOND,
            ovi_min_cut_tokens=MIN_CUT_TOKENS,
        )
    return recorded


OVI = Benchmark(
    name="ovi",
    version=2,  # 2: the paper's protocol and aggregation; every judged metric on every type
    title="OVIBench",
    load=load,
    score=score,
    categories=categories,
    made_with=made_with,
    settings_class=OviSettings,
    max_new_tokens=max_new_tokens,
    headline=("ma", "ca"),
    graded=GRADED_METRICS,
    # rule-scored rates, the judge's rates, its 1-10 scores (ca_open, the judge's class, after them)
    metric_order=("ma", "ca", "iac", "ifa", "tfs", "ves", "cfs", "ccs"),
    category_order={"type": INTERRUPTION_TYPES, "phrasing": ("eval", "paraphrased", "train")},
    # The paper's overall numbers (Table 2) are item-level means over its set: one weight per type fitted to
    # all six judged metrics of five of its six models gives its shares, 25.8 / 49.5 / 24.7% (Cancellation
    # / Correction / False Trigger), not an exact 1:2:1 weighting. Intervals are resampled within each type.
    strata="type",
    judged_metrics=judged_metrics,
    simulated=simulated,
    notes=notes,
    figures=radar,
    viewer_item=viewer_timeline,
    synthetic="ovibench",
)
