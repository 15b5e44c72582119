"""The LLM judge wired into evaluation: OVIBench meta for the judge, the judge config, judged metrics in
summary.json and report.md, the radar plot, an end-to-end run of the tiny model against a scripted
OpenAI-compatible judge on 127.0.0.1 (valid replies, malformed ones, HTTP 500 for one metric), and a
training run judged by a real server (``transformers serve``)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from fake_openai import ChatServer, completion, endpoint_settings, error_body

from core.config import JudgeConfig
from core.errors import ConfigError
from core.formats.ovi import load_ovibench, ovi_row_to_sample
from eval.benchmarks.ovi import OVI
from eval.judge import item_from_record
from eval.judging import GIVE_UP_AFTER, NO_JUDGE, Judging, make_judge
from eval.radar import RADAR_FILE, radar_panels, write_radar
from eval.report import render_report
from eval.rubrics import BINARY, METRICS, metrics_for
from eval.summary import build_summary

KEY_ENV, KEY = "TEST_WIRING_JUDGE_KEY", "sk-wiring-secret-456"
FAILING_METRIC = "ves"  # the server answers HTTP 500 to every VES prompt
MALFORMED = ("ccs", "Cancellation")  # ... and prose without a number to CCS on Cancellation items
GRADED_REPLY = {"tfs": 8, "cfs": 6, "ccs": 7}


def endpoint_overrides(key: str, url: str) -> list[str]:
    """Command-line settings of a text model at ``key`` reaching the scripted server, quickly."""
    settings = {"base_url": url, "api_key_env": KEY_ENV, "max_retries": 1, "backoff_s": 0.01, "timeout_s": 10}
    return [f"{key}.endpoint.{name}={value}" for name, value in {**settings, "workers": 4}.items()]


# ---------------------------------------------------------------------------------------------------
# A scripted judge server: the reply depends on the metric and the interruption type in the prompt


def _metric_of(prompt: str) -> str:
    return next(name for name, metric in METRICS.items() if f"## Metric: {metric.title}" in prompt)


def _type_of(prompt: str) -> str | None:
    """The item's interruption type as the prompt shows it (None: a classification prompt hides it)."""
    kinds = ("Cancellation", "False Trigger", "Correction")
    return next((kind for kind in kinds if f"({kind}):" in prompt), None)


def _judge_request(handler, body: dict) -> dict:
    """What the tests check of a request: the metric and type its prompt asks about, its key."""
    prompt, auth = body["messages"][0]["content"], handler.headers.get("Authorization")
    return {"metric": _metric_of(prompt), "type": _type_of(prompt), "auth": auth}


def _judge_reply(server: ChatServer, handler, body: dict) -> tuple[int, bytes]:
    """A score for every metric (and "Correction" for every classification); while not ``healthy``,
    FAILING_METRIC gets HTTP 500 and MALFORMED prose."""
    prompt = body["messages"][0]["content"]
    metric, kind = _metric_of(prompt), _type_of(prompt)
    if METRICS[metric].classes:
        return 200, completion(json.dumps({"class": "Correction", "reason": "scripted"}))
    if metric == FAILING_METRIC and not server.healthy:
        return 500, error_body("scripted 500")
    if (metric, kind) == MALFORMED and not server.healthy:
        return 200, completion("I am not able to score this response.")
    score = 1 if METRICS[metric].scale == BINARY else GRADED_REPLY.get(metric, 5)
    return 200, completion(json.dumps({"score": score, "reason": "scripted"}))


@pytest.fixture
def judge_server(chat_server, monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    httpd = chat_server(lambda handler, body: _judge_reply(httpd, handler, body), _judge_request)
    httpd.healthy = False
    return httpd


# ---------------------------------------------------------------------------------------------------
# Meta and config


def test_ovi_meta_carries_what_the_judge_needs(synthetic_build):
    samples = [s for s in load_ovibench(synthetic_build.ovibench) if s.meta["format"] == "open"]
    record = {"id": samples[0].id, "prediction": "<think>hm</think>Okay.", "meta": samples[0].meta}
    item = item_from_record(record)
    assert item["response"] == "Okay."
    assert {"partial_answer", "interruption", "answer", "question"} <= item.keys()
    assert "\n" not in item["interruption"]  # the bare utterance, not the MCQ instruction
    row = json.loads((synthetic_build.ovibench / "ovibench.jsonl").read_text().splitlines()[0])
    assert row["visual_evidence"] and samples[0].meta["visual_evidence"]  # the builders write it
    described = ovi_row_to_sample({**row, "visual_evidence": "A red circle."}, synthetic_build.ovibench)
    assert described.meta["visual_evidence"] == "A red circle."
    undescribed = {key: value for key, value in row.items() if key != "visual_evidence"}
    assert "visual_evidence" not in ovi_row_to_sample(undescribed, synthetic_build.ovibench).meta


def test_make_judge_from_config(tmp_path):
    assert make_judge(JudgeConfig(), tmp_path) is None
    judge = make_judge(JudgeConfig(**endpoint_settings("http://127.0.0.1:9/v1")), tmp_path)
    assert judge.identity == "endpoint:m|temperature=0.0|max_tokens=256"
    assert judge._cache.store.path == tmp_path / "eval" / "judge_cache.jsonl"
    for bad, message in (
        (JudgeConfig("endpoint", "m"), "judge.endpoint.base_url"),
        (JudgeConfig(**endpoint_settings("127.0.0.1:8000")), "http"),
        (JudgeConfig("local"), "judge.model"),
        (JudgeConfig("gpt"), "judge.backend"),
        (JudgeConfig(**endpoint_settings("http://x/v1"), metrics=["tfs", "xyz"]), "xyz"),
    ):
        with pytest.raises(ConfigError, match=message):
            make_judge(bad, tmp_path)


def test_a_dead_judge_is_given_up_on_and_its_items_stay_unjudged(tmp_path, monkeypatch):
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.setenv(name, "127.0.0.1,localhost")
    dead = JudgeConfig(**endpoint_settings("http://127.0.0.1:1/v1", max_retries=0))
    judging = Judging(make_judge(dead, tmp_path), dead)
    meta = {
        "format": "open",
        "interruption_type": "Cancellation",
        "question": "What happens?",
        "partial_answer": "A red",
        "interruption": "Stop.",
        "reference_reaction": "Okay, I'll stop.",
    }
    records = [{"id": f"o{i}", "prediction": "Okay.", "meta": meta} for i in range(40)]
    assert all(judging.needs_judging(OVI, r) for r in records)
    with pytest.warns(UserWarning, match="no reply"):
        judged = list(judging.pending(OVI, records, "judge"))
    assert len(judged) == GIVE_UP_AFTER
    assert all(len(r["judgements"]) == 7 for r in judged)
    assert all(
        j["status"] == "unjudged" and j["score"] is None for r in judged for j in r["judgements"].values()
    )
    assert all(judging.needs_judging(OVI, r) for r in judged)  # asked again by the next evaluation


# ---------------------------------------------------------------------------------------------------
# Summary, report and radar on hand-made records


def _open(item_id: str, kind: str, scores: dict, n_unjudged: int = 0) -> dict:
    categories = {"type": kind, "format": "open"}
    return {"id": item_id, "scores": scores, "categories": categories, **_unjudged(n_unjudged)}


def _unjudged(n: int) -> dict:
    return {"n_unjudged_metrics": n}


def _mcq(item_id: str, kind: str, ca: float) -> dict:
    return {"id": item_id, "scores": {"ma": 1.0, "ca": ca}, "categories": {"type": kind}}


BASE = [
    _open("o1", "Correction", {"iac": 0.0, "tfs": 6.0, "cfs": 4.0, "ccs": 5.0, "ifa": 0.0}, n_unjudged=1),
    _open("o2", "Correction", {"iac": 1.0, "tfs": 7.0, "ves": 5.0, "cfs": 5.0, "ccs": 6.0, "ifa": 1.0}),
    _open("o3", "Cancellation", {"iac": 0.0, "tfs": 5.0, "ifa": 0.0}, n_unjudged=1),
    _mcq("m1", "Correction", 1.0),
    _mcq("m2", "Cancellation", 0.0),
]
TUNED = [
    _open("o1", "Correction", {"iac": 1.0, "tfs": 8.0, "ves": 6.0, "cfs": 7.0, "ccs": 7.0, "ifa": 1.0}),
    _open("o2", "Correction", {"iac": 1.0, "tfs": 8.0, "ves": 6.0, "cfs": 6.0, "ccs": 7.0, "ifa": 1.0}),
    _open("o3", "Cancellation", {"iac": 1.0, "tfs": 9.0, "ccs": 8.0, "ifa": 1.0}),
    _mcq("m1", "Correction", 1.0),
    _mcq("m2", "Cancellation", 1.0),
]


@pytest.fixture
def judged_summary() -> dict:
    return build_summary({"ovi": BASE}, [("checkpoint-9", 9, {"ovi": TUNED})], n_resamples=300)


def test_judged_metrics_in_the_summary(judged_summary):
    ovi = judged_summary["benchmarks"]["ovi"]
    assert (ovi["n_unjudged"], ovi["n_unjudged_items"]) == (2, 2)
    assert ovi["checkpoints"]["checkpoint-9"]["n_unjudged"] == 0
    metrics = ovi["metrics"]
    # An unjudged metric is missing, not zero: baseline CCS averages the two judged items only.
    assert metrics["ccs"]["baseline"] == pytest.approx(5.5) and metrics["ccs"]["n"] == 2
    at_9 = metrics["tfs"]["checkpoints"]["checkpoint-9"]
    assert at_9["value"] == pytest.approx(25 / 3) and at_9["delta"] == pytest.approx(7 / 3)
    for key in ("tfs", "ves", "cfs", "ccs", "tfs/type/Correction"):
        assert metrics[key]["checkpoints"]["checkpoint-9"]["mcnemar_p"] is None, key
    for key in ("iac", "ifa", "ca", "iac/type/Correction"):
        assert metrics[key]["checkpoints"]["checkpoint-9"]["mcnemar_p"] is not None, key


def test_report_shows_graded_metrics_as_means(judged_summary):
    report = render_report(judged_summary)
    assert "| tfs (1–10) | 3 | 6.00 | 8.33 | +2.33 [" in report
    assert "| iac | 3 | 33.3 | 100.0 | +66.7 [" in report
    assert "### tfs (mean, 1–10) by type (baseline vs checkpoint-9)" in report
    assert "| Correction | 2 | 6.50 | 8.00 | +1.50 [" in report
    assert "### cfs (mean, 1–10) by type" not in report  # CFS has one type: the headline says it all
    assert "judged metrics with no reply from the judge: baseline 2, checkpoint-9 0" in report


def test_radar_panels_scale_to_unit_and_the_png_is_written(judged_summary, tmp_path):
    panels = radar_panels(judged_summary)
    correction = panels["Correction"]
    assert correction["axes"] == ["ca", "iac", "tfs", "ves", "ifa", "cfs", "ccs"]
    assert correction["series"]["baseline"][2] == pytest.approx((6.5 - 1) / 9)
    assert correction["series"]["checkpoint-9"][0] == 1.0
    assert panels["Cancellation"]["axes"] == ["ca", "iac", "tfs", "ifa"]
    pytest.importorskip("matplotlib")
    path = write_radar(judged_summary, tmp_path)
    assert path == tmp_path / RADAR_FILE and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------------------------------------------
# End to end: the tiny model, the synthetic OVIBench and the scripted judge


def _eval_cfg(small_eval_config, tmp_path, tiny_checkpoint, synthetic_build, *overrides):
    return small_eval_config(
        tmp_path,
        f"model.name_or_path={tiny_checkpoint}",
        f"eval.settings.ovi.root={synthetic_build.ovibench}",
        "eval.benchmarks=[ovi]",
        "eval.settings.ovi.max_new_tokens_open=8",
        "eval.bootstrap_resamples=200",
        *overrides,
    )


def _open_types(synthetic_build) -> Counter:
    return Counter(
        s.meta["interruption_type"]
        for s in load_ovibench(synthetic_build.ovibench)
        if s.meta["format"] == "open"
    )


@pytest.mark.slow
def test_evaluation_with_a_scripted_judge(
    judge_server, small_eval_config, tiny_checkpoint, synthetic_build, tmp_path
):
    from eval.run import run

    pytest.importorskip("matplotlib")
    cfg = _eval_cfg(
        small_eval_config,
        tmp_path,
        tiny_checkpoint,
        synthetic_build,
        "judge=endpoint",
        "judge.model=judge-model",
        *endpoint_overrides("judge", judge_server.url),
    )
    summary = run(cfg)
    types = _open_types(synthetic_build)
    n_open = sum(types.values())
    # VES 500s on every item: no reply, left out. CCS junk (no score) on Cancellations: 0, as the paper
    # counts it.
    ovi = summary["benchmarks"]["ovi"]
    assert ovi["n_unjudged"] == n_open and ovi["n_unjudged_items"] == n_open
    assert ovi["n_zero"] == types["Cancellation"]
    metrics = ovi["metrics"]
    assert metrics["iac"]["baseline"] == 1.0 and metrics["iac"]["n"] == n_open
    assert metrics["tfs"]["baseline"] == 8.0 and metrics["tfs"]["n"] == n_open
    assert metrics["cfs"]["baseline"] == 6.0 and metrics["cfs"]["n"] == n_open  # every type, as the paper
    # The judge names every reaction a Correction: open-ended CA is right on Correction items only, and the
    # overall value is the item-level mean over the open items (the paper's Table 2 aggregation).
    assert metrics["ca_open"]["baseline"] == pytest.approx(types["Correction"] / n_open)
    # Nothing without a reply is averaged (no VES at all); a reply without a score is a 0 (CCS there).
    assert "ves" not in metrics and metrics["ccs"]["n"] == n_open
    assert metrics["ccs"]["baseline"] == pytest.approx(7.0 * (n_open - types["Cancellation"]) / n_open)
    assert metrics["ccs/type/Cancellation"]["baseline"] == 0.0 and "ma" in metrics and "ca" in metrics
    judge = summary["judge"]
    assert judge["identity"].startswith("endpoint:judge-model") and judge["rubric_version"]
    assert judge["applies_to"]["cfs"] == ["Cancellation", "False Trigger", "Correction"]
    assert set(judge["reconstructed"]) == {"iac", "ifa", "ca_open"}
    assert judge["evidence"].startswith("text only, no frames: each item's visual_evidence")
    assert summary["generation"]["max_new_tokens_open"] == 8

    run_dir = Path(cfg.run_dir)
    report = (run_dir / "report.md").read_text()
    assert f"| tfs (1–10) | {n_open} | 8.00 |" in report and "| tfs | " not in report
    zeros = f"judged metrics scored 0 for an N/A, sub-1 or scoreless reply: model {types['Cancellation']}"
    assert zeros in report and f"judged metrics with no reply from the judge: model {n_open}" in report
    assert f"]({RADAR_FILE})" in report and (run_dir / RADAR_FILE).read_bytes()[:4] == b"\x89PNG"
    records = {}
    for line in (run_dir / "eval" / "model" / "ovi.jsonl").read_text().splitlines():
        record = json.loads(line)
        records[record["id"]] = record  # the last line per id wins
    judged = [r for r in records.values() if r["meta"]["format"] == "open"]
    assert all(r["judgements"]["iac"]["raw"] for r in judged)
    assert all(r["judgements"]["ves"]["status"] == "unjudged" for r in judged if "ves" in r["judgements"])
    assert all(set(r["judgements"]) == set(metrics_for(r["meta"]["interruption_type"])) for r in judged)
    assert {r["auth"] for r in judge_server.requests} == {f"Bearer {KEY}"}
    assert not any(KEY in p.read_text(errors="ignore") for p in run_dir.rglob("*") if p.is_file())

    # Resumed with the server healthy: only the metrics that got no reply are asked again. The cache
    # serves the rest, the malformed CCS replies too (a temperature-0 judge would repeat them).
    judge_server.requests.clear()
    judge_server.healthy = True
    summary = run(cfg)
    asked = Counter(r["metric"] for r in judge_server.requests)
    assert asked == {"ves": n_open}
    ovi = summary["benchmarks"]["ovi"]
    assert ovi["n_unjudged"] == 0 and ovi["metrics"]["ves"]["baseline"] == 5.0
    assert ovi["n_zero"] == types["Cancellation"]


@pytest.mark.slow
def test_evaluation_without_a_judge_says_so(small_eval_config, tiny_checkpoint, synthetic_build, tmp_path):
    from eval.run import run

    summary = run(_eval_cfg(small_eval_config, tmp_path, tiny_checkpoint, synthetic_build, "judge=none"))
    assert summary["judge"] == NO_JUDGE and summary["judge"].startswith("not configured")
    types = _open_types(synthetic_build)
    ovi = summary["benchmarks"]["ovi"]
    assert ovi["n_unjudged"] == sum(len(metrics_for(kind)) * n for kind, n in types.items())
    assert not {"iac", "tfs", "ves", "ifa", "cfs", "ccs"} & ovi["metrics"].keys()


@pytest.mark.slow
def test_training_with_a_judge_ends_with_judged_ovi_metrics(
    served_json_model, small_train_config, tiny_checkpoint, synthetic_build, tmp_path
):
    """Inline evaluation gets the run's judge like the watcher and ``python -m eval`` do: the whole config.
    The judge is a real server (tests/real_server.py) of a model tuned to reply a score of 1."""
    from train.recipe import train

    served = served_json_model
    cfg = small_train_config(
        tmp_path,
        f"model.name_or_path={tiny_checkpoint}",
        "data.build_synthetic=false",
        f"data.train=[{synthetic_build.ovi_train}]",
        f"eval.settings.ovi.root={synthetic_build.ovibench}",
        "eval.benchmarks=[ovi]",
        "eval.limit=8",
        "eval.settings.ovi.max_new_tokens_open=8",
        "trainer.max_steps=3",
        "logger.wandb=false",
        "judge=endpoint",
        f"judge.model={served.model}",
        "judge.max_tokens=32",
        f"judge.endpoint.base_url={served.base_url}",
        "judge.endpoint.timeout_s=60",
        "judge.endpoint.max_retries=0",
    )
    summary = train(cfg).summary
    assert summary["judge"]["identity"].startswith(f"endpoint:{served.model}|")
    ovi = summary["benchmarks"]["ovi"]
    assert ovi["n_unjudged"] == 0
    tfs = ovi["metrics"]["tfs"]
    assert tfs["n"] > 0 and tfs["baseline"] == 1.0 and tfs["checkpoints"]["checkpoint-3"]["value"] == 1.0
    written = json.loads((Path(cfg.run_dir) / "summary.json").read_text())
    assert written["benchmarks"]["ovi"]["metrics"]["iac"]["baseline"] == 1.0


def test_summary_report_and_plot_are_readable_by_group_and_others(judged_summary, tmp_path):
    """Written whole (a temporary file renamed into place) but with the usual permissions: a team's
    dashboards and a watcher running as another user read them."""
    import os
    import stat

    from core.rundir import RunDir
    from eval.report import write_report

    pytest.importorskip("matplotlib")
    previous = os.umask(0o022)
    try:
        write_report(judged_summary, RunDir(tmp_path))
    finally:
        os.umask(previous)
    for name in ("summary.json", "report.md", RADAR_FILE):
        mode = stat.S_IMODE((tmp_path / name).stat().st_mode)
        assert mode & 0o044 == 0o044, f"{name} is {oct(mode)}"
