"""The few lines a run prints when it ends: each benchmark's headline metrics, the first model's values
and, with checkpoints, the last checkpoint's, its delta and the delta's 95% interval."""

from __future__ import annotations

from typing import Any

from eval.benchmarks import BENCHMARKS
from eval.summary import is_graded


def headline(summary: dict) -> str:
    """One line per headline metric; a benchmark's protocol and any comparability warning follow it."""
    if not summary.get("benchmarks"):
        return "nothing was evaluated"
    first = summary["baseline"]["name"]
    checkpoints = summary.get("checkpoints") or []
    last = checkpoints[-1]["name"] if checkpoints else None
    lines = [f"{first} vs {last}:" if last else f"{first}:"]
    for bench, entry in summary.get("benchmarks", {}).items():
        known = BENCHMARKS.get(bench)
        if entry.get("not_scored"):
            lines.append(f"  {bench}: NOT SCORED: {entry['not_scored']}")
        for metric in known.headline if known else ():
            values = entry["metrics"].get(metric)
            if values:
                lines.append(f"  {bench} {metric}: {_line(is_graded(bench, metric), values, last)}")
        if entry.get("protocol"):
            lines.append(f"  {bench} protocol: {entry['protocol']}")
        for why in entry.get("not_comparable", {}).values():
            lines.append(f"  {bench} NOT COMPARABLE: {why}")
    return "\n".join(lines)


def _line(graded: bool, values: dict[str, Any], last: str | None) -> str:
    base = _shown(graded, values["baseline"])
    point = values["checkpoints"].get(last) if last else None
    if point is None:
        return f"{base} (n={values['n']})"
    if point.get("delta") is None:
        return f"{base} -> {_shown(graded, point['value'])}  (no common items to pair)"
    low, high = point["delta_ci95"]
    if graded:
        delta, interval = f"{point['delta']:+.2f} score points", f"[{low:+.2f}, {high:+.2f}]"
    else:
        delta, interval = f"{100 * point['delta']:+.1f} points", f"[{100 * low:+.1f}, {100 * high:+.1f}]"
    return f"{base} -> {_shown(graded, point['value'])}  delta {delta}, 95% CI {interval}"


def _shown(graded: bool, value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.2f}" if graded else f"{100 * value:.1f}%"
