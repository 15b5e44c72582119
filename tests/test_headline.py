from eval.headline import headline


def _metric(baseline, value, delta, low, high, n=8):
    return {
        "baseline": baseline,
        "n": n,
        "checkpoints": {"checkpoint-9": {"value": value, "delta": delta, "delta_ci95": [low, high]}},
    }


def test_headline_prints_baseline_last_checkpoint_delta_and_interval():
    summary = {
        "baseline": {"name": "baseline", "step": 0},
        "checkpoints": [{"name": "checkpoint-9", "step": 9}],
        "benchmarks": {
            "v2p": {"metrics": {"accuracy": _metric(0.25, 0.5, 0.25, 0.125, 0.375)}},
            "ovi": {
                "metrics": {"ca": _metric(0.1, 0.9, 0.8, 0.7, 0.9)},
                "protocol": "simulated: the paper's",
            },
        },
    }
    text = headline(summary)
    assert text.splitlines()[0] == "baseline vs checkpoint-9:"
    assert "v2p accuracy: 25.0% -> 50.0%  delta +25.0 points, 95% CI [+12.5, +37.5]" in text
    assert "ovi ca: 10.0% -> 90.0%  delta +80.0 points, 95% CI [+70.0, +90.0]" in text
    assert "ovi protocol: simulated: the paper's" in text
    assert "ovi ma" not in text  # absent metrics are skipped, not invented


def test_a_single_model_headline_prints_its_values_under_its_own_name():
    summary = {
        "baseline": {"name": "checkpoint-40", "step": 0},
        "checkpoints": [],
        "benchmarks": {
            "v2p": {"metrics": {"accuracy": {"baseline": 0.375, "n": 8, "checkpoints": {}}}},
            "ovi": {
                "metrics": {"ma": {"baseline": 0.5, "n": 4, "checkpoints": {}}},
                "not_comparable": {"model": "media spec differs"},
            },
        },
    }
    assert headline(summary).splitlines() == [
        "checkpoint-40:",
        "  v2p accuracy: 37.5% (n=8)",
        "  ovi ma: 50.0% (n=4)",
        "  ovi NOT COMPARABLE: media spec differs",
    ]


def test_a_run_that_evaluated_nothing_says_so():
    assert headline({}) == "nothing was evaluated"
    assert headline({"baseline": {"name": "baseline"}, "checkpoints": [], "benchmarks": {}}) == (
        "nothing was evaluated"
    )


def test_held_out_preference_pairs_print_overall_then_per_type_and_a_served_run_says_they_are_not_scored():
    summary = {
        "baseline": {"name": "baseline", "step": 0},
        "checkpoints": [{"name": "checkpoint-9", "step": 9}],
        "benchmarks": {
            "ovi_pairs": {
                "metrics": {
                    "accuracy": _metric(0.5, 0.6, 0.1, 0.05, 0.15, n=10),
                    "accuracy/type/Cancellation": _metric(0.25, 0.75, 0.5, 0.45, 0.55, n=4),
                }
            }
        },
    }
    assert headline(summary).splitlines()[1:] == [
        "  ovi_pairs accuracy: 50.0% -> 60.0%  delta +10.0 points, 95% CI [+5.0, +15.0]",
        "  ovi_pairs accuracy/type/Cancellation: 25.0% -> 75.0%  delta +50.0 points, 95% CI [+45.0, +55.0]",
    ]
    served = {**summary, "benchmarks": {"ovi_pairs": {"metrics": {}, "not_scored": "served"}}}
    assert headline(served).splitlines()[1:] == ["  ovi_pairs: NOT SCORED: served"]


def test_python_m_eval_on_a_real_model_composes_the_official_media_and_names_it():
    """A real checkpoint gets V2P-Bench's official input by default (it got the tiny models' 8 frames of
    at most 84x84 unless media=qwen_64f was passed); the tiny models keep the tiny media; media= on the
    command line wins; the V2P protocol line says which input the scores were made with."""
    from configs import compose

    from eval.benchmarks.base import SummaryContext
    from eval.benchmarks.v2p import V2P

    def protocol(cfg):
        return V2P.summary(SummaryContext(None, cfg.media, {}, {}))["protocol"]

    for model in ("qwen2_5_vl_7b", "qwen2_vl_7b", "qwen3_vl_8b", "internvl_8b", "llava_onevision_7b"):
        for entry in ("eval", "train"):
            cfg = compose(entry, f"model={model}")
            assert cfg.media.num_frames == 64 and cfg.media.image_max_pixels == 8192 * 28 * 28, (entry, model)
            assert protocol(cfg).startswith("the official input"), (entry, model)
    real = compose("eval", "model=qwen2_5_vl_7b")
    assert protocol(real).startswith("the official input: 64 frames of at most 112896 px")
    tiny = compose("eval")
    assert (tiny.media.num_frames, tiny.media.max_pixels) == (8, 84 * 84)
    assert protocol(tiny).startswith("NOT the official input")
    chosen = compose("eval", "model=qwen2_5_vl_7b", "media=tiny")
    assert (chosen.media.num_frames, chosen.media.max_pixels) == (8, 84 * 84)
    summary = {
        "baseline": {"name": "model", "step": 0},
        "benchmarks": {"v2p": {"metrics": {}, "protocol": protocol(real)}},
    }
    assert "v2p protocol: the official input: 64 frames" in headline(summary)
