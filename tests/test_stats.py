"""Paired bootstrap and exact McNemar test on hand-computed cases."""

from __future__ import annotations

import pytest

from eval import stats
from eval.stats import mcnemar_p, paired_bootstrap


def test_bootstrap_separated_case_excludes_zero() -> None:
    baseline = [1.0] * 20 + [0.0] * 80  # 20% correct
    tuned = [1.0] * 90 + [0.0] * 10  # 90% correct, every baseline success kept
    result = paired_bootstrap(baseline, tuned)
    assert result["n"] == 100
    assert result["delta"] == pytest.approx(0.7)
    assert result["ci_low"] <= 0.7 <= result["ci_high"]
    assert result["ci_low"] > 0.0


def test_bootstrap_identical_scores_give_a_zero_interval() -> None:
    scores = [1.0, 0.0, 1.0, 1.0, 0.0]
    result = paired_bootstrap(scores, scores)
    assert result == {"delta": 0.0, "ci_low": 0.0, "ci_high": 0.0, "n": 5}


def test_bootstrap_balanced_changes_include_zero() -> None:
    # 10 items flip wrong->right, 10 flip right->wrong, 80 unchanged: the true delta is 0.
    baseline = [0.0] * 10 + [1.0] * 10 + [1.0] * 40 + [0.0] * 40
    tuned = [1.0] * 10 + [0.0] * 10 + [1.0] * 40 + [0.0] * 40
    result = paired_bootstrap(baseline, tuned)
    assert result["delta"] == 0.0
    assert result["ci_low"] < 0.0 < result["ci_high"]


def test_bootstrap_is_deterministic_for_a_seed() -> None:
    baseline = [0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0]
    tuned = [1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0]
    first = paired_bootstrap(baseline, tuned, seed=7)
    assert paired_bootstrap(baseline, tuned, seed=7) == first
    assert first["delta"] == pytest.approx(3 / 8)


def test_bootstrap_chunking_does_not_change_the_result(monkeypatch: pytest.MonkeyPatch) -> None:
    baseline = [float(i % 3 == 0) for i in range(50)]
    tuned = [float(i % 2 == 0) for i in range(50)]
    whole = paired_bootstrap(baseline, tuned, n_resamples=300)
    monkeypatch.setattr(stats, "_MAX_INDEX_ENTRIES", 120)  # 2 resamples per chunk
    assert paired_bootstrap(baseline, tuned, n_resamples=300) == whole


@pytest.mark.parametrize(
    ("baseline", "tuned", "message"),
    [([], [], "empty"), ([1.0], [1.0, 0.0], "length")],
)
def test_bootstrap_rejects_bad_input(baseline: list[float], tuned: list[float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        paired_bootstrap(baseline, tuned)


def test_bootstrap_rejects_bad_confidence() -> None:
    with pytest.raises(ValueError, match="confidence"):
        paired_bootstrap([1.0], [0.0], confidence=1.0)


@pytest.mark.parametrize(
    ("baseline", "tuned", "expected"),
    [
        # 5 discordant, all towards tuned: 2 * (1/2)^5
        ([0] * 5 + [1] * 3, [1] * 5 + [1] * 3, 0.0625),
        # 1 vs 9 discordant: 2 * (C(10,0) + C(10,1)) / 2^10 = 22 / 1024
        ([1] + [0] * 9, [0] + [1] * 9, 22 / 1024),
        # 3 vs 3: the doubled tail exceeds 1 and is capped
        ([1, 1, 1, 0, 0, 0], [0, 0, 0, 1, 1, 1], 1.0),
        # no discordant pairs
        ([1, 0, 1], [1, 0, 1], 1.0),
    ],
)
def test_mcnemar_exact(baseline: list[int], tuned: list[int], expected: float) -> None:
    assert mcnemar_p(baseline, tuned) == pytest.approx(expected)


def test_mcnemar_is_symmetric_and_checks_length() -> None:
    assert mcnemar_p([1, 1, 0], [0, 0, 0]) == mcnemar_p([0, 0, 0], [1, 1, 0])
    with pytest.raises(ValueError, match="length"):
        mcnemar_p([1], [1, 0])
