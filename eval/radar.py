"""A radar plot of OVIBench per interruption type: baseline vs the last checkpoint, written as a PNG.

Each type gets one panel whose axes are CA and the judged metrics that apply to that type, every score
scaled to [0, 1] (rates as they are, 1–10 judge scores as ``(score - 1) / 9``) so the axes compare.
matplotlib is imported only here and only when a plot is drawn; without it no plot is written.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from core.files import atomic_path
from core.rundir import RunDir
from eval.rubrics import ALL_TYPES, BINARY, METRICS
from eval.summary_schema import reference_name

RADAR_FILE = "ovi_radar.png"
AXES = ("ca", *METRICS)  # in the order drawn, clockwise from the top
_MIN_AXES = 3  # fewer than three spokes make no polygon worth reading


def normalise(key: str, value: float) -> float:
    """A score on [0, 1]: rates unchanged, 1–10 judge scores mapped linearly (1 -> 0, 10 -> 1)."""
    metric = METRICS.get(key.split("/", 1)[0])
    return value if metric is None or metric.scale == BINARY else (value - 1.0) / 9.0


def radar_panels(summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per interruption type, the axes and the scaled series to draw.

    Returns:
        type -> ``{"axes": [metric, ...], "series": {model name: [value per axis]}}`` with the baseline
        and, when there is one, the last checkpoint that has OVIBench results. An axis is kept only when
        every series has a value on it; a type with fewer than three axes is left out.
    """
    metrics = summary.get("benchmarks", {}).get("ovi", {}).get("metrics", {})
    checkpoints = [c["name"] for c in summary.get("checkpoints", [])]
    last = next((name for name in reversed(checkpoints) if _has_results(metrics, name)), None)
    panels = {}
    for kind in ALL_TYPES:
        reference = reference_name(summary)
        values: dict[str, dict[str, float]] = {reference: {}, **({last: {}} if last else {})}
        for axis in AXES:
            entry = metrics.get(f"{axis}/type/{kind}")
            if entry is None:
                continue
            point = {reference: entry["baseline"]}
            if last:
                point[last] = (entry["checkpoints"].get(last) or {}).get("value")
            if all(value is not None for value in point.values()):
                for name, value in point.items():
                    values[name][axis] = normalise(axis, value)
        axes = [axis for axis in AXES if axis in values[reference]]
        if len(axes) >= _MIN_AXES:
            panels[kind] = {"axes": axes, "series": {n: [v[a] for a in axes] for n, v in values.items()}}
    return panels


def _has_results(metrics: dict[str, Any], name: str) -> bool:
    return any(name in entry["checkpoints"] for entry in metrics.values())


def write_radar(summary: dict[str, Any], run_dir: str | os.PathLike[str]) -> Path | None:
    """Draw the panels of ``radar_panels`` into ``<run_dir>/ovi_radar.png`` (atomically).

    Returns:
        The PNG's path, or None when there is nothing to draw or matplotlib is not installed.
    """
    panels = radar_panels(summary)
    if not panels:
        return None
    try:
        from matplotlib.figure import Figure  # no pyplot: no global state, no display needed
    except ImportError:
        return None
    figure = Figure(figsize=(4.2 * len(panels), 5.0), layout="constrained")
    for index, (kind, panel) in enumerate(panels.items(), start=1):
        ax = _draw_panel(figure.add_subplot(1, len(panels), index, projection="polar"), kind, panel)
    figure.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncols=2)
    path = RunDir(run_dir).figure_file(RADAR_FILE)
    with atomic_path(path) as tmp:
        figure.savefig(tmp, format="png", dpi=100)
    return path


def _draw_panel(ax: Any, kind: str, panel: dict[str, Any]) -> Any:
    axes = panel["axes"]
    angles = [2 * math.pi * i / len(axes) for i in range(len(axes))]
    for name, values in panel["series"].items():
        # The first point is repeated at the end to close the polygon.
        ax.plot([*angles, angles[0]], [*values, values[0]], linewidth=1.5, label=name)
        ax.fill([*angles, angles[0]], [*values, values[0]], alpha=0.15)
    ax.set_theta_offset(math.pi / 2)
    ax.set_theta_direction(-1)
    ax.set_xticks(angles)
    ax.set_xticklabels([axis.upper() for axis in axes])
    ax.set_ylim(0.0, 1.0)
    ax.set_yticks([0.25, 0.5, 0.75, 1.0])
    ax.set_yticklabels([])
    ax.set_title(kind, pad=18, fontweight="bold")
    return ax
