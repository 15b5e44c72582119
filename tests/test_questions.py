"""Question generation: the template default, the endpoint backend against a scripted local server,
the cache (no second request, resume after a crash, a line a kill cut short), quarantine, and the settings."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from caption_sources import make_source as _make_source
from caption_sources import ovi_build
from fake_openai import ChatServer, completion, endpoint_settings

from core.errors import ConfigError
from core.files import JsonlStore
from core.text_models import EndpointConfig, TextModelError
from core.video_io import write_mp4
from data_builders.ovi_train import build_ovi_items, build_ovi_train
from data_builders.questions import (
    QA,
    ModelQuestions,
    QuestionConfig,
    QuestionContext,
    TemplateQuestions,
    as_sentence,
    choose_question,
    make_question_generator,
    parse_reply,
    video_questions,
)
from data_builders.sources.activitynet import load_activitynet_captions
from data_builders.sources.captions import Caption, CaptionedVideo

# Keywords in a caption script the fake server: BROKEN never gets valid JSON, FLAKY gets HTTP 500 once.
CAPTIONS = {
    "v_kitchen": {
        "duration": 8.0,
        "timestamps": [[0.0, 3.0], [3.0, 6.0], [3.0, 6.0], [5.0, 8.0]],
        "sentences": [
            "A man chops onions on a board",
            "He pours oil into a pan",
            "the stove is turned on",
            "He stirs the onions FLAKY",
        ],
    },
    "v_park": {
        "duration": 8.0,
        "timestamps": [[0.0, 4.0], [4.0, 8.0]],
        "sentences": ["A dog runs across the grass", "The dog catches a frisbee BROKEN"],
    },
    "v_street": {
        "duration": 8.0,
        "timestamps": [[0.0, 2.5], [2.5, 7.5]],
        "sentences": ["A red car stops at the light", "A woman crosses the street"],
    },
}


def _write_source(root: Path, captions: dict) -> tuple[Path, Path]:
    frames = np.random.default_rng(0).integers(0, 255, size=(8, 32, 32, 3), dtype=np.uint8)
    for key in captions:
        write_mp4(root / "videos" / f"{key}.mp4", frames, fps=1.0)
    path = root / "captions.json"
    path.write_text(json.dumps(captions))
    return path, root / "videos"


@pytest.fixture()
def source(tmp_path: Path) -> tuple[Path, Path]:
    return _write_source(tmp_path, CAPTIONS)


@pytest.fixture()
def good_source(tmp_path: Path) -> tuple[Path, Path]:
    """Captions the server always answers well (7 segments)."""
    clean = {
        k: {**v, "sentences": [s.replace(" FLAKY", "") for s in v["sentences"]]} for k, v in CAPTIONS.items()
    }
    clean["v_park"]["sentences"][1] = "The dog catches a frisbee"
    return _write_source(tmp_path / "good", clean)


def _prompt(body: dict) -> tuple[str, list[dict]]:
    """The last message's text and its image parts."""
    content = body["messages"][-1]["content"]
    parts = content if isinstance(content, list) else [{"type": "text", "text": content}]
    images = [p for p in parts if p["type"] == "image_url"]
    return next(p["text"] for p in parts if p["type"] == "text"), images


def _request(handler, body: dict) -> dict:
    """What the tests check of a request: its text and the frames sent with it."""
    text, images = _prompt(body)
    return {"text": text, "images": images}


def _reply(server: ChatServer, handler, body: dict) -> tuple[int, bytes]:
    """The scripted model: HTTP 500 the first time a FLAKY prompt comes, prose without JSON for BROKEN ones,
    else a question and answer on the segment's first caption."""
    text, _ = _prompt(body)
    with server.lock:
        first_flaky = "FLAKY" in text and text not in server._flaky_seen
        server._flaky_seen.add(text)
    if first_flaky:
        return 500, b"overloaded"
    if "BROKEN" in text:
        return 200, completion("Sure! The dog is playing, I think.")
    first = re.search(r"^- (.*)$", text, re.M).group(1)
    qa = {
        "question": f"What is shown before the segment ends? ({first[:12]})",
        "answer": f"In it, {first}",
    }
    return 200, completion(f"Here you go:\n```json\n{json.dumps(qa)}\n```")


@pytest.fixture()
def server(chat_server) -> ChatServer:
    """A scripted ``/chat/completions`` server (tests/fake_openai.py) answering as ``_reply``, logging every
    request's text and frames."""
    httpd = chat_server(lambda handler, body: _reply(httpd, handler, body), _request)
    httpd._flaky_seen = set()
    return httpd


def _endpoint(server: ChatServer, cache: Path, workers: int = 1) -> QuestionConfig:
    """Question generation by the model behind ``server``, two frames a segment, cached in ``cache``."""
    endpoint = endpoint_settings(server.url, "fake-vlm", backoff_s=0.0, max_retries=2, workers=workers)
    return QuestionConfig(**endpoint, cache=str(cache), frames=2)


# --- template -----------------------------------------------------------------------------------


def test_template_is_the_default_and_lists_questions_in_the_old_order(source: tuple[Path, Path]):
    assert isinstance(make_question_generator(QuestionConfig()), TemplateQuestions)
    default = build_ovi_items(ovi_build(*source, seed=3))
    assert default == build_ovi_items(ovi_build(*source, seed=3), TemplateQuestions())
    data = {
        "v": {
            "duration": 9.0,
            "timestamps": [[0, 4], [0, 4], [2, 9], [4, 9]],
            "sentences": [
                "a red circle moves",
                "a blue square spins",
                "the red circle grows",
                "a green star falls",
            ],
        }
    }
    path = source[0].parent / "objects.json"
    path.write_text(json.dumps(data))
    (video,), _ = load_activitynet_captions(path)
    qas = video_questions(TemplateQuestions(), video, QuestionContext(), [])
    # Per segment: its window question, and when it is one caption's, the other template kinds that fit.
    assert [q.kind for q in qas] == ["window", "window", "when", "window", "when"] + ["object"] * 3
    assert qas[0].answer == "A red circle moves and a blue square spins." and qas[0].segment == (0, 4)
    red = next(q for q in qas if q.name == "red circle")
    assert red.answer == "The red circle grows." and red.captions == {2}  # its longest caption
    assert qas[-1].name == "green star"
    # A source's own QA pair still names objects for the object questions.
    own = Caption("m", 0, 0.0, 5.0, "the man holds a red ball", question="What does the man hold?")
    movie = CaptionedVideo("m", 10.0, [own, Caption("m", 1, 5.0, 9.0, "the man walks away")])
    qas = video_questions(TemplateQuestions(), movie, QuestionContext(), [])
    assert [(q.kind, q.question) for q in qas] == [
        ("source", "What does the man hold?"),
        ("window", "What happens in the video between 5.0 s and 9.0 s?"),
        ("person", "What does the man do between 5.0 s and 9.0 s?"),
        ("when", "When in the video does this happen: the man walks away?"),
        ("object", "Describe what the red ball does."),
    ]


def test_template_rows_are_pinned(tmp_path: Path):
    # The hash of the question fields a seed makes from this source (object and plain captions), so a
    # change of what the templates decide is deliberate: repinned when the template kinds (person, when,
    # after, before, order) and the balanced choice among them came. The interruption fields (timing,
    # phrasing, evidence) are pinned elsewhere.
    rows, _ = build_ovi_items(ovi_build(*_make_source(tmp_path, n_videos=12, seed=5), seed=7))
    fields = ("id", "question", "answer", "segment", "question_time", "duration", "source", "video_path")
    template_fields = [{k: row[k] for k in (*fields, "format")} for row in rows]
    digest = hashlib.sha1(json.dumps(template_fields, sort_keys=True).encode()).hexdigest()
    assert (len(rows), digest) == (108, "23c2e6e171b75599a16d3c2010756ae1d69d5b8c")


# --- endpoint -----------------------------------------------------------------------------------


def test_endpoint_answers_land_in_items_and_bad_replies_are_quarantined(
    source: tuple[Path, Path], server: ChatServer, tmp_path: Path
):
    questions = _endpoint(server, tmp_path / "c.jsonl")
    out = build_ovi_train(ovi_build(*source, out=str(tmp_path / "out"), seed=0, questions=questions))
    rows = [json.loads(line) for line in (out / "ovibench.jsonl").read_text().splitlines()]
    info = json.loads((out / "build_info.json").read_text())
    # 7 segments: 5 good, 1 good after an HTTP 500, 1 invalid in all 3 tries -> 5 + 2 + 3 requests
    assert len(server.requests) == 10
    summary = info["settings"]["questions"]
    assert (summary["generated"], summary["failed"], summary["requests"]) == (6, 1, 9)
    assert summary["backend"] == "endpoint:fake-vlm|temperature=0.0|max_tokens=256|frames=2"
    assert info["quarantine_reasons"] == [
        "v_park[1]: question generation failed: no valid reply in 3 tries; last: no JSON object in the reply"
    ]
    stats = (out / "stats.md").read_text()
    assert f"Questions: {summary['backend']} (generated 6, from_cache 0, failed 1, errors 0)" in stats
    broken = [r["text"] for r in server.requests if "BROKEN" in r["text"]]
    assert len(broken) == 3 and "previous reply was not usable" in broken[1]
    # Captions sharing a segment are asked about together; frames go along as JPEG data URLs.
    shared = next(r["text"] for r in server.requests if "pours oil" in r["text"])
    assert "- The stove is turned on." in shared and "3.0 s to 6.0 s" in shared
    for request in server.requests:
        assert len(request["images"]) == 2
        url = request["images"][0]["image_url"]["url"]
        assert base64.b64decode(url.removeprefix("data:image/jpeg;base64,"))[:2] == b"\xff\xd8"
    asked = {r["question"] for r in rows}
    assert len(asked) == 6 and all(q.startswith("What is shown before the segment ends?") for q in asked)
    assert {r["answer"] for r in rows if "chops" in r["answer"]} == {"In it, A man chops onions on a board."}
    corrections = [r for r in rows if r["interruption_type"] == "Correction"]
    assert corrections and all(r["interruption"].split(": ", 1)[1] in asked for r in corrections)
    assert all(r["reference_reaction"].startswith("In it, ") for r in corrections)


def test_second_build_asks_nothing(source: tuple[Path, Path], server: ChatServer, tmp_path: Path):
    config, build = _endpoint(server, tmp_path / "c.jsonl"), ovi_build(*source, seed=0)
    first = build_ovi_items(build, make_question_generator(config))
    server.requests.clear()
    generator = make_question_generator(config)
    assert build_ovi_items(build, generator) == first
    assert server.requests == []
    assert (generator.summary()["from_cache"], generator.summary()["failed"]) == (7, 1)
    # retry_failed asks again for the one that failed, and nothing else
    config.retry_failed = True
    build_ovi_items(build, make_question_generator(config))
    assert len(server.requests) == 3 and all("BROKEN" in r["text"] for r in server.requests)


def test_concurrent_requests_give_the_same_build(
    source: tuple[Path, Path], server: ChatServer, tmp_path: Path
):
    build = ovi_build(*source, seed=0)
    one_at_a_time = build_ovi_items(build, make_question_generator(_endpoint(server, tmp_path / "a")))
    assert server.most_in_flight == 1
    serial_requests = len(server.requests)
    server.requests.clear()
    server.delay_s, server.most_in_flight, server._flaky_seen = 0.05, 0, set()
    generator = make_question_generator(_endpoint(server, tmp_path / "b", workers=4))
    assert build_ovi_items(build, generator) == one_at_a_time
    assert server.most_in_flight > 1
    # The same requests (the flaky one retried, the broken one asked 3 times), each segment asked once.
    assert len(server.requests) == serial_requests
    summary = generator.summary()
    assert (summary["generated"], summary["failed"], summary["from_cache"]) == (6, 1, 0)


def test_unreachable_endpoint_stops_a_concurrent_build(source: tuple[Path, Path], tmp_path: Path):
    endpoint = EndpointConfig(base_url="http://127.0.0.1:1/v1", max_retries=0, workers=3)
    config = QuestionConfig(
        backend="endpoint", model="m", frames=0, cache=str(tmp_path / "c.jsonl"), endpoint=endpoint
    )
    with pytest.raises(TextModelError, match="first 3 segments failed"):
        build_ovi_items(ovi_build(*source, seed=0), make_question_generator(config))


class _CrashAfter:
    """Wraps a text model; the request after the first ``n`` raises, as a crash would."""

    def __init__(self, model, n: int):
        self.model, self.n, self.identity = model, n, model.identity

    def chat(self, messages, *, seed):
        if self.n == 0:
            raise RuntimeError("crash")
        self.n -= 1
        return self.model.chat(messages, seed=seed)


def test_interrupted_build_resumes_with_only_the_missing_requests(
    good_source: tuple[Path, Path], server: ChatServer, tmp_path: Path
):
    build = ovi_build(*good_source, seed=0)
    reference = build_ovi_items(build, make_question_generator(_endpoint(server, tmp_path / "r")))
    assert len(server.requests) == 7
    server.requests.clear()
    config = _endpoint(server, tmp_path / "c.jsonl")
    crashing = make_question_generator(config)
    crashing.model = _CrashAfter(crashing.model, 4)
    with pytest.raises(RuntimeError, match="crash"):
        build_ovi_items(build, crashing)
    assert len(server.requests) == 4 and len((tmp_path / "c.jsonl").read_text().splitlines()) == 4
    server.requests.clear()
    assert build_ovi_items(build, make_question_generator(config)) == reference
    assert len(server.requests) == 3


def test_a_cache_line_cut_by_a_kill_loses_nothing(
    good_source: tuple[Path, Path], server: ChatServer, tmp_path: Path
):
    build, config = ovi_build(*good_source, seed=0), _endpoint(server, tmp_path / "c.jsonl")
    reference = build_ovi_items(build, make_question_generator(config))
    cache = tmp_path / "c.jsonl"
    lines = cache.read_text().splitlines()
    assert len(lines) == len(server.requests) == 7
    cache.write_bytes(cache.read_bytes()[:-20])  # killed while appending the last segment's line
    server.requests.clear()
    generator = make_question_generator(config)
    assert build_ovi_items(build, generator) == reference
    # Only the cut segment is asked again; every other answer comes from the cache.
    summary = generator.summary()
    assert len(server.requests) == 1 and summary["cache_lines_dropped"] == 1
    assert (summary["from_cache"], summary["generated"]) == (6, 1)
    # The new line is whole, on a line of its own after the fragment, and holds the cut segment again.
    after = cache.read_text().splitlines()
    assert after[:6] == lines[:6] and lines[6].startswith(after[6]) and len(after) == 8
    assert json.loads(after[7])["key"] == json.loads(lines[6])["key"]
    assert JsonlStore(cache, key="key").read() == {
        record["key"]: record for record in map(json.loads, [*lines[:6], after[7]])
    }


def test_unreachable_endpoint_stops_the_build(source: tuple[Path, Path], tmp_path: Path):
    endpoint = EndpointConfig(base_url="http://127.0.0.1:1/v1", max_retries=0)
    config = QuestionConfig(
        backend="endpoint", model="m", frames=0, cache=str(tmp_path / "c.jsonl"), endpoint=endpoint
    )
    with pytest.raises(TextModelError, match="first 3 segments failed"):
        build_ovi_items(ovi_build(*source, seed=0), make_question_generator(config))
    assert not (tmp_path / "c.jsonl").exists()  # transport failures are not cached


# --- local (text only) and the pieces ---------------------------------------------------------------


class _FakeLocal:
    identity = "local:fake|temperature=0.0"

    def __init__(self) -> None:
        self.prompts: list[str] = []

    def answer(self, prompt: str, *, seed: int) -> str:
        self.prompts.append(prompt)
        return '{"question": "What happens?", "answer": "Something happens here."}'


def test_text_only_model_sees_captions_and_no_frames(source: tuple[Path, Path], tmp_path: Path):
    model = _FakeLocal()
    generator = ModelQuestions(model, QuestionConfig(frames=0), tmp_path / "c")
    rows, quarantined = build_ovi_items(ovi_build(*source, seed=0), generator)
    assert len(model.prompts) == 7 and not quarantined and rows
    assert "frames" not in model.prompts[0] and "- A man chops onions on a board." in model.prompts[0]
    config = QuestionConfig(backend="local", model="some/dir", frames=4, endpoint=EndpointConfig(workers=8))
    generator = make_question_generator(config, tmp_path)
    assert (generator.frames, generator.workers) == (0, 1)
    assert generator.cache_path == tmp_path / "question_cache.jsonl"


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        ('```json\n{"question": "Q?", "answer": "It jumps."}\n```', ""),
        ('[1] then {"note": {"x": 1}, "question": "Q?", "answer": "It  jumps."}', ""),
        ('{"question": "Q?"', "no JSON object"),
        ('{"question": "Q?", "answer": "Yes"}', "two words"),
        ('{"question": "", "answer": "It jumps."}', "no question"),
        ('{"question": "Q?", "answer": "' + "word " * 90 + '"}', "longer than 80"),
    ],
)
def test_parse_reply(reply: str, why: str):
    parsed, reason = parse_reply(reply)
    if why:
        assert parsed is None and why in reason
    else:
        assert parsed == {"question": "Q?", "answer": "It jumps."}


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (QuestionConfig(backend="vlm"), "builder.questions.backend"),
        (
            QuestionConfig(backend="endpoint", endpoint=EndpointConfig(base_url="http://x/v1")),
            "builder.questions.model",
        ),
        (QuestionConfig(backend="endpoint", model="m"), "builder.questions.endpoint.base_url"),
        (
            QuestionConfig(backend="endpoint", model="m", endpoint=EndpointConfig(base_url="localhost:8000")),
            "builder.questions.endpoint.base_url must start with http",
        ),
        (QuestionConfig(backend="local", model="m", attempts=0), "attempts"),
    ],
)
def test_bad_settings_are_named(config: QuestionConfig, message: str):
    with pytest.raises(ConfigError, match=message):
        make_question_generator(config)


def test_cli_config_takes_question_settings():
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from data_builders.cli_config import register_configs

    register_configs()
    conf = Path(__file__).resolve().parents[1] / "conf"
    overrides = ["builder=ovi_train", "builder.questions.backend=endpoint", "builder.questions.frames=0"]
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        questions = OmegaConf.to_object(compose("build", overrides=overrides).builder.questions)
        with pytest.raises(Exception, match="frame"):
            compose("build", overrides=["builder=ovi_train", "builder.questions.frame=2"])
    assert isinstance(questions, QuestionConfig) and (questions.backend, questions.frames) == ("endpoint", 0)


# --- template kinds on real-looking captions ---------------------------------------------------


def _violin() -> CaptionedVideo:
    """ActivityNet's kind of captions: overlapping events, a noisy duration, a last event ending at it."""
    sentences = [
        "a man is seen speaking to the camera and leads into him playing the violin",
        "he then begins playing the instrument while moving his fingers along the neck",
        "the man continues to play and ends by putting the violin down",
    ]
    stamps = [(0.0, 20.5), (19.8, 45.0), (44.1, 70.28999999999999)]
    captions = [
        Caption("v", i, s, e, text) for i, ((s, e), text) in enumerate(zip(stamps, sentences, strict=True))
    ]
    return CaptionedVideo("v", 70.28999999999999, captions)


def test_template_kinds_ask_what_the_captions_answer():
    video = _violin()
    first, second, _ = video.captions
    qas = {
        (qa.kind, qa.anchor): qa for qa in video_questions(TemplateQuestions(), video, QuestionContext(), [])
    }
    assert {kind for kind, _ in qas} == {"window", "person", "when", "after", "before", "order"}
    assert qas["person", 0].question == "What does the man do between 0.0 s and 20.5 s?"
    assert qas["person", 1].question == "What does he do between 19.8 s and 45.0 s?"
    assert qas["when", 0].answer == "From 0.0 s to 20.5 s."
    after, before, order = qas["after", 0], qas["before", 0], qas["order", 0]
    assert after.question == f"In the video, {first.sentence}. What happens next?"
    assert after.answer == as_sentence(second.sentence)
    assert before.question == f"In the video, {second.sentence}. What happens just before that?"
    assert before.answer == as_sentence(first.sentence)
    assert order.answer == f"First, {first.sentence}; after that, {second.sentence}."
    assert first.sentence in order.question and second.sentence in order.question
    for qa in qas.values():  # asked once all its evidence has been seen; its segment spans that evidence
        evidence = [c for c in video.captions if c.index in qa.captions]
        assert qa.end == max(c.end for c in evidence) == qa.segment[1]
        assert qa.segment[0] == min(c.start for c in evidence)
    # The last event has none after it.
    assert not [kind for kind, anchor in qas if anchor == 2 and kind in ("after", "before", "order")]


@pytest.mark.parametrize(
    ("stamps", "sentences"),
    [
        ([(0, 30), (10, 40)], ["a man runs", "a dog barks"]),  # starts mid-way: concurrent, not next
        ([(0, 10), (30, 40)], ["a man runs", "a dog barks"]),  # 20 s later: not what happens next
        ([(0, 10), (10, 20), (10, 25)], ["a man runs", "a dog barks", "a cat sits"]),  # two next ones
        ([(0, 10), (10, 20), (20, 30)], ["a man runs", "a dog barks", "a man runs"]),  # it recurs
    ],
)
def test_no_next_event_question_where_the_next_event_is_unclear(stamps, sentences):
    captions = [
        Caption("v", i, s, e, text) for i, ((s, e), text) in enumerate(zip(stamps, sentences, strict=True))
    ]
    video = CaptionedVideo("v", 40.0, captions)
    qas = video_questions(TemplateQuestions(), video, QuestionContext(), [])
    assert not [qa for qa in qas if qa.anchor == 0 and qa.kind in ("after", "before", "order")]


def test_when_lists_every_window_of_a_query_once():
    windows = [(0.0, 10.0), (20.0, 34.5)]
    captions = [Caption("q", i, s, e, "a man rides a bike") for i, (s, e) in enumerate(windows)]
    qas = video_questions(TemplateQuestions(), CaptionedVideo("q", 150.0, captions), QuestionContext(), [])
    (when,) = [qa for qa in qas if qa.kind == "when"]
    assert when.answer == "From 0.0 s to 10.0 s and from 20.0 s to 34.5 s." and when.end == 34.5
    whole = [Caption("u", 0, 0.0, 60.0, "normal activity")]  # nothing to ask "when" about
    assert [
        qa.kind
        for qa in video_questions(
            TemplateQuestions(), CaptionedVideo("u", 60.0, whole), QuestionContext(), []
        )
    ] == ["window"]


def test_choose_question_takes_the_kind_asked_least():
    rng, asked = np.random.default_rng(0), Counter()
    window = QA("w?", "w a", frozenset([0]), frozenset(), 1.0, kind="window")
    when = QA("t?", "t a", frozenset([0]), frozenset(), 1.0, kind="when")
    chosen = [choose_question([window, when], asked, rng).kind for _ in range(6)]
    chosen += [choose_question([window], asked, rng).kind for _ in range(2)]
    assert asked == Counter(window=5, when=3) and chosen.count("when") == 3
