"""What every V2P diagnostic shares: the benchmark made from V2P's items, its line in the report, and the
copies of a sample that the transforms make."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from core.sample import Part, Sample, Turn
from eval.benchmarks.base import Benchmark, SummaryContext
from eval.benchmarks.v2p import V2P

# A diagnostic's title and what its numbers mean, for report.md.
Description = tuple[str, str]
# ``(summary entry, show, (reference, last model)) -> the numbers of the diagnostic's report line``.
ShowNumbers = Callable[[dict[str, Any], Callable[[str], str], tuple], str]


def derived_summary(context: SummaryContext) -> dict[str, Any]:
    """The diagnostic's account of its items (what was left out, or why it was skipped)."""
    return {"derived": dict(context.info)}


def _accuracy_numbers(entry, show, models) -> str:
    return f"accuracy {show('accuracy')}"


def diagnostic(
    name: str,
    description: Description,
    derive,
    numbers: ShowNumbers = _accuracy_numbers,
    score=V2P.score,
    categories=V2P.categories,
    made_with=V2P.made_with,
    metric_order=V2P.metric_order,
    summary=derived_summary,
    logged=None,
) -> Benchmark:
    """A benchmark derived from V2P's items (same generation and settings, same reports), with its line in
    the report's Diagnostics section."""
    return Benchmark(
        name=name,
        version=1,
        title=f"V2P-Bench diagnostic: {description[0]}",
        source="v2p",
        derive=derive,
        score=score,
        categories=categories,
        made_with=made_with,
        max_new_tokens=V2P.max_new_tokens,
        metric_order=metric_order,
        category_order=V2P.category_order,
        summary=summary,
        report_lines=_report_line(name, description, numbers),
        **({"logged": logged} if logged else {}),
    )


# ---------------------------------------------------------------------------------------------------
# The report's line per diagnostic: its numbers (reference -> last model) and what they mean


def _report_line(name: str, description: Description, show_numbers: ShowNumbers):
    """The ``report_lines`` hook of the diagnostic ``name``, whose numbers ``show_numbers(entry, show,
    models)`` says."""

    def lines(entry: dict[str, Any], models: tuple[str, str | None]) -> list[str]:
        title, meaning = description
        info = entry.get("derived", {})
        if "skipped" in info:
            return [f"- **{title}** (`{name}`): {info['skipped']}."]
        show = _shown(entry.get("metrics", {}), models[1])
        left_out = f" {info['n_left_out']} item(s) left out." if info.get("n_left_out") else ""
        numbers = show_numbers(entry, show, models)
        return [f"- **{title}** (`{name}`, {info.get('n_items', 0)} items): {numbers}.{left_out} *{meaning}*"]

    return lines


def _shown(metrics: dict[str, Any], last: str | None) -> Callable[[str], str]:
    def show(key: str) -> str:
        metric = metrics.get(key)
        if metric is None:
            return "–"
        values = [percent(metric["baseline"])]
        if last:
            point = metric["checkpoints"].get(last)
            values.append(percent(point["value"] if point else None))
        return " → ".join(values)

    return show


def percent(value: float | None) -> str:
    """A rate as the report shows it (one decimal, ``–`` for none)."""
    return "–" if value is None else f"{round(value * 100, 1) + 0.0:.1f}"


# ---------------------------------------------------------------------------------------------------
# Copies of a sample


def derived_sample(
    sample: Sample, diagnostic: str, variant: str, *, parts: Callable[[list[Part]], list[Part]]
) -> Sample:
    """A copy with its user turns' parts mapped by ``parts`` and the diagnostic named in ``meta``.

    ``meta["variant"]`` tells a resumed evaluation whether a stored result was made from this very input.
    """
    meta = {**sample.meta, "diagnostic": diagnostic, "variant": variant}
    return replace(sample, turns=_map_user_parts(sample, parts), meta=meta)


def with_question(sample: Sample, question: str) -> Sample:
    """A copy whose question text part (and ``meta["question"]``) is ``question``."""
    old = sample.meta["question"]

    def swap(part: Part) -> Part:
        return Part.txt(question) if part.type == "text" and part.text == old else part

    turns = _map_user_parts(sample, lambda parts: [swap(p) for p in parts])
    return replace(sample, turns=turns, meta={**sample.meta, "question": question})


def _map_user_parts(sample: Sample, parts: Callable[[list[Part]], list[Part]]) -> list[Turn]:
    """New turns: the user turns' parts mapped by ``parts``, the other turns' parts shared (never mutated)."""
    return [Turn(t.role, parts(list(t.parts)) if t.role == "user" else t.parts, t.loss) for t in sample.turns]
