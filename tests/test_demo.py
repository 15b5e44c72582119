"""The live demo (demo/): an answer streamed on the tiny model and interrupted where the user clicks goes on
exactly as OVIBench's simulation (the same answer, the same reaction); a session saved as an OVIBench item
replays the same through the benchmark's loader, one saved as a V2P-Bench item keeps the drawing; bad
requests are clear; the config composes typed; and, in a real browser, the whole page: a rendered test
video loaded, a box drawn with the mouse, the answer interrupted mid-stream, the reaction shown, both
items saved and loaded back."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from browser import chromium
from PIL import Image

from core.errors import DataError, UserError
from core.formats.ovi import load_ovibench
from core.formats.v2p import load_v2p_release, render_question
from core.video_io import write_mp4
from data_builders.synthetic_world import make_scene, render_frames
from demo.saving import save_ovi, save_v2p
from demo.server import DemoState, make_server
from demo.session import LiveSession, Question, conversation
from demo.video import Drawing, Video, encode
from models.ovi_simulation import interruption_cut, simulate_interruption

CUT = 5  # the answer token the tests interrupt after
REACTION_TOKENS = 10
CORRECTION = "No, I meant the other object."


@pytest.fixture(scope="module")
def video(tmp_path_factory) -> Path:
    """A rendered synthetic-world video (48 frames at 8 fps: 6 s, 112 px)."""
    scene = make_scene("v_demo", np.random.default_rng([7, 0]))
    path = tmp_path_factory.mktemp("demo_video") / "v_demo.mp4"
    write_mp4(path, render_frames(scene), scene.fps)
    return path


@pytest.fixture(scope="module")
def model(tiny_checkpoint):
    from core.config import ModelConfig
    from models.loading import load_model

    return load_model(ModelConfig(name_or_path=str(tiny_checkpoint)))[0].eval()


@pytest.fixture()
def session(model, adapter) -> LiveSession:
    return LiveSession(model, adapter, max_new_tokens=24, max_new_tokens_reaction=REACTION_TOKENS)


def _interrupting_at(session: LiveSession, tokens: int, kind: str = "correction", words: str = CORRECTION):
    """An event sink that interrupts the answer once it has ``tokens`` tokens, as a click would."""

    def emit(event):
        if event["event"] == "answer" and event["tokens"] == tokens:
            session.interrupt(kind, words)

    return emit


def _question(video: Path, text: str = "What happens in the video?", frame: Path | None = None) -> Question:
    return Question(str(video), Video(video, 600).duration, text, str(frame) if frame else None)


def test_an_interrupted_answer_goes_on_as_the_simulation_from_the_same_cache(session, model, adapter, video):
    question = _question(video)
    exchange = session.run(question, _interrupting_at(session, CUT))
    assert len(exchange.answer_ids) == CUT and not exchange.answer_finished
    assert exchange.interruption.words == CORRECTION and exchange.reaction_ids
    simulated = simulate_interruption(
        model, adapter, conversation(question, CORRECTION), cut_tokens=CUT, max_new_tokens=REACTION_TOKENS
    )
    assert simulated.answer_ids == exchange.answer_ids and simulated.truncated_answer == exchange.answer
    assert simulated.reaction_ids == exchange.reaction_ids and simulated.reaction == exchange.reaction


def test_a_session_saved_as_an_ovibench_item_replays_the_same_through_the_loader(
    session, model, adapter, video, tmp_path
):
    exchange = session.run(_question(video), _interrupting_at(session, CUT, "false_alarm", ""))
    saved = save_ovi(exchange, tmp_path, tokens_per_second=3.0)
    (item,) = [s for s in load_ovibench(saved.root) if s.id == saved.id]
    assert item.meta["interruption_type"] == "False Trigger" and item.meta["format"] == "open"
    assert interruption_cut(item) == CUT  # `python -m eval` cuts the replayed answer at the same token
    replayed = simulate_interruption(model, adapter, item, max_new_tokens=REACTION_TOKENS)
    assert replayed.truncated_answer == exchange.answer and replayed.reaction == exchange.reaction
    again = save_ovi(exchange, tmp_path, tokens_per_second=3.0)  # items accumulate in one release
    assert [s.id for s in load_ovibench(saved.root)] == [saved.id, again.id]


def test_a_session_saved_as_a_v2p_item_keeps_the_drawing(session, video, tmp_path):
    clip = Video(video, 600)
    drawing = Drawing(frame=20, shape="rectangle", box=(20.0, 30.0, 70.0, 80.0), colour="yellow")
    drawn = clip.draw(drawing)
    assert (drawn != clip.frame(20)).any()
    frame = tmp_path / "prompt.png"
    frame.write_bytes(encode(drawn, "PNG"))
    text = render_question("What colour is the object in the box?", ["red", "green", "blue"])
    exchange = session.run(_question(video, text, frame), lambda event: None, wait_s=0)
    saved = save_v2p(exchange, drawing, tmp_path / "out", answer="B")
    (item,) = load_v2p_release(saved.root)
    video_part, question_part, image_part = item.turns[0].parts
    assert (video_part.type, question_part.text, image_part.type) == ("video", text, "image")
    assert video_part.end == pytest.approx(clip.duration)
    assert np.array_equal(np.asarray(Image.open(image_part.path).convert("RGB")), drawn)
    assert item.meta["prompt_shape"] == "rectangle" and item.meta["answer"] == "B"
    assert [p.type for p in item.turns[0].parts] == [p.type for p in exchange.question.turn().parts]


def test_saved_sessions_are_replayed_by_the_evaluation(session, adapter, video, tiny_checkpoint, tmp_path):
    """Both saved items through the evaluation `python -m eval` runs (its loaders, its simulation): the
    OVIBench item's answer is cut at the same token and the same reaction follows; the V2P item, drawing
    and all, is answered as the demo answered it, against the letter saved."""
    from omegaconf import OmegaConf

    from core.config import EvalConfig, EvalRunConfig, ModelConfig
    from core.decoding import MediaSpec
    from core.media import FrameCache
    from core.metric_logging import NullLogger
    from core.run import Run
    from core.rundir import RunDir
    from eval.benchmarks import resolve_settings
    from eval.benchmarks.ovi import OviSettings
    from eval.benchmarks.v2p import V2PSettings
    from eval.evaluation import Evaluation
    from eval.run_models import open_models

    ovi = save_ovi(session.run(_question(video), _interrupting_at(session, CUT)), tmp_path, 3.0)
    drawing = Drawing(frame=10, shape="ellipse", box=(20.0, 20.0, 60.0, 70.0))
    frame = tmp_path / "prompt.png"
    frame.write_bytes(encode(Video(video, 600).draw(drawing), "PNG"))
    text = render_question("What is marked?", ["a circle", "a square"])
    asked = session.run(_question(video, text, frame), lambda event: None, wait_s=0)
    v2p = save_v2p(asked, drawing, tmp_path, "A")
    settings = {
        "ovi": OviSettings(root=str(ovi.root), max_new_tokens_open=REACTION_TOKENS),
        "v2p": V2PSettings(root=str(v2p.root), max_new_tokens=4),
    }
    cfg = EvalRunConfig(
        model=ModelConfig(name_or_path=str(tiny_checkpoint)),
        media=MediaSpec(num_frames=4),  # the session's adapter's
        eval=EvalConfig(benchmarks=["ovi", "v2p"], settings=settings, bootstrap_resamples=10),
        output_root=str(tmp_path / "outputs"),
        run_name="replay",
    )
    run = Run(OmegaConf.to_object(OmegaConf.structured(cfg)), RunDir(tmp_path / "outputs" / "replay"))
    run = Run(run.cfg.__class__(**{**vars(run.cfg), "eval": resolve_settings(run.cfg.eval)}), run.dir)
    cache = FrameCache(run.cfg.data.frame_cache)
    evaluation = Evaluation(run, NullLogger(), cache)
    with open_models(run, cache, device="cpu", serve=False).predictor() as predictor:
        evaluation.evaluate(predictor, "model", step=0)
    results = evaluation.read_results("model")
    (replayed,) = results.records["ovi"]
    (row,) = [r for r in load_ovibench(ovi.root) if r.id == ovi.id]
    assert replayed["simulation"]["cut_tokens"] == CUT
    assert replayed["truncated_answer"] == row.meta["partial_answer"]
    assert replayed["prediction"] == row.turns[-1].text  # the reaction saved as the reference
    (answered,) = results.records["v2p"]
    assert answered["id"] == v2p.id and answered["meta"]["answer"] == "A"
    # The evaluation's answer (4 tokens) is the first 4 tokens of the one the demo streamed.
    first = adapter.decode_generated(torch.tensor([asked.answer_ids[:4]]), 0)[0]
    assert answered["prediction"] == first


def test_bad_requests_say_what_is_wrong(session, video, tmp_path):
    exchange = session.run(_question(video), lambda event: None, wait_s=0)
    with pytest.raises(DataError, match="interrupt first"):
        save_ovi(exchange, tmp_path, 3.0)
    with pytest.raises(DataError, match="needs a visual prompt"):
        save_v2p(exchange, None, tmp_path, "A")
    with pytest.raises(DataError, match="is empty inside the 112x112 frame"):
        Video(video, 600).draw(Drawing(0, "rectangle", (200.0, 200.0, 300.0, 300.0)))
    with pytest.raises(DataError, match="video not found"):
        Video(tmp_path / "missing.mp4", 600)
    with pytest.raises(ValueError, match="a correction needs its words"):
        session.interrupt("correction", "  ")
    state = DemoState(session, tmp_path, 600, 3.0)
    with pytest.raises(UserError, match="no video loaded"):
        state.draw({"tool": "box", "box": [0, 0, 5, 5]})
    state.load_video(video)
    with pytest.raises(UserError, match="tool 'lasso' not in"):
        state.draw({"tool": "lasso", "box": [0, 0, 5, 5]})


def test_the_demo_config_composes_typed(compose):
    from hydra.errors import ConfigCompositionException

    from demo.config import DemoConfig, register_demo_config

    register_demo_config()
    config = compose("demo", "checkpoint=outputs/run/checkpoints/checkpoint-2", "demo.port=0")
    assert isinstance(config, DemoConfig) and config.demo.port == 0 and config.eval.benchmarks == []
    with pytest.raises(ConfigCompositionException, match="prot"):
        compose("demo", "demo.prot=1")


def test_the_demo_in_a_browser_draw_ask_interrupt_react_save(model, adapter, video, tmp_path):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.select import Select
    from selenium.webdriver.support.ui import WebDriverWait

    # The tiny model's answers run to their limit; a pause per token leaves time to click mid-stream.
    session = LiveSession(model, adapter, max_new_tokens=40, max_new_tokens_reaction=8, token_delay_s=0.1)
    state = DemoState(session, tmp_path / "out", 600, 3.0)
    server = make_server(state, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with chromium() as driver:
            wait = WebDriverWait(driver, 60)
            driver.get(f"http://127.0.0.1:{server.server_address[1]}/")
            driver.find_element(By.ID, "video-file").send_keys(str(video))
            wait.until(lambda d: d.find_element(By.ID, "canvas").get_attribute("data-frame") == "0")
            scrub = driver.find_element(By.ID, "scrub")
            driver.execute_script(
                "arguments[0].value = 24; arguments[0].dispatchEvent(new Event('input'))", scrub
            )
            wait.until(lambda d: d.find_element(By.ID, "canvas").get_attribute("data-frame") == "24")
            canvas = driver.find_element(By.ID, "canvas")  # 448 px on screen for 112 frame pixels
            ActionChains(driver).move_to_element_with_offset(
                canvas, -120, -100
            ).click_and_hold().move_by_offset(60, 40).move_by_offset(60, 40).release().perform()
            wait.until(lambda d: d.find_element(By.ID, "canvas").get_attribute("data-drawn") == "1")
            assert state.drawing.frame == 24 and state.drawing.shape == "rectangle"
            # The drag, from (-120, -100) off the canvas's centre by (120, 80) screen pixels, in frame pixels.
            scale, half = 112 / canvas.size["width"], canvas.size["width"] / 2
            dragged = ((half - 120) * scale, (half - 100) * scale, half * scale, (half - 20) * scale)
            assert state.drawing.box == pytest.approx(dragged, abs=1.0)
            driver.find_element(By.ID, "question").send_keys("What colour is the object in the box?")
            for letter, option in zip("ABC", ("red", "green", "blue"), strict=True):
                driver.find_element(By.ID, f"opt-{letter}").send_keys(option)
            driver.find_element(By.ID, "ask").click()
            wait.until(lambda d: session.exchange is not None and len(session.exchange.answer_ids) >= 4)
            driver.find_element(By.ID, "correction-words").send_keys(CORRECTION)
            driver.find_element(By.ID, "btn-correction").click()
            wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-phase") == "done")
            exchange = session.exchange
            assert not exchange.answer_finished and len(exchange.answer_ids) < 40  # cut mid-stream
            assert "Correction after" in driver.find_element(By.ID, "interruption").text
            assert driver.find_element(By.ID, "reaction").text.strip() == exchange.reaction.strip() != ""
            Select(driver.find_element(By.ID, "save-format")).select_by_value("v2p")
            Select(driver.find_element(By.ID, "save-answer")).select_by_value("C")
            driver.find_element(By.ID, "save").click()
            wait.until(lambda d: d.find_element(By.ID, "saved").get_attribute("data-id"))
            Select(driver.find_element(By.ID, "save-format")).select_by_value("ovi")
            v2p_id = driver.find_element(By.ID, "saved").get_attribute("data-id")
            driver.find_element(By.ID, "save").click()
            wait.until(lambda d: d.find_element(By.ID, "saved").get_attribute("data-id") != v2p_id)
    finally:
        server.shutdown()
    (v2p_item,) = load_v2p_release(tmp_path / "out" / "v2p")
    image = np.asarray(Image.open(v2p_item.turns[0].parts[2].path).convert("RGB"))
    assert np.array_equal(image, Video(video, 600).draw(state.drawing))  # the same drawing, pixel for pixel
    assert v2p_item.meta["prompt_shape"] == "rectangle" and v2p_item.meta["answer"] == "C"
    (ovi_item,) = load_ovibench(tmp_path / "out" / "ovibench")
    assert ovi_item.meta["interruption"] == CORRECTION and interruption_cut(ovi_item) == len(
        exchange.answer_ids
    )
