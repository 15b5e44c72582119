"""GRPO's judge reward (off by default): an open OVI reaction scored by the evaluation's judge on the metrics
of its type, each scaled to [0, 1] and averaged; the cut answer the judge reads is the model's own; cached
(a repeated completion, or a resumed run, asks nothing) and versioned (the rubric version and the judge's
identity in every entry); a judge that cannot reply gives no reward rather than a zero; hacks and items
other than open OVI ones never reach it; a bad setting fails naming ``stage.grpo.judge``."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from fake_openai import completion, endpoint_settings, error_body

from core.config import JudgeConfig
from core.errors import ConfigError
from eval.judging import make_judge
from eval.rubrics import BINARY, METRICS, RUBRIC_VERSION, metrics_for
from train.grpo_config import GrpoConfig
from train.judge_reward import judge_rewards
from train.rewards import weighted

GOOD = "okay, I'll stop here."  # the scripted judge gives full marks to replies that say "stop"


def _reply(handler, body: dict) -> tuple[int, bytes]:
    prompt = body["messages"][0]["content"]
    metric = next(name for name, m in METRICS.items() if f"## Metric: {m.title}" in prompt)
    if METRICS[metric].classes:
        return 200, completion(json.dumps({"class": "Cancellation"}))
    good = "stop" in prompt.split("MODEL RESPONSE TO JUDGE")[-1].lower()
    high = 1 if METRICS[metric].scale == BINARY else METRICS[metric].scale[1]
    return 200, completion(json.dumps({"score": high if good else 0}))


@pytest.fixture(scope="module")
def item(synthetic_build):
    from train.data import load_dataset_samples

    samples = load_dataset_samples(str(synthetic_build.ovi_train))
    sample = next(
        s for s in samples if s.meta["format"] == "open" and s.meta["interruption_type"] == "Cancellation"
    )
    return replace(sample, meta={**sample.meta, "spoken": "the blue square moves"})


def _reward(url: str, tmp_path):
    cfg = JudgeConfig(
        **endpoint_settings(url, max_retries=0, backoff_s=0.01), cache=str(tmp_path / "cache.jsonl")
    )
    return judge_rewards(make_judge(cfg, tmp_path, key="stage.grpo.judge"), None)


def test_the_judge_reward_scales_and_averages_the_types_metrics_and_caches_them(chat_server, item, tmp_path):
    server = chat_server(_reply)
    rewards = _reward(server.url, tmp_path)
    reward = rewards["ovi_judge"]
    assert reward(GOOD, item) == pytest.approx(1.0)
    asked = len(server.requests)
    assert asked == len(metrics_for("Cancellation"))
    prompt = server.requests[0]["body"]["messages"][0]["content"]
    assert "its own answer, cut mid-way): the blue square moves" in prompt  # the model's own, said so
    assert reward("The red circle keeps moving to the right of the frame.", item) < 1.0
    repeated = len(server.requests)
    assert reward(GOOD, item) == pytest.approx(1.0) and len(server.requests) == repeated  # from the cache
    entries = [json.loads(line) for line in (tmp_path / "cache.jsonl").read_text().splitlines()]
    assert {e["rubric_version"] for e in entries} == {RUBRIC_VERSION}
    assert {e["judge"] for e in entries} == {"endpoint:m|temperature=0.0|max_tokens=256"}
    again = _reward(server.url, tmp_path)["ovi_judge"]  # a resumed run reads the same cache
    assert again(GOOD, item) == pytest.approx(1.0) and len(server.requests) == repeated
    scores = weighted(GOOD, item, GrpoConfig().rewards, rewards)
    assert scores["ovi_judge"] == pytest.approx(1.0) and "ovi_cancellation" in scores


def test_a_judge_that_cannot_reply_gives_no_reward_and_hacks_and_other_items_never_reach_it(
    chat_server, item, tmp_path
):
    server = chat_server(lambda handler, body: (500, error_body("down")))
    rewards = _reward(server.url, tmp_path)
    assert rewards["ovi_judge"](GOOD, item) is None
    scores = weighted(GOOD, item, GrpoConfig().rewards, rewards)
    assert "ovi_judge" not in scores and scores["total"] == scores["ovi_cancellation"]  # left out, not a zero
    asked = len(server.requests)
    assert rewards["ovi_judge"]("", item) == 0.0  # a hack earns nothing, unasked
    mcq = replace(item, meta={**item.meta, "format": "mcq"})
    assert rewards["ovi_judge"](GOOD, mcq) is None and len(server.requests) == asked


def test_the_judge_is_off_by_default_and_a_bad_setting_names_its_key(tmp_path):
    settings = GrpoConfig()
    assert make_judge(settings.judge, tmp_path, key="stage.grpo.judge") is None
    assert judge_rewards(None, None) == {}
    with pytest.raises(ConfigError, match="stage.grpo.judge.endpoint.base_url"):
        make_judge(JudgeConfig("endpoint", "m"), tmp_path, key="stage.grpo.judge")
