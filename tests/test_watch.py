"""``python -m eval.watch``: a separate process evaluates a running training's checkpoints as they land,
writes the run's summary as inline evaluation would, and logs to the training's W&B run by training step."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from paths import REPO
from processes import stop_outside_locks
from wandb_records import history

from core.rundir import RunDir

WAIT_S = 240  # bound on every wait for a child process
STEPS, SAVE_EVERY = 6, 2


def _train_command(tmp_path: Path, synthetic_build, tiny_checkpoint) -> list[str]:
    """A reduced quickstart on the session's synthetic build and tiny model, evaluated asynchronously."""
    return [
        sys.executable,
        "-m",
        "train",
        "+exp=quickstart",
        f"output_root={tmp_path}",
        "run_name=async",
        f"trainer.max_steps={STEPS}",
        f"trainer.save_steps={SAVE_EVERY}",
        "trainer.logging_steps=1",
        "trainer.batch_size=2",
        f"model.name_or_path={tiny_checkpoint}",
        "data.build_synthetic=false",
        f"data.train=[{synthetic_build.v2p_sft},{synthetic_build.ovi_train}]",
        f"eval.settings.v2p.root={synthetic_build.v2p_bench}",
        f"eval.settings.ovi.root={synthetic_build.ovibench}",
        "eval.mode=async",
        "eval.limit=3",
        "eval.batch_size=6",
        "eval.settings.v2p.max_new_tokens=3",
        "eval.settings.ovi.max_new_tokens=3",
        "eval.settings.ovi.max_new_tokens_open=6",
        "eval.bootstrap_resamples=50",
        "logger.mode=offline",
    ]


def _env() -> dict[str, str]:
    # One thread each: the training and the watcher share the CI machine's two cores.
    return {**os.environ, "WANDB_MODE": "offline", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}


def _wait(condition, what: str, logs: dict, *children: subprocess.Popen) -> None:
    """Wait for ``condition``; a child that ends first, or the bound passing, fails with both logs' tails."""
    deadline = time.monotonic() + WAIT_S
    while not condition():
        ended = [c for c in children if c.poll() is not None]
        failure = (
            f"{ended[0].args[2]} ended (rc {ended[0].returncode}) before {what}"
            if ended
            else f"no {what} after {WAIT_S} s"
            if time.monotonic() > deadline
            else None
        )
        if failure:
            pytest.fail("\n".join([failure, *(f"--- {n}.log:\n{_tail(log)}" for n, log in logs.items())]))
        time.sleep(0.1)


def _evaluated(run_dir: Path) -> list[str]:
    path = run_dir / "eval" / "models.json"
    return [name for name, _ in json.loads(path.read_text())] if path.exists() else []


@pytest.fixture(scope="module")
def async_run(synthetic_build, tiny_checkpoint, tmp_path_factory):
    """A training in eval.mode=async and the watcher started beside it, both run to the end.

    The training is held right after its first checkpoint until the watcher has evaluated it: the watcher
    then provably evaluates a checkpoint of a training that is still running.

    Returns:
        The run directory and the two processes' output.
    """
    tmp_path = tmp_path_factory.mktemp("watch")
    run_dir = tmp_path / "async"
    logs = {name: (tmp_path / f"{name}.log").open("w+") for name in ("train", "watch")}
    watch_command = [sys.executable, "-m", "eval.watch", str(run_dir), "--device", "cpu", "--poll", "0.2"]
    train = subprocess.Popen(
        _train_command(tmp_path, synthetic_build, tiny_checkpoint),
        cwd=REPO,
        env=_env(),
        stdout=logs["train"],
        stderr=subprocess.STDOUT,
    )
    watch = subprocess.Popen(
        [*watch_command, "--timeout", str(WAIT_S)],
        cwd=REPO,
        env=_env(),
        stdout=logs["watch"],
        stderr=subprocess.STDOUT,
    )
    try:
        first = run_dir / "checkpoints" / f"checkpoint-{SAVE_EVERY}"
        _wait(lambda: first in RunDir(run_dir).checkpoints(), "a first checkpoint", logs, train, watch)
        stop_outside_locks(train.pid)  # the watcher takes the metrics file's lock too
        try:
            _wait(lambda: first.name in _evaluated(run_dir), f"{first.name} evaluated", logs, watch)
            assert not RunDir(run_dir).is_done() and watch.poll() is None, "the watcher waits for more"
        finally:
            train.send_signal(signal.SIGCONT)
        assert train.wait(timeout=WAIT_S) == 0, _tail(logs["train"])
        assert watch.wait(timeout=WAIT_S) == 0, _tail(logs["watch"])
    finally:
        for child in (train, watch):
            if child.poll() is None:
                child.kill()
                child.wait()
    return run_dir, {name: _read(log) for name, log in logs.items()}


@pytest.mark.slow
def test_the_watcher_evaluates_every_checkpoint_of_a_running_training(async_run):
    run_dir, output = async_run
    assert "eval.mode=async: this training evaluates nothing" in output["train"]
    names = [f"checkpoint-{step}" for step in range(SAVE_EVERY, STEPS + 1, SAVE_EVERY)]
    assert _evaluated(run_dir) == ["baseline", *names]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [(c["name"], c["step"]) for c in summary["checkpoints"]] == [
        (n, int(n.split("-")[1])) for n in names
    ]
    for bench, metric in (("v2p", "accuracy"), ("ovi", "ca"), ("ovi", "ma")):
        entry = summary["benchmarks"][bench]["metrics"][metric]
        for name in names:
            point = entry["checkpoints"][name]
            assert point["delta"] == pytest.approx(point["value"] - entry["baseline"])
    assert all(name in (run_dir / "report.md").read_text() for name in names)


@pytest.mark.slow
def test_the_watcher_logs_into_the_training_wandb_run_at_each_checkpoint_step(async_run):
    run_dir, _ = async_run
    summary = json.loads((run_dir / "summary.json").read_text())
    expected = {0: {}}  # training step -> metric -> value, from the summary
    for bench, metric in (("v2p", "accuracy"), ("ovi", "ca")):
        entry = summary["benchmarks"][bench]["metrics"][metric]
        expected[0][f"{bench}/{metric}"] = entry["baseline"]
        for checkpoint in summary["checkpoints"]:
            point = entry["checkpoints"][checkpoint["name"]]
            row = expected.setdefault(checkpoint["step"], {})
            row[f"{bench}/{metric}"], row[f"{bench}/{metric}/delta"] = point["value"], point["delta"]

    run_id = (run_dir / "wandb" / "run_id").read_text().strip()
    (train_file,) = run_dir.glob(f"wandb/offline-run-*-{run_id}/run-{run_id}.wandb")
    (watch_file,) = run_dir.glob(f"wandb/offline-run-*-{run_id}-eval-watcher/run-{run_id}.wandb")
    assert any("train/loss" in row for row in history(train_file))
    logged = {row["train/global_step"]: row for row in history(watch_file) if "v2p/accuracy" in row}
    assert sorted(logged) == sorted(expected)
    for step, values in expected.items():
        for key, value in values.items():
            assert logged[step][key] == pytest.approx(value), (step, key)
    # And locally, whatever W&B does.
    kept = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert {row["train/global_step"] for row in kept if "v2p/accuracy" in row} == set(expected)


@pytest.mark.slow
def test_a_restarted_watcher_skips_what_is_done_even_in_a_moved_run_directory(
    async_run, tmp_path, monkeypatch
):
    from eval.watch import watch

    run_dir = Path(shutil.copytree(async_run[0], tmp_path / "moved"))
    before = json.loads((run_dir / "summary.json").read_text())
    # Killed while evaluating the last checkpoint: not yet in models.json, its results cut short.
    models = run_dir / "eval" / "models.json"
    models.write_text(json.dumps(json.loads(models.read_text())[:-1]))
    results = run_dir / "eval" / f"checkpoint-{STEPS}" / "v2p.jsonl"
    results.write_text(results.read_text().splitlines()[0] + "\n")
    generated = []

    def counting_generate(model, chat, samples, max_new_tokens):
        generated.extend(s.id for s in samples)
        return ["A"] * len(samples)

    monkeypatch.setattr("eval.predictor.generate", counting_generate)
    assert watch(run_dir, device="cpu", timeout_s=60, poll_s=0.2) == before
    assert generated == []  # the cut items come from the shared results cache, by the adapter's files
    ids = {json.loads(line)["id"] for line in results.read_text().splitlines()}
    assert len(ids) == before["benchmarks"]["v2p"]["n_items"]


def test_the_watcher_refuses_an_inline_training_that_is_still_running(tmp_path, capsys):
    from omegaconf import OmegaConf

    from core.config import ModelConfig, TrainConfig
    from eval.watch import main

    inline = TrainConfig(model=ModelConfig(name_or_path="some/model"))  # eval.mode: inline, the default
    (tmp_path / "resolved_config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.structured(inline)))
    with pytest.raises(SystemExit) as exit_:
        main([str(tmp_path), "--timeout", "5"])
    assert exit_.value.code == 2
    error = capsys.readouterr().err
    assert "resolved_config.yaml: eval.mode is inline" in error and "Traceback" not in error


def test_the_watcher_stops_after_its_timeout(tmp_path, capsys):
    from eval.watch import main

    with pytest.raises(SystemExit) as exit_:
        main([str(tmp_path / "not_started"), "--timeout", "0.3", "--poll", "0.1"])
    assert exit_.value.code == 1
    assert "--timeout 0.3 s passed while waiting for the training to start" in capsys.readouterr().err


def _read(log) -> str:
    log.flush()
    log.seek(0)
    return log.read()


def _tail(log) -> str:
    return _read(log)[-4000:]


def _logits(model, input_ids):
    import torch

    with torch.no_grad():
        return model(input_ids=input_ids).logits


@pytest.mark.slow
def test_swapping_lora_adapters_on_one_base_computes_what_each_adapter_loaded_fresh_does(
    tiny_checkpoint, tmp_path
):
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model

    from core.config import ModelConfig
    from models.loading import CheckpointModels, load_model

    model_cfg = ModelConfig(name_or_path=str(tiny_checkpoint))
    for step in (2, 4):
        torch.manual_seed(step)
        model, _ = load_model(model_cfg)
        lora = LoraConfig(
            r=4, target_modules=["q_proj", "v_proj"], modules_to_save=["lm_head"], init_lora_weights=False
        )
        tuned = get_peft_model(model, lora)
        with torch.no_grad():
            tuned.base_model.model.lm_head.modules_to_save["default"].weight.mul_(1 + step)
        tuned.save_pretrained(tmp_path / f"checkpoint-{step}")
    input_ids = torch.arange(1, 17).unsqueeze(0)
    base, _ = load_model(model_cfg)
    untuned = _logits(base, input_ids)
    models = CheckpointModels(base, model_cfg, "cpu")
    swapped = {
        step: _logits(models.load(tmp_path / f"checkpoint-{step}").eval(), input_ids) for step in (2, 4)
    }
    for step in (2, 4):
        fresh = PeftModel.from_pretrained(load_model(model_cfg)[0], tmp_path / f"checkpoint-{step}").eval()
        torch.testing.assert_close(swapped[step], _logits(fresh, input_ids), msg=f"checkpoint-{step}")
    assert not torch.allclose(swapped[2], untuned) and not torch.allclose(swapped[4], swapped[2])


@pytest.mark.slow
def test_a_full_fine_tuning_checkpoint_is_loaded_whole(tiny_checkpoint, tmp_path):
    import torch

    from core.config import ModelConfig
    from models.loading import CheckpointModels, load_model

    model_cfg = ModelConfig(name_or_path=str(tiny_checkpoint))
    tuned, processor = load_model(model_cfg)
    with torch.no_grad():
        tuned.lm_head.weight.mul_(2.0)
    tuned.save_pretrained(tmp_path / "checkpoint-2")
    processor.save_pretrained(tmp_path / "checkpoint-2")  # the training saves its processor with each
    input_ids = torch.arange(1, 17).unsqueeze(0)
    models = CheckpointModels(load_model(model_cfg)[0], model_cfg, "cpu")
    loaded = models.load(tmp_path / "checkpoint-2").eval()
    torch.testing.assert_close(_logits(loaded, input_ids), _logits(tuned.eval(), input_ids))


@pytest.mark.slow
def test_the_watcher_serves_each_checkpoint_through_a_model_server(async_run, tmp_path):
    """--serve: the baseline and every checkpoint evaluated through transformers serve, each LoRA checkpoint
    merged into the base for its server; the served results are their own setting, never mixed with the
    in-process ones."""
    pytest.importorskip("fastapi", reason="transformers[serving] (the dev extra) is not installed")
    try:
        from torchcodec.decoders import VideoDecoder  # noqa: F401
    except Exception as err:
        pytest.skip(f"transformers serve cannot read videos here (torchcodec with FFmpeg): {err}")
    from eval.watch import watch

    run_dir = Path(shutil.copytree(async_run[0], tmp_path / "served"))
    shutil.rmtree(run_dir / "eval")
    serve = f"{sys.executable} -m transformers.cli.transformers serve {{model}} --device cpu --port {{port}}"
    summary = watch(run_dir, timeout_s=WAIT_S, poll_s=0.2, serve=serve, video="path")

    names = [f"checkpoint-{step}" for step in range(SAVE_EVERY, STEPS + 1, SAVE_EVERY)]
    assert _evaluated(run_dir) == ["baseline", *names]
    assert sorted(p.name for p in (run_dir / "eval" / "served_weights").iterdir()) == sorted(names)
    assert set(summary["benchmarks"]["v2p"]["metrics"]["accuracy"]["checkpoints"]) == set(names)
    served = json.loads((run_dir / "eval" / "baseline" / "v2p.jsonl").read_text().splitlines()[0])
    in_process = json.loads((async_run[0] / "eval" / "baseline" / "v2p.jsonl").read_text().splitlines()[0])
    assert served["id"] == in_process["id"] and served["setting"] != in_process["setting"]
