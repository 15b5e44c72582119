"""The few lines a run prints when it ends: each benchmark's headline metrics, baseline → last checkpoint."""

from __future__ import annotations

HEADLINE_METRICS = {"v2p": ("accuracy",), "ovi": ("ma", "ca")}


def headline(summary: dict) -> str:
    """One line per headline metric: baseline, the last checkpoint, the delta and its 95% interval."""
    if not summary.get("checkpoints"):
        return "no checkpoint was evaluated"
    last = summary["checkpoints"][-1]["name"]
    lines = [f"baseline vs {last}:"]
    for bench, metrics in HEADLINE_METRICS.items():
        table = summary.get("benchmarks", {}).get(bench, {}).get("metrics", {})
        for metric in metrics:
            entry = table.get(metric)
            point = entry and entry["checkpoints"].get(last)
            if not point or point.get("delta") is None:
                continue
            low, high = point["delta_ci95"]
            lines.append(
                f"  {bench} {metric}: {100 * entry['baseline']:.1f}% -> {100 * point['value']:.1f}%  "
                f"delta {100 * point['delta']:+.1f} points, 95% CI [{100 * low:+.1f}, {100 * high:+.1f}]"
            )
    return "\n".join(lines)
