"""Paired statistics for baseline-vs-checkpoint comparisons on the same benchmark items.

Both functions take per-item scores aligned by position: ``baseline[i]`` and ``tuned[i]`` are the same
item. Pairing matters: items differ far more in difficulty than two models differ in skill, so an
unpaired test would bury a real gain in item noise.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import comb

import numpy as np

# Bound on resample-by-item index matrices held at once (int64 entries), so large benchmarks stay cheap.
_MAX_INDEX_ENTRIES = 4_000_000


def paired_bootstrap(
    baseline: Sequence[float],
    tuned: Sequence[float],
    n_resamples: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
    strata: Sequence[str] | None = None,
    weights: dict[str, float] | None = None,
) -> dict[str, float | int]:
    """Bootstrap confidence interval for ``mean(tuned) - mean(baseline)`` over paired items.

    Each resample draws item indices with replacement and applies them to both sequences jointly,
    so an item's baseline and tuned scores always travel together. With ``strata`` the mean is a weighted
    mean of the strata's means (with count weights, OVIBench's item-level overall numbers) and each stratum
    is resampled on its own, keeping its size.

    Args:
        baseline: per-item scores of the baseline model.
        tuned: per-item scores of the tuned model, same items in the same order.
        n_resamples: number of bootstrap resamples.
        seed: seed of the resampling generator; equal inputs and seed give equal intervals.
        confidence: coverage of the percentile interval, in (0, 1).
        strata: each item's stratum (e.g. its interruption type), same order; None: one plain mean.
        weights: stratum -> weight (see :func:`weighted_mean`).

    Returns:
        ``{"delta": observed difference of means, "ci_low": ..., "ci_high": ..., "n": number of items}``.

    Raises:
        ValueError: on empty input, a length mismatch, ``n_resamples < 1`` or ``confidence`` outside (0, 1).
    """
    differences = _paired_differences(baseline, tuned)
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    rng = np.random.default_rng(seed)
    if strata is None:
        delta, resampled = float(differences.mean()), _resampled_means(differences, n_resamples, rng)
    else:
        groups = _groups(strata, differences.size)
        delta = weighted_mean({k: float(differences[i].mean()) for k, i in groups.items()}, weights)
        means = {key: _resampled_means(differences[i], n_resamples, rng) for key, i in groups.items()}
        resampled = weighted_mean(means, weights)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(resampled, [tail, 1.0 - tail])
    return {
        "delta": float(delta),
        "ci_low": float(low),
        "ci_high": float(high),
        "n": int(differences.size),
    }


def weighted_mean(
    means: dict[str, float | np.ndarray], weights: dict[str, float] | None
) -> float | np.ndarray:
    """The weighted mean of per-stratum means (weights renormalised over the strata present; a stratum
    without a weight counts 1)."""
    weights = weights or {}
    total = sum(weights.get(key, 1.0) for key in means)
    return sum(weights.get(key, 1.0) * value for key, value in means.items()) / total


def _groups(strata: Sequence[str], n: int) -> dict[str, np.ndarray]:
    """Item indices per stratum, in sorted stratum order (so a seed gives the same draws)."""
    if len(strata) != n:
        raise ValueError(f"strata and scores differ in length: {len(strata)} vs {n}")
    labels = np.asarray(strata, dtype=object)
    return {key: np.flatnonzero(labels == key) for key in sorted(set(strata))}


def _paired_differences(baseline: Sequence[float], tuned: Sequence[float]) -> np.ndarray:
    base = np.asarray(baseline, dtype=float)
    tune = np.asarray(tuned, dtype=float)
    if base.ndim != 1 or tune.ndim != 1:
        raise ValueError("baseline and tuned must be flat sequences of per-item scores")
    if base.size != tune.size:
        raise ValueError(f"paired scores differ in length: {base.size} baseline vs {tune.size} tuned")
    if base.size == 0:
        raise ValueError("paired scores are empty")
    return tune - base


def _resampled_means(differences: np.ndarray, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Means of ``n_resamples`` bootstrap resamples of ``differences``, drawn in memory-bounded chunks."""
    n = differences.size
    chunk = max(1, _MAX_INDEX_ENTRIES // n)
    means = np.empty(n_resamples)
    for start in range(0, n_resamples, chunk):
        stop = min(start + chunk, n_resamples)
        indices = rng.integers(0, n, size=(stop - start, n))
        means[start:stop] = differences[indices].mean(axis=1)
    return means


def mcnemar_p(baseline_correct: Sequence[float | bool], tuned_correct: Sequence[float | bool]) -> float:
    """Exact two-sided McNemar test on paired right/wrong outcomes.

    Only discordant items count: ``b`` = baseline right and tuned wrong, ``c`` = the reverse. Under the
    null hypothesis each discordant item goes either way with probability 1/2, so the p-value is
    ``min(1, 2 * P(Binomial(b + c, 1/2) <= min(b, c)))``, computed exactly in integers.

    Args:
        baseline_correct: per-item correctness of the baseline (truthy = right).
        tuned_correct: per-item correctness of the tuned model, same items in the same order.

    Returns:
        The p-value; 1.0 when there are no discordant items.

    Raises:
        ValueError: on a length mismatch.
    """
    if len(baseline_correct) != len(tuned_correct):
        lengths = f"{len(baseline_correct)} baseline vs {len(tuned_correct)} tuned"
        raise ValueError(f"paired outcomes differ in length: {lengths}")
    pairs = [(bool(b), bool(t)) for b, t in zip(baseline_correct, tuned_correct, strict=True)]
    only_baseline = sum(1 for b, t in pairs if b and not t)
    only_tuned = sum(1 for b, t in pairs if t and not b)
    discordant = only_baseline + only_tuned
    if discordant == 0:
        return 1.0
    tail = sum(comb(discordant, k) for k in range(min(only_baseline, only_tuned) + 1))
    # Integer numerator and denominator: true division of big ints is correctly rounded.
    return min(1.0, 2 * tail / 2**discordant)
