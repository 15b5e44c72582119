from eval.headline import headline


def _metric(baseline, value, delta, low, high):
    return {
        "baseline": baseline,
        "checkpoints": {"checkpoint-9": {"value": value, "delta": delta, "delta_ci95": [low, high]}},
    }


def test_headline_prints_baseline_last_checkpoint_delta_and_interval():
    summary = {
        "checkpoints": [{"name": "checkpoint-9", "step": 9}],
        "benchmarks": {
            "v2p": {"metrics": {"accuracy": _metric(0.25, 0.5, 0.25, 0.125, 0.375)}},
            "ovi": {"metrics": {"ca": _metric(0.1, 0.9, 0.8, 0.7, 0.9)}},
        },
    }
    text = headline(summary)
    assert "v2p accuracy: 25.0% -> 50.0%  delta +25.0 points, 95% CI [+12.5, +37.5]" in text
    assert "ovi ca: 10.0% -> 90.0%  delta +80.0 points, 95% CI [+70.0, +90.0]" in text
    assert "ovi ma" not in text  # absent metrics are skipped, not invented


def test_headline_without_checkpoints_says_so():
    assert headline({"checkpoints": []}) == "no checkpoint was evaluated"
