"""Quality control: option-length rule, blind filter (one or two models: fakes, scripted endpoints, a local
model), shuffling, letters. The blind filter against a real server: tests/test_real_server.py."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from fake_openai import completion, endpoint_settings

from core.errors import ConfigError
from core.formats.v2p import parse_options, render_question
from core.text_models import (
    EndpointTextModel,
    TextModelConfig,
    TextModelError,
    make_text_model,
)
from data_builders.qc import (
    BlindFilterConfig,
    BlindModelConfig,
    QcConfig,
    balance_step,
    blind_filter,
    first_letter,
    make_blind_models,
    option_length_filter,
    qc_markdown,
    run_qc,
    shuffle_options,
)
from data_builders.questions import QuestionConfig


def _row(qid: str, stem: str, options: list[str], answer: int = 0) -> dict:
    return {"id": qid, "question": render_question(stem, options), "answer": "ABCD"[answer]}


def _answer_text(row: dict) -> str:
    return parse_options(row["question"])[1][ord(row["answer"]) - ord("A")]


def _letter_of(prompt: str, text: str) -> str:
    """The letter the prompt shows ``text`` under (the model "knows" the answer)."""
    options = parse_options(prompt)[1]
    return "ABCD"[options.index(text)] if text in options else "A"


class KnowsSome:
    """A fake text model: right about questions whose stem has ``knows`` ("easy"), "A" otherwise."""

    def __init__(self, answers: dict[str, str], knows: str = "easy", identity: str = "fake:knows-some"):
        self.answers, self.knows, self.identity, self.calls = answers, knows, identity, 0

    def answer(self, prompt: str, *, seed: int) -> str:
        self.calls += 1
        stem = parse_options(prompt)[0]
        return f"Answer: {_letter_of(prompt, self.answers[stem])}" if self.knows in stem else "A"


ROWS = [
    _row("q0", "An easy one?", ["red", "blue", "green"], 1),
    _row("q1", "A hard one?", ["left", "right", "up", "down"], 0),
    _row("q2", "Another easy one?", ["1", "2", "3", "4"], 3),
    _row("q3", "A hard two?", ["before", "after"], 1),
]
ANSWERS = {parse_options(r["question"])[0]: _answer_text(r) for r in ROWS}


def test_option_length_rule_reports_removed_ids_and_ratio():
    rows = [
        _row("short", "Q?", ["up", "down", "left", "right"]),
        _row("giveaway", "Q?", ["It moves to the left, then stops near the edge", "no", "yes"]),
        _row("similar", "Q?", ["It stays in sight until the end", "It goes out of sight and is not seen"]),
    ]
    step = option_length_filter(rows, max_ratio=2.5, floor=8)
    assert [r["id"] for r in step.kept] == ["short", "similar"]
    ((qid, reason),) = step.removed
    assert qid == "giveaway" and "ratio 5.75 > 2.5" in reason
    assert option_length_filter(rows, None, floor=8).kept == rows


@pytest.mark.parametrize(
    ("reply", "n", "index"),
    [
        ("B", 4, 1),
        ("Answer: C.", 4, 2),
        ("(D) down", 4, 3),
        ("I think B", 4, 1),
        ("D", 3, None),
        ("none", 4, None),
    ],
)
def test_first_letter(reply: str, n: int, index: int | None):
    assert first_letter(reply, n) == index


def test_blind_filter_drops_what_text_alone_answers_every_round():
    model = KnowsSome(ANSWERS)
    step = blind_filter(ROWS, [model], rounds=2, rotate=True)
    assert [r["id"] for r in step.kept] == ["q1", "q3"]
    assert [i for i, _ in step.removed] == ["q0", "q2"]
    assert "2/2 rounds" in step.removed[0][1] and model.calls == 8
    # "A" is right in one round only for q1 and q3: rotation moves the right option's letter.
    (report,) = step.info["models"]
    assert report == {"model": "fake:knows-some", "asked": 4, "unjudged": 0, "right_rounds": {"1": 2, "2": 2}}


def test_with_two_models_a_question_goes_only_when_both_answer_it_blind():
    first = KnowsSome(ANSWERS, identity="fake:first")  # knows q0 and q2
    second = KnowsSome(ANSWERS, knows="Another", identity="fake:second")  # knows q2 only
    step = blind_filter(ROWS, [first, second], rounds=2, rotate=True)
    assert [i for i, _ in step.removed] == ["q2"]
    assert "fake:first: D, C; fake:second: D, C" in step.removed[0][1]
    # The second model is asked only what the first answered right in every round: q0 and q2.
    assert second.calls == 4 and [m["asked"] for m in step.info["models"]] == [4, 2]
    assert "fake:first + fake:second; 2 rounds each; 0 unjudged" in qc_markdown([step])


def test_no_model_no_blind_filter_and_the_stats_say_so():
    step = blind_filter(ROWS, [], rounds=2, rotate=True)
    assert step.kept == ROWS and step.report()["reason"] == "no model configured"
    assert "| blind | 4 | 0 | off: no model configured |" in qc_markdown([step])
    assert make_blind_models(BlindFilterConfig()) == []


def test_rotation_stops_a_model_that_always_says_a():
    class AlwaysA:
        identity = "always-a"

        def answer(self, prompt: str, *, seed: int) -> str:
            return "A"

    rows = [_row(f"q{i}", f"Q{i}?", ["x", "yy", "zzz", "w"], 0) for i in range(5)]
    assert blind_filter(rows, [AlwaysA()], rounds=2, rotate=True).removed == []
    assert len(blind_filter(rows, [AlwaysA()], rounds=2, rotate=False).removed) == 5


class Flaky(KnowsSome):
    """:class:`KnowsSome`, except that it cannot be asked about prompts with ``fails_on``."""

    def __init__(self, answers: dict[str, str], fails_on: str, **settings: str):
        super().__init__(answers, **settings)
        self.fails_on = fails_on

    def answer(self, prompt: str, *, seed: int) -> str:
        if self.fails_on in prompt:
            raise TextModelError("boom")
        return super().answer(prompt, seed=seed)


def test_unjudged_rows_are_kept_and_listed_and_a_dead_model_fails_fast():
    step = blind_filter(ROWS, [Flaky(ANSWERS, "hard two")], rounds=2, rotate=True)
    assert step.info["unjudged"] == ["q3"] and "q3" in [r["id"] for r in step.kept]
    # With two models, one that answers q0 wrong decides it; one that cannot be asked leaves q2 unjudged.
    second = Flaky(ANSWERS, "Another", knows="nothing", identity="fake:second")
    step = blind_filter(ROWS, [KnowsSome(ANSWERS), second], rounds=2, rotate=True)
    assert step.removed == [] and step.info["unjudged"] == ["q2"]
    assert step.info["models"][1] == {
        "model": "fake:second",
        "asked": 2,
        "unjudged": 1,
        "right_rounds": {"1": 1},  # "A" is right in the round that rotates q0's answer to A
    }

    class Dead:
        identity = "dead"

        def answer(self, prompt: str, *, seed: int) -> str:
            raise TextModelError("connection refused")

    with pytest.raises(TextModelError, match="dead: the first 3 questions failed"):
        blind_filter(ROWS, [Dead()], rounds=2, rotate=True)


def test_shuffle_and_balance_keep_the_right_option_and_report_shares():
    rng = np.random.default_rng(0)
    rows = [_row(f"q{i}", f"Q{i}?", [f"o{j}" for j in range(3 if i % 5 == 0 else 4)]) for i in range(200)]
    shuffle_options(rows, rng)
    assert all(_answer_text(r) == "o0" for r in rows) and len({r["answer"] for r in rows}) == 4
    step = balance_step(rows, rng)
    assert all(_answer_text(r) == "o0" for r in rows)
    assert step.info["within_3_points"] and step.info["max_deviation_points"] <= 3
    assert set(step.info["shares"]) == set("ABCD")


def test_run_qc_reports_every_step_in_markdown():
    rows = [dict(r) for r in ROWS]
    kept, steps = run_qc(rows, QcConfig(), np.random.default_rng(0), [KnowsSome(ANSWERS)])
    assert [s.name for s in steps] == ["option_length", "blind", "shuffle", "letters"]
    assert [r["id"] for r in kept] == ["q1", "q3"]
    text = qc_markdown(steps)
    assert "| blind | 2 | 2 |" in text and "q0 (answered without video in 2/2 rounds" in text
    assert steps[1].report()["removed"][0] == {"id": "q0", "reason": steps[1].removed[0][1]}


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"backend": "gpt"}, "{key}.backend must be one of none, endpoint, local, got 'gpt'"),
        ({"backend": "local"}, "{key}.backend=local needs {key}.model"),
        (endpoint_settings("http://127.0.0.1:1/v1", model=None), "{key}.backend=endpoint needs {key}.model"),
        (endpoint_settings(None), "{key}.backend=endpoint needs {key}.endpoint.base_url"),
        (endpoint_settings("localhost:8000"), "{key}.endpoint.base_url must start with http:// or https://"),
    ],
)
@pytest.mark.parametrize(
    ("config", "key"), [(BlindModelConfig, "builder.qc.blind.first"), (QuestionConfig, "builder.questions")]
)
def test_text_model_setting_errors_name_the_key(config: type, key: str, settings: dict, message: str):
    assert make_text_model(config(), key) is None  # backend none: no model
    with pytest.raises(ConfigError, match=re.escape(message.format(key=key))):
        make_text_model(config(**settings), key)


@pytest.mark.parametrize("slot", ["first", "second"])
def test_qc_names_its_blind_filter_key(slot: str):
    rows = [dict(r) for r in ROWS]
    blind = BlindFilterConfig(**{slot: BlindModelConfig(**endpoint_settings(None))})
    with pytest.raises(ConfigError, match=re.escape(f"builder.qc.blind.{slot}.endpoint.base_url")):
        run_qc(rows, QcConfig(blind=blind), np.random.default_rng(0))


# --- a local OpenAI-compatible server ----------------------------------------------------------


@pytest.fixture()
def server(chat_server) -> Callable[..., str]:
    """``start(reply, fail_first=0, status=503)`` -> the base URL of a chat/completions server on 127.0.0.1.

    ``reply(prompt)`` gives the answer text; the first ``fail_first`` requests get HTTP ``status``.
    """

    def start(reply: Callable[[str], str], fail_first: int = 0, status: int = 503) -> str:
        def respond(handler, body: dict) -> tuple[int, bytes]:
            if len(httpd.requests) <= fail_first:  # this request is already among them
                return status, b""
            return 200, completion(reply(body["messages"][-1]["content"]))

        httpd = chat_server(respond)
        return httpd.url

    return start


def test_endpoint_backend_retries_then_filters(server):
    url = server(lambda prompt: KnowsSome(ANSWERS).answer(prompt, seed=0), fail_first=2)
    sleeps = []
    model = EndpointTextModel(
        TextModelConfig(**endpoint_settings(url, "fake-model", max_retries=3)), sleep=sleeps.append
    )
    step = blind_filter(ROWS, [model], rounds=2, rotate=True)
    assert [i for i, _ in step.removed] == ["q0", "q2"] and sleeps == [1.0, 2.0]


def test_endpoint_client_error_is_not_retried(server):
    url = server(lambda prompt: "A", fail_first=10, status=400)
    config = TextModelConfig(**endpoint_settings(url, max_retries=3))
    model = EndpointTextModel(config, sleep=lambda s: pytest.fail("retried a 400"))
    with pytest.raises(TextModelError, match="HTTP 400"):
        model.answer("Q?\nA: x\nB: y", seed=0)


def _blind_model(slot: str, url: str) -> list[str]:
    """The command-line settings of blind-filter model ``slot`` (first, second) on the server at ``url``."""
    keys = {"backend": "endpoint", "model": f"fake-{slot}", "endpoint.base_url": url}
    return [f"builder.qc.blind.{slot}.{key}={value}" for key, value in keys.items()]


def test_vp_sft_cli_with_one_or_two_endpoint_blind_filters(server, tmp_path: Path):
    """The whole build. One server "knows" the answers "green" and "down": alone, it gets those questions
    dropped; with a second server that knows "green" and "left", only the "green" ones go."""
    from data_builders.synthetic_world import build_world

    build_world(tmp_path / "world", 4, seed=0)

    def knowing(*known: str) -> str:
        return server(lambda prompt: _letter_of(prompt, next((k for k in known if k in prompt.split()), "?")))

    first, second = knowing("green", "down"), knowing("green", "left")
    command = [sys.executable, "-m", "data_builders", "builder=vp_sft", "builder.world=world"]
    base = [*command, "builder.questions_per_video=6", "builder.shapes=[rectangle,triangle,scribble,som]"]
    builds = {
        "plain": [],
        "one": _blind_model("first", first),
        "two": [*_blind_model("first", first), *_blind_model("second", second)],
    }
    for out, extra in builds.items():
        done = subprocess.run(
            [*base, f"builder.out={out}", *extra], cwd=tmp_path, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
    info = {out: json.loads((tmp_path / out / "build_info.json").read_text()) for out in builds}
    assert "| 0 | off: no model configured |" in (tmp_path / "plain" / "stats.md").read_text()
    for out, known in (("one", {"green", "down"}), ("two", {"green"})):
        dropped = [r for r in _rows(tmp_path / "plain") if _answer_text(r) in known]
        step = next(s for s in info[out]["qc"] if s["step"] == "blind")
        assert dropped and sorted(r["id"] for r in step["removed"]) == sorted(r["id"] for r in dropped)
        assert info[out]["questions"] == info["plain"]["questions"] - len(dropped)
        assert not [r for r in _rows(tmp_path / out) if _answer_text(r) in known]
    models = [m["model"].split("|")[0] for m in step["models"]]
    assert models == ["endpoint:fake-first", "endpoint:fake-second"]
    # Removed questions' frames are gone from the release; kept ones are there.
    frames = tmp_path / "two" / "v2p" / "frames"
    assert not any((frames / r["frame_path"]).exists() for r in dropped)
    assert all((frames / r["frame_path"]).exists() for r in _rows(tmp_path / "two"))
    assert "## Quality control" in (tmp_path / "two" / "stats.md").read_text()
    shapes = {r["prompt_shape"] for r in _rows(tmp_path / "plain")}
    assert shapes == {"rectangle", "triangle", "scribble", "som"}


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "v2p" / "dataset_info.jsonl").read_text().splitlines()]


def test_local_backend_answers_from_a_model_directory(tmp_path: Path):
    """A tiny random causal LM saved to disk: the local backend loads it and returns text."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(
        ["A B C D red blue left right Answer"] * 4, trainers.BpeTrainer(special_tokens=["<unk>"])
    )
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<unk>")
    config = LlamaConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
    )
    LlamaForCausalLM(config).save_pretrained(tmp_path / "lm")
    tokenizer.save_pretrained(tmp_path / "lm")
    (model,) = make_blind_models(
        BlindFilterConfig(second=BlindModelConfig(backend="local", model=str(tmp_path / "lm")))
    )
    assert isinstance(model.answer(ROWS[0]["question"], seed=0), str)
    step = blind_filter(ROWS, [model], rounds=2, rotate=True)
    (report,) = step.info["models"]
    assert report["model"].startswith("local:") and len(step.kept) + len(step.removed) == len(ROWS)
