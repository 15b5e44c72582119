"""The few lines a run prints when it ends: each benchmark's headline metrics, the first model's values
and, with checkpoints, the last checkpoint's, its delta and the delta's 95% interval."""

from __future__ import annotations

from typing import Any

from core.vocab import INTERRUPTION_TYPES
from eval.benchmarks import BENCHMARKS
from eval.preference import delta_points
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
        for metric in known.headline if known else ():
            values = entry["metrics"].get(metric)
            if values:
                lines.append(f"  {bench} {metric}: {_line(metric, values, last)}")
        if entry.get("protocol"):
            lines.append(f"  {bench} protocol: {entry['protocol']}")
        for why in entry.get("not_comparable", {}).values():
            lines.append(f"  {bench} NOT COMPARABLE: {why}")
    lines += _preference_lines(summary.get("preference"), first, last)
    return "\n".join(lines)


def _preference_lines(entry: dict | None, first: str, last: str | None) -> list[str]:
    """Held-out preference accuracy (eval.preference), overall then per interruption type."""
    if not entry:
        return []
    if "not_scored" in entry:
        return [f"  preference pairs: not scored ({entry['not_scored']})"]
    base, point = entry["models"].get(first), entry["models"].get(last) if last else None
    if not base:
        return []
    lines = []
    for group in ("overall", *INTERRUPTION_TYPES):
        if group not in base:
            continue
        shown = f"{100 * base[group]['accuracy']:.1f}%"
        if point and group in point:
            mine = point[group]
            shown += f" -> {100 * mine['accuracy']:.1f}%  delta {delta_points(mine['delta'])} (95% CI)"
        lines.append(f"  preference pairs {group}: {shown} (n={base[group]['n']})")
    return lines


def _line(metric: str, values: dict[str, Any], last: str | None) -> str:
    base = _shown(metric, values["baseline"])
    point = values["checkpoints"].get(last) if last else None
    if point is None:
        return f"{base} (n={values['n']})"
    if point.get("delta") is None:
        return f"{base} -> {_shown(metric, point['value'])}  (no common items to pair)"
    low, high = point["delta_ci95"]
    if is_graded(metric):
        delta, interval = f"{point['delta']:+.2f} score points", f"[{low:+.2f}, {high:+.2f}]"
    else:
        delta, interval = f"{100 * point['delta']:+.1f} points", f"[{100 * low:+.1f}, {100 * high:+.1f}]"
    return f"{base} -> {_shown(metric, point['value'])}  delta {delta}, 95% CI {interval}"


def _shown(metric: str, value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.2f}" if is_graded(metric) else f"{100 * value:.1f}%"
