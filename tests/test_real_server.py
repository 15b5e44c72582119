"""Against a real OpenAI-compatible server (``transformers serve``, tests/real_server.py): tiny checkpoints
carry their family's released chat template, so a server serves them as they are; the judge, the QC
blind filter and question generation run their success paths end to end against a tiny checkpoint tuned
to reply what each of them accepts (tests/json_tuning.py). Scripted faults (429/5xx sequences, timeouts,
dropped connections, malformed bodies, key redaction) stay on the fake server (tests/fake_openai.py)."""

from __future__ import annotations

import base64
import io
import json
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from caption_sources import make_source, ovi_build
from json_tuning import ANSWER, QUESTION, judge_item
from PIL import Image
from real_server import Served, ServerError, serve

from core.decoding import MediaSpec
from core.formats.v2p import render_question
from core.media import FrameCache
from core.sample import Part, Sample, Turn
from core.text_models import EndpointConfig, EndpointTextModel, TextModelConfig, TextModelError
from core.video_io import write_mp4
from data_builders.qc import blind_filter
from models.chat import chat_format_for, make_adapter
from models.tiny import CHAT_TEMPLATE_FILE, FAMILIES, build_tiny_checkpoint

# ---------------------------------------------------------------------------------------------------
# The tiny checkpoints' chat templates


@pytest.fixture(scope="module")
def conversation(tmp_path_factory) -> Sample:
    """Video, text and an image in a user turn, an answer, then more video and text."""
    root = tmp_path_factory.mktemp("media")
    frames = np.random.default_rng(0).integers(0, 255, (8, 64, 64, 3), dtype=np.uint8)
    write_mp4(root / "v.mp4", frames, fps=4.0)
    Image.fromarray(frames[0]).save(root / "vp.jpg")
    video, image = str(root / "v.mp4"), str(root / "vp.jpg")
    turns = [
        Turn("user", [Part.video(video, 0, 1), Part.txt("What moves?"), Part.image(image)]),
        Turn("assistant", [Part.txt("A red circle moves")], loss=False),
        Turn("user", [Part.txt("Stop, never mind."), Part.image(image)]),
        Turn("assistant", [Part.txt("Okay.")], loss=True),
    ]
    return Sample("c", "ovi", turns, "test", "v", (0.0, 2.0))


def _as_messages(sample: Sample) -> list[dict]:
    """The conversation as chat messages (what a server hands the chat template)."""
    messages = []
    for turn in sample.turns:
        parts = [
            {"type": p.type, "text": p.text} if p.type == "text" else {"type": p.type} for p in turn.parts
        ]
        messages.append({"role": turn.role, "content": parts})
    return messages


@pytest.mark.parametrize("family", FAMILIES)
def test_a_tiny_checkpoint_renders_chats_as_its_familys_released_format(family, conversation, tmp_path):
    """apply_chat_template of the saved processor (and tokenizer) writes what models.chat's released
    format writes for the same conversation: system turn, media placeholders and their order, turns."""
    from transformers import AutoProcessor, AutoTokenizer

    checkpoint = build_tiny_checkpoint(tmp_path / family, family=family)
    processor = AutoProcessor.from_pretrained(checkpoint)
    adapter = make_adapter(family, processor, MediaSpec(num_frames=2), FrameCache(tmp_path / "c"), "released")
    expected = adapter.render(conversation, for_generation=True).text
    chat = _as_messages(conversation)[:-1]
    assert processor.apply_chat_template(chat, add_generation_prompt=True, tokenize=False) == expected
    assert AutoTokenizer.from_pretrained(checkpoint).chat_template == processor.chat_template
    # A text-only prompt as a string, and the whole conversation, as the adapter writes them.
    released = chat_format_for(family, "released")
    system = f"<|im_start|>system\n{released.system}<|im_end|>\n" if released.system else ""
    text_only = processor.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False)
    assert text_only == f"{system}<|im_start|>user\nHi<|im_end|>\n"
    whole = processor.apply_chat_template(_as_messages(conversation), tokenize=False)
    assert whole == adapter.render(conversation, for_generation=False).text


def test_a_tiny_checkpoint_built_before_chat_templates_is_built_again(tmp_path):
    checkpoint = build_tiny_checkpoint(tmp_path / "tiny")
    weights = (checkpoint / "model.safetensors").read_bytes()
    (checkpoint / CHAT_TEMPLATE_FILE).unlink()
    build_tiny_checkpoint(tmp_path / "tiny")
    assert (checkpoint / CHAT_TEMPLATE_FILE).exists()
    assert (checkpoint / "model.safetensors").read_bytes() == weights  # the same seed, the same model


# ---------------------------------------------------------------------------------------------------
# The untuned tiny checkpoint, served as it is


def _client(served, max_tokens: int = 8, **endpoint) -> EndpointTextModel:
    """A client of the real server: one try, a timeout long enough for a loaded CPU."""
    settings = {"timeout_s": 60.0, "max_retries": 0, **endpoint}
    config = TextModelConfig("endpoint", served.model, max_tokens=max_tokens)
    config.endpoint = EndpointConfig(base_url=served.base_url, **settings)
    return EndpointTextModel(config)


def _jpeg_url(seed: int) -> str:
    pixels = np.random.default_rng(seed).integers(0, 255, (32, 32, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG")
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode()


@pytest.mark.slow
def test_the_tiny_checkpoint_is_served_as_it_is(served_tiny):
    with urllib.request.urlopen(f"{served_tiny.base_url}/models", timeout=30) as response:
        listed = [model["id"] for model in json.load(response)["data"]]
    assert served_tiny.model in listed
    client = _client(served_tiny)
    assert isinstance(client.answer("What colour is the circle?", seed=0), str)
    images = [{"type": "image_url", "image_url": {"url": _jpeg_url(seed)}} for seed in range(2)]
    message = {"role": "user", "content": [*images, {"type": "text", "text": "What moves?"}]}
    assert isinstance(client.chat([message], seed=0), str)
    assert client.n_requests == 2
    with pytest.raises(TextModelError, match=r"HTTP 4\d\d"):  # a name it does not serve: no retry
        _client(Served(served_tiny.base_url, "not-served")).answer("Hi", seed=0)


@pytest.mark.slow
def test_a_server_that_cannot_start_is_reported_with_its_log(serving, tmp_path):
    with pytest.raises(ServerError, match=r"exited with code 1:\n(.|\n)*processing class"):
        with serve(tmp_path):  # no checkpoint there
            pytest.fail("served an empty directory")


# ---------------------------------------------------------------------------------------------------
# The judge, the QC blind filter and question generation against the JSON-tuned checkpoint


def _record(kind: str, item_id: str, rng) -> dict:
    item = judge_item(rng)
    item["interruption_type"] = kind
    prediction = item.pop("response")
    return {"id": item_id, "prediction": prediction, "meta": {**item, "format": "open", "options": None}}


@pytest.mark.slow
def test_the_judge_scores_every_metric_of_every_type(served_json_model):
    """Every metric judged on an item of each type: parsed JSON, nothing unjudged. The tuned model
    replies a score of 1 and the class Correction, so a Correction item's open CA is right, others not."""
    import random

    from eval.judge import Judge
    from eval.rubrics import metrics_for

    judge = Judge(_client(served_json_model, max_tokens=32))
    rng = random.Random(7)
    for kind in ("Cancellation", "False Trigger", "Correction"):
        result = judge.judge_record(_record(kind, kind, rng))
        assert result.n_unjudged == 0, result.judgements
        # ok: the JSON as asked; fallback_number: a number in a reply the tiny model got slightly wrong
        assert {j["status"] for j in result.judgements.values()} <= {"ok", "fallback_number"}
        expected = {metric: 1.0 for metric in metrics_for(kind)}
        expected["ca_open"] = float(kind == "Correction")
        assert result.scores == expected
        assert result.judgements["ca_open"]["class"] == "Correction"
    assert judge.n_calls == 3 * len(metrics_for("Correction"))


@pytest.mark.slow
def test_judge_calibration_cli_against_the_server(served_json_model, tmp_path, capsys):
    import random

    from eval import judge_calibrate

    human = tmp_path / "human.jsonl"
    rng = random.Random(3)
    lines = [{**judge_item(rng), "human": {"iac": 1, "tfs": 4}} for _ in range(2)]
    human.write_text("".join(json.dumps(line) + "\n" for line in lines))
    server = [
        "--base-url",
        served_json_model.base_url,
        "--model",
        served_json_model.model,
        "--timeout-s",
        "60",
    ]
    assert judge_calibrate.main(["--human", str(human), *server, "--out", str(tmp_path / "mae.json")]) == 0
    metrics = json.loads((tmp_path / "mae.json").read_text())["metrics"]
    assert metrics["iac"] == {"mae": 0.0, "n": 2, "n_unjudged": 0}  # replies 1, humans 1
    assert metrics["tfs"] == {"mae": 3.0, "n": 2, "n_unjudged": 0}  # replies 1, humans 4
    assert "IAC" in capsys.readouterr().out


ROWS = [
    {"id": f"q{i}", "question": render_question(stem, options), "answer": answer}
    for i, (stem, options, answer) in enumerate(
        [
            ("What colour is the circle?", ["red", "blue", "green"], "A"),
            ("Which way does it move?", ["left", "right", "up", "down"], "C"),
            ("How many objects appear?", ["1", "2", "3", "4"], "A"),
            ("Did it appear before or after the square?", ["before", "after"], "B"),
        ]
    )
]


@pytest.mark.slow
def test_the_blind_filter_decides_on_real_replies(served_json_model):
    """The tuned model always says A: without rotation the rows whose answer is A are answered blind in
    both rounds and dropped; with rotation (the default) a model that always says A drops nothing."""
    model = _client(served_json_model)
    fixed = blind_filter(ROWS, [model], rounds=2, rotate=False)
    assert [i for i, _ in fixed.removed] == ["q0", "q2"] and [r["id"] for r in fixed.kept] == ["q1", "q3"]
    rotated = blind_filter(ROWS, [model], rounds=2, rotate=True)
    assert rotated.removed == [] and len(rotated.kept) == len(ROWS)
    (report,) = rotated.info["models"]
    assert (report["asked"], report["unjudged"], rotated.info["unjudged"]) == (4, 0, [])
    assert report["right_rounds"] == {"0": 1, "1": 3}  # A is right once for q0, q2 and q3, never for q1
    assert model.n_requests == 16


@pytest.mark.slow
def test_the_vp_sft_build_runs_its_blind_filter_on_the_server(served_json_model, tmp_path: Path):
    import subprocess
    import sys

    from data_builders.synthetic_world import build_world

    build_world(tmp_path / "world", 2, seed=0)
    keys = {
        "backend": "endpoint",
        "model": served_json_model.model,
        "endpoint.base_url": served_json_model.base_url,
        "endpoint.timeout_s": 60,
    }
    blind = [f"builder.qc.blind.first.{key}={value}" for key, value in keys.items()]
    command = [sys.executable, "-m", "data_builders", "builder=vp_sft", "builder.world=world"]
    done = subprocess.run(
        [*command, "builder.questions_per_video=3", "builder.out=out", *blind],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    info = json.loads((tmp_path / "out" / "build_info.json").read_text())
    step = next(s for s in info["qc"] if s["step"] == "blind")
    (report,) = step["models"]
    assert report["model"].startswith(f"endpoint:{served_json_model.model}|")
    assert report["asked"] > 0 and report["unjudged"] == 0 and step["unjudged"] == []
    assert step["removed"] == []  # always A, options rotated: nothing is answered blind in every round


@pytest.mark.slow
def test_questions_are_generated_from_captions_and_frames(served_json_model, tmp_path: Path):
    from data_builders.ovi_train import build_ovi_train
    from data_builders.questions import QuestionConfig

    captions, videos = make_source(tmp_path, 2)
    endpoint = EndpointConfig(base_url=served_json_model.base_url, timeout_s=60.0, max_retries=0)
    model = {"backend": "endpoint", "model": served_json_model.model, "max_tokens": 48}
    questions = QuestionConfig(**model, frames=2, attempts=1, endpoint=endpoint)
    out = build_ovi_train(ovi_build(captions, videos, seed=0, questions=questions))
    info = json.loads((out / "build_info.json").read_text())
    summary = info["settings"]["questions"]
    assert summary["generated"] == summary["requests"] > 0
    assert (summary["failed"], summary["errors"]) == (0, 0)
    rows = [json.loads(line) for line in (out / "ovibench.jsonl").read_text().splitlines()]
    generated = [r for r in rows if r["question"] == QUESTION]
    assert generated and all(r["answer"] == ANSWER for r in generated)
