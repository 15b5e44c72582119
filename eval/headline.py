"""The few lines a run prints when it ends: each benchmark's headline metrics, baseline → last checkpoint."""

from __future__ import annotations

from eval.benchmarks import BENCHMARKS


def headline(summary: dict) -> str:
    """One line per headline metric: baseline, the last checkpoint, the delta and its 95% interval."""
    if not summary.get("checkpoints"):
        return "no checkpoint was evaluated"
    last = summary["checkpoints"][-1]["name"]
    lines = [f"baseline vs {last}:"]
    for bench, entry in summary.get("benchmarks", {}).items():
        known = BENCHMARKS.get(bench)
        for metric in known.headline if known else ():
            values = entry["metrics"].get(metric)
            point = values and values["checkpoints"].get(last)
            if not point or point.get("delta") is None:
                continue
            low, high = point["delta_ci95"]
            lines.append(
                f"  {bench} {metric}: {100 * values['baseline']:.1f}% -> {100 * point['value']:.1f}%  "
                f"delta {100 * point['delta']:+.1f} points, 95% CI [{100 * low:+.1f}, {100 * high:+.1f}]"
            )
    return "\n".join(lines)
