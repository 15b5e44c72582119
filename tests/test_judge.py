"""The LLM judge: reply parsing, the HTTP backend against a scripted local server (chosen replies, faults,
request contents, exact request counts), caching, records (also against a real server), calibration and
the calibration CLI. No network beyond 127.0.0.1; every test runs in well under a second except the local
transformers judge and the real-server one. More real-server tests: tests/test_real_server.py."""

from __future__ import annotations

import json
import time
from collections import deque

import pytest
from fake_openai import ChatServer, completion, endpoint_settings, error_body

from core.text_models import (
    EndpointTextModel,
    LocalTextModel,
    TextModelConfig,
    TextModelError,
)
from eval import judge_calibrate
from eval.judge import Judge, calibrate, parse_judgement
from eval.rubrics import (
    APPLIES_TO,
    BINARY,
    METRICS,
    RUBRIC_VERSION,
    TEN_POINT,
    judge_prompt,
    metrics_for,
)

KEY_ENV, KEY = "TEST_JUDGE_API_KEY", "sk-test-secret-123"
TIMEOUT_S = 0.2


# ---------------------------------------------------------------------------------------------------
# A scripted OpenAI-compatible server


def _scripted(server: ChatServer, handler, body: dict) -> tuple[int, bytes]:
    """The next scripted action: ("reply", text), ("status", code) or ("sleep", seconds)."""
    kind, arg = server.script.popleft() if server.script else ("reply", '{"score": 5, "reason": "ok"}')
    if kind == "sleep":
        time.sleep(arg)  # longer than the client's timeout: the client gives up first
        return 200, completion('{"score": 9}')
    if kind == "status":
        return arg, error_body(f"scripted {arg}")
    return 200, completion(arg)


@pytest.fixture
def server(chat_server, monkeypatch):
    """A local server on a free port, scripted by the test, keeping every request's path, headers and body;
    it is shut down when the test ends."""
    monkeypatch.setenv(KEY_ENV, KEY)
    httpd = chat_server(lambda handler, body: _scripted(httpd, handler, body))
    httpd.script = deque()
    return httpd


def _backend(server, model: str = "judge-model", sleep=time.sleep, **overrides) -> EndpointTextModel:
    """The judge's text model behind the scripted server, as ``judge=endpoint`` builds it."""
    settings = {"api_key_env": KEY_ENV, "timeout_s": TIMEOUT_S, "max_retries": 2, "backoff_s": 0.01}
    config = TextModelConfig(**endpoint_settings(server.url, model, **{**settings, **overrides}))
    return EndpointTextModel(config, sleep=sleep)


def _item(kind: str = "Correction", tag: str = "Q1", **overrides) -> dict:
    item = {
        "question": f"{tag}: what happens between 1.0 s and 4.0 s?",
        "partial_answer": "Between 1.0 s and",
        "interruption": "Sorry, I meant the green triangle.",
        "interruption_type": kind,
        "reference_reaction": "The green triangle moves left.",
        "response": "Oh, the green triangle moves left.",
        "answer": "Between 1.0 s and 4.0 s, a red circle moves up.",
    }
    item.update(overrides)
    return item


def _record(kind: str = "Correction", **meta_overrides) -> dict:
    item = _item(kind)
    prediction = item.pop("response")
    meta = {**item, "format": "open", "options": None, "question_time": 4.0, "interruption_time": 5.2}
    meta.update(meta_overrides)
    return {"id": f"x-{kind}", "prediction": prediction, "meta": meta}


def _assert_no_fake_scores(judgement: dict) -> None:
    """An unjudged or unparseable judgement carries None, never a number; an N/A or sub-1 one 0 (the
    paper's zeros), any other a score on the metric's scale."""
    if judgement["status"] in ("unjudged", "unparseable"):
        assert judgement["score"] is None
    elif judgement["status"] in ("not_applicable", "below_scale"):
        assert judgement["score"] == 0.0
    else:
        low, high = METRICS[judgement["metric"]].scale
        assert low <= judgement["score"] <= high


# ---------------------------------------------------------------------------------------------------
# Rubrics and prompts


def test_every_metric_is_judged_on_every_type_as_the_paper_reports_them():
    every = ["iac", "tfs", "ves", "ifa", "cfs", "ccs", "ca_open"]
    assert metrics_for("Correction") == metrics_for("False Trigger") == metrics_for("Cancellation") == every
    assert set(APPLIES_TO) == set(METRICS)
    assert METRICS["iac"].scale == METRICS["ifa"].scale == METRICS["ca_open"].scale == BINARY
    assert all(METRICS[m].scale == TEN_POINT for m in ("tfs", "ves", "cfs", "ccs"))
    with pytest.raises(ValueError, match="interruption type"):
        metrics_for("Interjection")


def test_prompt_quotes_rubric_and_caps_and_asks_for_json():
    prompt = judge_prompt("cfs", _item())
    assert "Explicitly states that the old conclusion was incorrect" in prompt  # Table 7, level 10
    assert "Old and new conclusions coexist: at most 3" in prompt  # Table 10
    assert "the lowest cap wins" in prompt
    assert '{"score": <an integer from 1 to 10>, "reason": "<one short sentence>"}' in prompt
    assert "stand in for it" in prompt and "a red circle moves up" in prompt  # no frames: answers stand in
    assert "Oh, the green triangle moves left." in prompt
    described = judge_prompt("ves", _item(visual_evidence="A green triangle slides left."))
    assert "A green triangle slides left." in described and "stand in for it" not in described
    binary = judge_prompt("iac", _item())
    assert '{"score": <0 or 1>' in binary and "Score caps" not in binary  # no caps for binary metrics


def test_prompt_rejects_bad_input():
    with pytest.raises(ValueError, match="unknown judge metric"):
        judge_prompt("xyz", _item())
    with pytest.raises(ValueError, match="partial_answer"):
        judge_prompt("tfs", _item(partial_answer=None))


# ---------------------------------------------------------------------------------------------------
# Parsing


@pytest.mark.parametrize(
    ("text", "scale", "expected"),
    [
        ('{"score": 7, "reason": "fine"}', TEN_POINT, (7.0, "ok")),
        ('Sure.\n```json\n{"score": 8, "reason": "good"}\n```\nAnything else? {', TEN_POINT, (8.0, "ok")),
        ('{"reason": "first object has no score"} {"score": 4}', TEN_POINT, (4.0, "ok")),
        ('{"Score": "7/10", "reason": "string score"}', TEN_POINT, (7.0, "ok")),
        ('<think>between 2 and 9</think>{"score": 6}', TEN_POINT, (6.0, "ok")),
        ('{"score": 15}', TEN_POINT, (10.0, "clamped")),
        ('{"score": -3}', TEN_POINT, (0.0, "below_scale")),
        ('{"score": 0, "reason": "no correction to follow"}', TEN_POINT, (0.0, "below_scale")),
        (
            '{"score": "N/A", "reason": "CFS does not apply to a False Trigger (1-10)"}',
            TEN_POINT,
            (0.0, "not_applicable"),
        ),
        ('{"score": null}', TEN_POINT, (0.0, "not_applicable")),
        ("N/A", TEN_POINT, (0.0, "not_applicable")),
        ('{"score": "n/a"}', BINARY, (0.0, "not_applicable")),
        ("7", TEN_POINT, (7.0, "fallback_number")),
        ('{score: 6, reason: "not JSON"}', TEN_POINT, (6.0, "fallback_number")),
        ("Score: 12 out of 10", TEN_POINT, (10.0, "clamped")),
        ("I cannot judge this.", TEN_POINT, (None, "unparseable")),
        ("", TEN_POINT, (None, "unparseable")),
        ('{"score": 1}', BINARY, (1.0, "ok")),
        ('{"score": true}', BINARY, (1.0, "ok")),
        ('{"score": 0}', BINARY, (0.0, "ok")),
        ('{"score": 5}', BINARY, (1.0, "clamped")),
        ('{"score": 0.2}', BINARY, (0.0, "clamped")),
    ],
)
def test_parse_judgement(text, scale, expected):
    assert parse_judgement(text, scale) == expected


# ---------------------------------------------------------------------------------------------------
# The HTTP backend through a Judge


def test_fenced_json_request_shape_and_key_never_stored(server, tmp_path):
    server.script.append(("reply", 'Here you go:\n```json\n{"score": 8, "reason": "smooth"}\n```\nDone.'))
    cache = tmp_path / "cache.jsonl"
    result = Judge(_backend(server), cache).judge("tfs", _item())
    assert (result["score"], result["status"]) == (8.0, "ok")
    assert result["judge"] == "endpoint:judge-model|temperature=0.0|max_tokens=256"
    assert result["rubric_version"] == RUBRIC_VERSION
    assert "smooth" in result["raw"]
    (request,) = server.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["Authorization"] == f"Bearer {KEY}"
    body = request["body"]
    assert (body["model"], body["temperature"], body["seed"]) == ("judge-model", 0.0, 0)
    assert body["messages"][0]["content"] == judge_prompt("tfs", _item())
    assert KEY not in cache.read_text() and KEY not in json.dumps(result)


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ('{"score": 7, "reason": "unterminated', (7.0, "fallback_number")),
        ("no verdict at all", (None, "unparseable")),
        ('{"score": 15, "reason": "too high"}', (10.0, "clamped")),
        ('{"score": -3, "reason": "too low"}', (0.0, "below_scale")),
        ('{"score": "N/A", "reason": "not applicable"}', (0.0, "not_applicable")),
        ("6", (6.0, "fallback_number")),
    ],
)
def test_replies_are_parsed_and_clamped(server, reply, expected):
    server.script.append(("reply", reply))
    result = Judge(_backend(server)).judge("ccs", _item())
    assert (result["score"], result["status"]) == expected
    assert result["raw"] == reply
    _assert_no_fake_scores(result)


def test_server_errors_are_retried_with_backoff(server):
    sleeps: list[float] = []
    server.script.extend([("status", 500), ("status", 503), ("reply", '{"score": 1}')])
    backend = _backend(server, sleep=sleeps.append)
    result = Judge(backend).judge("iac", _item())
    assert (result["score"], result["status"]) == (1.0, "ok")
    assert len(server.requests) == backend.n_requests == 3
    assert sleeps == [0.01, 0.02]  # exponential


def test_rate_limit_is_retried(server):
    server.script.extend([("status", 429), ("reply", '{"score": 0}')])
    result = Judge(_backend(server)).judge("ifa", _item())
    assert (result["score"], result["status"], len(server.requests)) == (0.0, "ok", 2)


def test_client_error_is_not_retried_and_leaves_the_item_unjudged(server):
    server.script.append(("status", 400))
    result = Judge(_backend(server)).judge("tfs", _item())
    assert (result["score"], result["status"]) == (None, "unjudged")
    assert "HTTP 400" in result["error"]
    assert len(server.requests) == 1


def test_persistent_server_errors_end_unjudged_and_are_not_cached(server, tmp_path):
    server.script.extend([("status", 500)] * 3)
    judge = Judge(_backend(server), tmp_path / "cache.jsonl")
    result = judge.judge("tfs", _item())
    assert (result["score"], result["status"], len(server.requests)) == (None, "unjudged", 3)
    assert judge.judge("tfs", _item())["status"] == "ok"  # tried again, not served from the cache
    assert len(server.requests) == 4


def test_timeout_is_retried_then_unjudged(server):
    server.script.extend([("sleep", 3 * TIMEOUT_S)] * 2)
    started = time.monotonic()
    result = Judge(_backend(server, max_retries=1)).judge("tfs", _item())
    assert (result["score"], result["status"]) == (None, "unjudged")
    assert len(server.requests) == 2
    assert time.monotonic() - started < 2.0


def test_cache_serves_repeats_without_requests(server, tmp_path):
    cache = tmp_path / "judge" / "cache.jsonl"
    server.script.extend([("reply", '{"score": 6}'), ("reply", '{"score": 9}')])
    first = Judge(_backend(server, model="judge-A"), cache)
    assert first.judge("tfs", _item())["score"] == 6.0
    assert first.judge("tfs", _item())["score"] == 6.0
    assert len(server.requests) == 1 and (first.n_calls, first.n_cached) == (1, 1)
    rerun = Judge(_backend(server, model="judge-A"), cache)  # a re-run reads the file
    assert rerun.judge("tfs", _item()) == first.judge("tfs", _item())
    assert len(server.requests) == 1
    other = Judge(_backend(server, model="judge-B"), cache)  # another judge is another cache key
    assert other.judge("tfs", _item())["score"] == 9.0
    assert len(server.requests) == 2
    lines = [json.loads(line) for line in cache.read_text().splitlines()]
    assert [line["judge"].split("|")[0] for line in lines] == ["endpoint:judge-A", "endpoint:judge-B"]


def test_a_judgement_cut_short_by_a_kill_is_asked_again_and_the_next_one_is_kept(server, tmp_path):
    cache = tmp_path / "cache.jsonl"
    server.script.extend([("reply", '{"score": 6}'), ("reply", '{"score": 3}')])
    judge = Judge(_backend(server), cache)
    judge.judge("tfs", _item(tag="Q1"))
    judge.judge("ccs", _item(tag="Q2"))
    whole = cache.read_text()
    cut = whole[: whole.index("\n") + 1] + whole[whole.index("\n") + 1 :][:40]  # the kill cut line 2
    cache.write_text(cut)
    server.script.extend([("reply", '{"score": 4}'), ("reply", '{"score": 8}')])
    resumed = Judge(_backend(server), cache)
    assert resumed.judge("tfs", _item(tag="Q1"))["score"] == 6.0  # the whole line is served
    assert resumed.judge("ccs", _item(tag="Q2"))["score"] == 4.0  # the cut one is asked again
    resumed.judge("iac", _item(tag="Q3"))
    assert len(server.requests) == 4
    # Nothing was appended onto the fragment: a third process finds every whole judgement.
    again = Judge(_backend(server), cache)
    assert again.judge("ccs", _item(tag="Q2"))["score"] == 4.0
    assert again.judge("iac", _item(tag="Q3"))["score"] == 1.0
    assert len(server.requests) == 4


def test_judge_record_scores_only_what_was_judged(server):
    # Correction: iac, tfs, ves, ifa, cfs, ccs, ca_open in that order; ves fails (400), ifa is unparseable.
    server.script.extend(
        [
            ("reply", '{"score": 1}'),
            ("reply", '{"score": 9}'),
            ("status", 400),
            ("reply", "hmm"),
            ("reply", '{"score": 12}'),
            ("reply", '{"score": 7}'),
            ("reply", '{"class": "correction", "reason": "it answers the new question"}'),
        ]
    )
    result = Judge(_backend(server)).judge_record(_record("Correction"))
    assert result.scores == {"iac": 1.0, "tfs": 9.0, "cfs": 10.0, "ccs": 7.0, "ca_open": 1.0}
    assert result.judgements["ca_open"]["class"] == "Correction"
    assert result.n_unjudged == 2
    statuses = {metric: judgement["status"] for metric, judgement in result.judgements.items()}
    assert (statuses["ves"], statuses["ifa"]) == ("unjudged", "unparseable")
    for judgement in result.judgements.values():
        _assert_no_fake_scores(judgement)
    assert "5.2 s" in server.requests[0]["body"]["messages"][0]["content"]  # timing from the meta


@pytest.mark.slow  # a real server (tests/real_server.py), started once per session
def test_judge_record_follows_the_type_and_skips_mcq(served_json_model):
    url, model = served_json_model.base_url, served_json_model.model
    served = endpoint_settings(url, model, timeout_s=60.0, max_retries=0)
    backend = EndpointTextModel(TextModelConfig(**served))
    result = Judge(backend).judge_record(_record("Cancellation"), ["iac", "tfs"])
    assert sorted(result.scores) == ["iac", "tfs"] and result.n_unjudged == 0
    assert backend.n_requests == 2
    assert Judge(backend).judge_record(_record(format="mcq")).scores == {}
    with pytest.raises(ValueError, match="interruption"):
        Judge(backend).judge_record(_record(interruption=None))
    assert backend.n_requests == 2


# ---------------------------------------------------------------------------------------------------
# Calibration


class _ScriptedModel:
    """Replies by (question tag, metric) found in the prompt; ``None`` means the judge is unavailable."""

    identity = "scripted"

    def __init__(self, replies: dict[tuple[str, str], str | None]):
        self.replies = replies

    def answer(self, prompt: str, *, seed: int | None) -> str:
        tag = prompt.split("Question: ", 1)[1][:2]
        metric = prompt.split("## Metric: ", 1)[1][:3].lower()
        reply = self.replies[(tag, metric)]
        if reply is None:
            raise TextModelError("scripted outage")
        return reply


def _write_human_file(path) -> None:
    record = _record("False Trigger")  # one line in result-record shape
    record["meta"]["question"] = "Q3: what happens?"
    lines = [
        {**_item(tag="Q1"), "human": {"iac": 1, "tfs": 8}},
        {**_item(tag="Q2"), "human": {"iac": 0, "tfs": 5, "ves": 6}},
        {**record, "human": {"iac": 1, "tfs": 9}},
        {**_item(tag="Q4", interruption_type="Cancellation"), "human": {"iac": 1, "tfs": 7}},
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")


def test_calibrate_computes_mae_by_hand(tmp_path):
    human = tmp_path / "human.jsonl"
    _write_human_file(human)
    backend = _ScriptedModel(
        {
            ("Q1", "iac"): '{"score": 1}',
            ("Q1", "tfs"): '{"score": 7}',
            ("Q2", "iac"): '{"score": 1}',
            ("Q2", "tfs"): '{"score": 5}',
            ("Q2", "ves"): "no idea",  # unparseable: left out of the MAE
            ("Q3", "iac"): '{"score": 1}',
            ("Q3", "tfs"): '{"score": 10}',
            ("Q4", "iac"): '{"score": 0}',
            ("Q4", "tfs"): None,  # unavailable: left out of the MAE
        }
    )
    result = calibrate(Judge(backend), human)
    # iac: |1-1| + |1-0| + |1-1| + |0-1| = 2 over 4; tfs: |7-8| + |5-5| + |10-9| = 2 over 3.
    assert list(result) == ["iac", "tfs", "ves"]
    assert result["iac"] == {"mae": 0.5, "n": 4, "n_unjudged": 0}
    assert result["tfs"] == {"mae": pytest.approx(2 / 3), "n": 3, "n_unjudged": 1}
    assert result["ves"] == {"mae": None, "n": 0, "n_unjudged": 1}


def test_calibrate_names_the_bad_line(tmp_path):
    human = tmp_path / "human.jsonl"
    human.write_text(json.dumps({**_item(), "human": {"tfs": 8}}) + "\n" + json.dumps(_item()) + "\n")
    with pytest.raises(ValueError, match=r"human.jsonl:2: no 'human' scores"):
        calibrate(Judge(_ScriptedModel({})), human)
    human.write_text(json.dumps({**_item(), "human": {"tfs": 11}}) + "\n")
    with pytest.raises(ValueError, match=r":1: human tfs score 11"):
        calibrate(Judge(_ScriptedModel({})), human)


def test_calibrate_cli_prints_a_table(server, tmp_path, capsys):
    human = tmp_path / "human.jsonl"
    human.write_text(json.dumps({**_item(), "human": {"iac": 1, "tfs": 6}}) + "\n")
    server.script.extend([("reply", '{"score": 1}'), ("reply", '{"score": 8}')])
    out = tmp_path / "mae.json"
    url = server.url
    args = ["--human", str(human), "--base-url", url, "--model", "judge-model", "--api-key-env", KEY_ENV]
    assert judge_calibrate.main([*args, "--timeout-s", "1", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "IAC" in printed and "0.0000" in printed and "2.0000" in printed and KEY not in printed
    assert json.loads(out.read_text())["metrics"]["tfs"] == {"mae": 2.0, "n": 1, "n_unjudged": 0}
    assert (tmp_path / "human.judge_cache.jsonl").exists()


# ---------------------------------------------------------------------------------------------------
# The local transformers backend


def _tiny_causal_lm(path) -> None:
    """A random-weight Qwen2 text model with a small BPE tokenizer and a chat template."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(['{"score": 7, "reason": "fine"} user assistant'], trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    tokenizer.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    Qwen2ForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)


@pytest.mark.slow  # importing transformers' model classes alone takes seconds
def test_a_local_judge_loads_lazily_and_replies(tmp_path):
    _tiny_causal_lm(tmp_path / "judge")
    model = LocalTextModel(str(tmp_path / "judge"), max_tokens=4, device="cpu")
    assert model._model is None  # nothing loaded before the first prompt
    reply = model.answer(judge_prompt("iac", _item()), seed=0)
    assert isinstance(reply, str)
    result = Judge(model).judge("iac", _item())
    assert result["judge"].startswith("local:")
    assert result["status"] in ("ok", "fallback_number", "clamped", "unparseable")
    _assert_no_fake_scores(result)


def test_the_interruption_type_is_classified_blind_and_scored_against_the_item(server, tmp_path):
    """Open-ended CA: the judge names the type the reaction implies, not told the item's own type (nor shown
    the reference reaction); the item scores 1 when the judge names its type. The class is cached, the
    score is not: a second item with the same prompt and another type scores by its own type."""
    prompt = judge_prompt("ca_open", _item("False Trigger"))
    assert "False Trigger):" not in prompt and "Reference reaction" not in prompt and '"class"' in prompt
    server.script.extend([("reply", 'It continues, so: {"class": "False Trigger"}')])
    judge = Judge(_backend(server), tmp_path / "cache.jsonl")
    right = judge.judge("ca_open", _item("False Trigger"))
    assert (right["score"], right["class"], right["status"]) == (1.0, "False Trigger", "ok")
    wrong = judge.judge("ca_open", _item("Correction"))  # the same prompt: served from the cache
    assert (wrong["score"], len(server.requests)) == (0.0, 1)
    server.script.extend([("reply", "I cannot tell.")])
    unreadable = judge.judge("ca_open", _item("Correction", tag="Q2"))
    assert (unreadable["score"], unreadable["status"]) == (None, "unparseable")


def test_in_simulation_the_judge_sees_the_models_own_answer_and_the_reference_as_guidance():
    own = judge_prompt("tfs", _item(partial_answer="A blue square", own_answer=True))
    assert (
        "What the model itself said before the interruption (its own answer, cut mid-way): A blue square"
        in own
    )
    assert "guidance only" in own
    given = judge_prompt("tfs", _item())
    assert "Answer spoken before the interruption (cut mid-way): Between 1.0 s and" in given
    assert "guidance only" not in given


def test_an_answer_that_ended_before_its_interruption_is_not_called_cut_to_the_judge():
    """The simulation keeps an answer that finished before the cut whole; the judge was told it was "cut
    mid-way", so after a False Trigger it looked for a continuation of nothing."""
    from eval.judging import Judging

    finished = judge_prompt(
        "tfs", _item(partial_answer="A blue square.", own_answer=True, answer_finished=True)
    )
    assert "its own answer, which it had FINISHED" in finished and "cut mid-way" not in finished
    # what the judging step gives the judge for a simulated record, finished or not
    seen = []

    class Recording:
        identity = "recording"

        def judge_record(self, record, metrics):
            seen.append(record["meta"])
            from eval.judge import RecordJudgement

            return RecordJudgement()

    from core.config import JudgeConfig
    from eval.benchmarks.ovi import OVI

    judging = Judging(Recording(), JudgeConfig())
    for done in (True, False):
        record = {**_record(), "truncated_answer": "A blue", "simulation": {"answer_finished": done}}
        judging.judge_record(OVI, record)
    assert [meta.get("answer_finished", False) for meta in seen] == [True, False]
    assert all(meta["own_answer"] and meta["partial_answer"] == "A blue" for meta in seen)


def test_an_interruption_after_the_last_frame_tells_the_judge_the_model_saw_the_whole_video():
    timing = {"question_time": 9.0, "duration": 10.0}
    after = judge_prompt("ves", _item(**timing, interruption_time=10.6))
    assert "interruption at 10.6 s. The video ended at 10.0 s; the model had seen all of it." in after
    within = judge_prompt("ves", _item(**timing, interruption_time=9.8))
    assert "interruption at 9.8 s. The model had seen the video up to the interruption." in within


def test_ifa_is_judged_apart_from_the_reaction_class():
    """The paper's IFA exceeds its IAC (VideoLLaMA3-7B False Trigger 48.27 vs 34.52): IFA cannot be a
    stricter IAC, so its prompt has the judge score the outcome whatever the reaction's class."""
    prompt = judge_prompt("ifa", _item())
    assert "independently of the reaction class" in prompt and "stricter" not in prompt.lower()
    assert "can exceed its IAC" in METRICS["ifa"].source
