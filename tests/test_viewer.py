"""The results viewer (eval/viewer.py; `python -m eval view`: eval/view.py): the page written beside the
report of a run evaluated on the tiny model (a baseline, and a checkpoint whose answers are edited so that
items go wrong → right and right → wrong), `python -m eval view`, a page that needs no network, what a
benchmark adds to its items, and the page in a real browser: its items drawn, a filter changing what is
shown, its frames loaded."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from browser import chromium, load_ms
from omegaconf import OmegaConf
from paths import REPO

from core.answers import official_correct
from core.config import EvalConfig, EvalRunConfig, ModelConfig
from core.decoding import MediaSpec
from core.media import FrameCache
from core.metric_logging import NullLogger
from core.run import Run
from core.rundir import RunDir
from eval.benchmarks.ovi import OviSettings
from eval.benchmarks.v2p import V2PSettings

ITEMS = 6  # per benchmark


def _edit(path: Path, edit) -> None:
    records = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(edit(i, r)) + "\n" for i, r in enumerate(records)))


def _right_on_even(i: int, record: dict) -> dict:
    """checkpoint-2's V2P answers: right on even items, wrong on odd ones."""
    answer = record["meta"]["answer"]
    return {**record, "prediction": answer if i % 2 == 0 else ("B" if answer == "A" else "A")}


def _right_on_item_1(i: int, record: dict) -> dict:
    """The baseline's V2P answers: right on item 1 only (which checkpoint-2 then gets wrong)."""
    return {**record, "prediction": record["meta"]["answer"]} if i == 1 else record


def _judged(i: int, record: dict) -> dict:
    if record["meta"]["format"] != "open":
        return record
    judgement = {"score": 7.0, "raw": "Score: 7. The reaction follows the correction.", "judge": "test"}
    return {**record, "judgements": {"cfs": {**judgement, "metric": "cfs", "rubric_version": 1}}}


@pytest.fixture(scope="module")
def viewer_run(tmp_path_factory, synthetic_build, tiny_checkpoint) -> Path:
    """A run directory as `python -m eval` leaves it (its composed config under .hydra/), with a baseline
    and a checkpoint-2 on 6 items of each benchmark; returns it."""
    from eval.benchmarks import resolve_settings
    from eval.evaluation import Evaluation
    from eval.run_models import open_models

    root = tmp_path_factory.mktemp("viewer")
    settings = {
        "v2p": V2PSettings(root=str(synthetic_build.v2p_bench), max_new_tokens=4),
        "ovi": OviSettings(root=str(synthetic_build.ovibench), max_new_tokens=4, max_new_tokens_open=6),
    }
    cfg = EvalRunConfig(
        model=ModelConfig(name_or_path=str(tiny_checkpoint)),
        media=MediaSpec(num_frames=4),
        eval=EvalConfig(benchmarks=["v2p", "ovi"], settings=settings, limit=ITEMS, bootstrap_resamples=20),
        output_root=str(root),
        run_name="run",
    )
    run = Run(OmegaConf.to_object(OmegaConf.structured(cfg)), RunDir(root / "run"))  # run_dir resolved
    run = Run(run.cfg.__class__(**{**vars(run.cfg), "eval": resolve_settings(run.cfg.eval)}), run.dir)
    (run.dir.path / ".hydra").mkdir(parents=True)
    (run.dir.path / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.structured(cfg)))
    cache = FrameCache(run.cfg.data.frame_cache)
    evaluation = Evaluation(run, NullLogger(), cache)
    with open_models(run, cache, device="cpu", serve=False).predictor() as predictor:
        evaluation.evaluate(predictor, "baseline", step=0)
    baseline, checkpoint = run.dir.eval_dir / "baseline", run.dir.eval_dir / "checkpoint-2"
    shutil.copytree(baseline, checkpoint)
    _edit(baseline / "v2p.jsonl", _right_on_item_1)
    _edit(checkpoint / "v2p.jsonl", _right_on_even)
    _edit(checkpoint / "ovi.jsonl", _judged)
    run.dir.add_model("checkpoint-2", 2)
    evaluation.write_summary()  # summary.json, report.md and, beside them, viewer.html
    return run.dir.path


def page_data(page: Path) -> dict:
    """The JSON the page carries."""
    found = re.search(
        r'<script id="viewer-data" type="application/json">(.*?)</script>', page.read_text(), re.S
    )
    return json.loads(found.group(1))


def test_the_page_is_written_beside_the_report_with_every_item_and_its_frames(viewer_run):
    page = viewer_run / "viewer.html"
    assert page.exists() and (viewer_run / "report.md").exists()
    data = page_data(page)
    assert [m["name"] for m in data["models"]] == ["baseline", "checkpoint-2"]
    assert sorted(item["b"] for item in data["items"]) == ["ovi"] * ITEMS + ["v2p"] * ITEMS
    assert {(row["bench"], row["metric"]) for row in data["headline"]} >= {("v2p", "accuracy"), ("ovi", "ma")}
    for item in data["items"]:
        assert set(item["a"]) == {"baseline", "checkpoint-2"}
        assert item["media"] and all(part["key"] in data["media"] for part in item["media"]), item["id"]
        kinds = [part["kind"] for part in item["media"]]
        assert ("image" in kinds) == (item["b"] == "v2p")  # V2P's visual-prompt frame, with its drawing
    ovi_open = [i for i in data["items"] if i["b"] == "ovi" and i["ovi"]["format"] == "open"]
    assert ovi_open and all("cut" in i["a"]["baseline"] and i["ovi"]["words"] for i in ovi_open)
    assert all(i["a"]["checkpoint-2"]["j"]["cfs"]["raw"].startswith("Score: 7") for i in ovi_open)
    assert not data["missing"]
    # Thumbnails keep the page small: a few kilobytes a frame.
    assert page.stat().st_size < 40_000 * len(data["items"])


def test_the_page_fetches_nothing(viewer_run):
    text = (viewer_run / "viewer.html").read_text()
    for remote in ('src="http', "src='http", 'href="http', "url(http", "@import", "<link", "fetch("):
        assert remote not in text, remote


def test_the_page_reads_the_runs_frame_cache_and_never_makes_one(tmp_path):
    from eval.viewer import frame_cache

    assert frame_cache(str(tmp_path)).root == tmp_path  # the run's, as its evaluation filled it
    # A config built in code keeps its interpolations: no "${output_root}" directory in the working tree.
    assert frame_cache("${output_root}/frame_cache").root is None
    assert frame_cache(str(tmp_path / "absent")).root is None and not (tmp_path / "absent").exists()
    assert frame_cache(None).root is None


def test_a_benchmark_adds_its_own_to_its_items_on_the_page():
    """OVIBench's items (and the held-out pairs made from them) carry their interruption's timeline, where
    the simulation cut the answer included; other benchmarks add nothing."""
    from eval.benchmarks import BENCHMARKS

    said, partial = "No, the blue one.", "The red"
    meta = {"question_time": 2.0, "interruption_time": 5.0, "duration": 8.0, "format": "open",
            "interruption_type": "Correction", "interruption": said, "partial_answer": partial}  # fmt: skip
    answers = {"baseline": {"sim": {"cut_tokens": None}}, "checkpoint-2": {"sim": {"cut_tokens": 7}}}
    timeline = {"tq": 2.0, "ti": 5.0, "duration": 8.0, "type": "Correction", "words": said,
                "partial": partial, "format": "open", "cut": 7}  # fmt: skip
    assert BENCHMARKS["ovi"].viewer_item(meta, answers) == {"ovi": timeline}
    assert BENCHMARKS["ovi_pairs"].viewer_item(meta, answers) == {"ovi": timeline}
    assert BENCHMARKS["v2p"].viewer_item(meta, answers) == {}


def test_python_m_eval_view_writes_the_page_again(viewer_run, tmp_path):
    out = tmp_path / "again.html"
    done = subprocess.run(
        [sys.executable, "-m", "eval", "view", str(viewer_run), "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"viewer: {out}" in done.stdout
    assert page_data(out)["items"] == page_data(viewer_run / "viewer.html")["items"]


def test_python_m_eval_view_of_a_directory_without_a_run_is_one_line(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "eval", "view", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'eval' / 'models.json'}: not found: no evaluation in this run directory"
    ]


def _cards(driver) -> list:
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, "#items .item")


def test_the_page_in_a_browser_shows_the_items_filters_them_and_loads_the_frames(viewer_run):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.select import Select
    from selenium.webdriver.support.ui import WebDriverWait

    page = viewer_run / "viewer.html"
    data = page_data(page)
    with chromium() as driver:
        driver.get(page.as_uri())
        WebDriverWait(driver, 20).until(
            lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready")
        )
        print(f"viewer load: {load_ms(driver):.0f} ms for {len(data['items'])} items")
        assert len(_cards(driver)) == len(data["items"])
        assert (
            driver.find_element(By.ID, "count").text == f"{len(data['items'])} of {len(data['items'])} items"
        )
        images = driver.find_elements(By.CSS_SELECTOR, "#items img")
        assert images
        for image in images:
            driver.execute_script("arguments[0].scrollIntoView()", image)  # lazy images load when seen
        WebDriverWait(driver, 10).until(
            lambda d: d.execute_script(
                "return [...document.querySelectorAll('#items img')]"
                ".every(i => i.complete && i.naturalWidth > 0)"
            )
        )
        Select(driver.find_element(By.ID, "f-bench")).select_by_value("ovi")
        assert {card.get_attribute("data-bench") for card in _cards(driver)} == {"ovi"}
        assert len(_cards(driver)) == ITEMS
        assert driver.find_elements(By.CSS_SELECTOR, "#items .timeline")  # OVI: the interruption's timeline
        Select(driver.find_element(By.ID, "f-bench")).select_by_value("v2p")
        Select(driver.find_element(By.ID, "f-outcome")).select_by_value("fixed")
        fixed = _v2p_ids(data, baseline=False, checkpoint=True)
        assert fixed and {card.get_attribute("data-id") for card in _cards(driver)} == fixed
        Select(driver.find_element(By.ID, "f-outcome")).select_by_value("broken")
        assert {card.get_attribute("data-id") for card in _cards(driver)} == _v2p_ids(data, True, False)
        Select(driver.find_element(By.ID, "f-outcome")).select_by_value("")
        Select(driver.find_element(By.ID, "f-bench")).select_by_value("")
        search = driver.find_element(By.ID, "f-search")
        search.send_keys(data["items"][-1]["id"])
        assert [card.get_attribute("data-id") for card in _cards(driver)] == [data["items"][-1]["id"]]


def _v2p_ids(data: dict, baseline: bool, checkpoint: bool) -> set[str]:
    """The V2P items the baseline and checkpoint-2 got right (True) or wrong, by the official rule."""

    def right(item, model):
        return official_correct(item["a"][model]["p"], item["ref"])

    return {
        item["id"]
        for item in data["items"]
        if item["b"] == "v2p"
        and right(item, "baseline") == baseline
        and right(item, "checkpoint-2") == checkpoint
    }
