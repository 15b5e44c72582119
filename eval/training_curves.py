"""The training's curves for the report: what the trainer logged per step (``metrics.jsonl``), averaged over
at most :data:`WINDOWS` windows of steps: the loss and, under GRPO, the weighted reward, each reward's mean
and the KL to the reference. Where a resumed run logged a step twice, its last entry counts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.files import JsonlStore
from core.metric_logging import STEP_KEY

WINDOWS = 10
_CURVES = ("train/loss", "train/reward", "train/kl")  # and every train/rewards/<name>/mean


def _is_curve(key: str) -> bool:
    return key in _CURVES or (key.startswith("train/rewards/") and key.endswith("/mean"))


def training_curves(metrics_file: Path) -> dict[str, Any] | None:
    """``{"steps": [last step of each window], "curves": {name: [window means, null where unlogged]}}``
    (names without ``train/``), or None when the file holds no training curve."""
    if not metrics_file.exists():
        return None
    by_step: dict[int, dict[str, float]] = {}
    for entry in JsonlStore(metrics_file, key=STEP_KEY).lines():
        values = {k: v for k, v in entry.items() if _is_curve(k) and isinstance(v, (int, float))}
        if values and STEP_KEY in entry:
            by_step.setdefault(int(entry[STEP_KEY]), {}).update(values)
    if not by_step:
        return None
    steps = sorted(by_step)
    size = -(-len(steps) // WINDOWS)
    windows = [steps[i : i + size] for i in range(0, len(steps), size)]
    names = sorted({key for values in by_step.values() for key in values}, key=_order)
    curves = {}
    for name in names:
        means = []
        for window in windows:
            logged = [by_step[step][name] for step in window if name in by_step[step]]
            means.append(sum(logged) / len(logged) if logged else None)
        curves[name.removeprefix("train/")] = means
    return {"steps": [window[-1] for window in windows], "curves": curves}


def _order(key: str) -> tuple[int, str]:
    return (_CURVES.index(key), key) if key in _CURVES else (len(_CURVES), key)
