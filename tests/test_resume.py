"""A killed run resumes where it stopped: training from its newest complete checkpoint, evaluation from
the per-sample results already on disk. The result equals that of a run that was never killed.

Training is killed with SIGKILL right after a checkpoint lands, at a step drawn at random for each test
run (printed with its seed; ``KILL_SEED=<seed>`` replays it): in one process, in one process with two
dataloader workers (which must leave no process and no shared memory behind), and under DeepSpeed ZeRO-2
on two processes.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
import torch
from runs import (
    DEEPSPEED,
    MAX_STEPS,
    SAVE_STEPS,
    SINGLE,
    WITH_WORKERS,
    check_equal_runs,
    kill_step,
    train,
    train_until_killed,
)

from core.rundir import RunDir, checkpoint_is_complete


def _shared_memory_left(pids: list[int]) -> list[str]:
    """Shared-memory segments that processes ``pids`` made (torch names them ``torch_<pid>_…``) and that
    are still there a few seconds after the processes died."""
    prefixes = tuple(f"torch_{pid}_" for pid in pids)
    deadline = time.monotonic() + 20  # torch_shm_manager notices a dead client and unlinks its segments
    while True:
        left = [p.name for p in Path("/dev/shm").glob("torch_*") if p.name.startswith(prefixes)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.parametrize("launch", [SINGLE, WITH_WORKERS], ids=["no_workers", "2_workers"])
def test_killed_training_resumes_from_the_newest_complete_checkpoint_with_equal_losses(tmp_path, launch):
    step = kill_step()
    # First the run that is never killed; it also builds the data, the tiny model and the frame cache
    # the other run reuses (building the model draws from the global RNG: see train/recipe.py).
    train(tmp_path, "straight", launch)
    killed = train_until_killed(tmp_path, "killed", f"checkpoint-{step}", launch)
    assert _shared_memory_left(killed) == []

    checkpoints = tmp_path / "killed" / "checkpoints"
    for later in range(step + SAVE_STEPS, MAX_STEPS + 1, SAVE_STEPS):  # saves that got through the kill
        shutil.rmtree(checkpoints / f"checkpoint-{later}", ignore_errors=True)
    # A save killed halfway: weights cut short, no trainer_state.json (the Trainer writes it last).
    half = checkpoints / f"checkpoint-{step + SAVE_STEPS}"
    half.mkdir()
    weights = (checkpoints / f"checkpoint-{step}" / "adapter_model.safetensors").read_bytes()
    (half / "adapter_model.safetensors").write_bytes(weights[: len(weights) // 2])

    output = train(tmp_path, "killed", launch)
    assert f"resuming from {checkpoints / f'checkpoint-{step}'}" in output
    check_equal_runs(tmp_path / "straight", tmp_path / "killed")


@pytest.mark.slow
def test_killed_deepspeed_training_on_two_processes_resumes_with_equal_losses(tmp_path):
    step = kill_step()
    train(tmp_path, "straight", DEEPSPEED)
    train_until_killed(tmp_path, "killed", f"checkpoint-{step}", DEEPSPEED)

    # The newest complete checkpoint: the one the kill followed, or a later one that got through.
    last = RunDir(tmp_path / "killed").latest_checkpoint()
    assert last is not None and step <= int(last.name.rsplit("-", 1)[1]) < MAX_STEPS
    output = train(tmp_path, "killed", DEEPSPEED)
    assert f"resuming from {last}" in output
    check_equal_runs(tmp_path / "straight", tmp_path / "killed")


def test_a_checkpoint_is_complete_once_every_file_of_every_rank_is_whole(tmp_path):
    checkpoint = tmp_path / "checkpoint-2"
    (checkpoint / "global_step2").mkdir(parents=True)
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 2}))
    for rank in (0, 1):  # ZeRO's optimizer shards: two ranks saved (before a barrier, so whole)
        (checkpoint / "global_step2" / f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt").touch()
    torch.save({"lr": 1.0}, checkpoint / "scheduler.pt")
    torch.save({"cpu": torch.random.get_rng_state()}, checkpoint / "rng_state_0.pth")
    assert not checkpoint_is_complete(checkpoint), "rank 1 has not written its RNG state yet"

    torch.save({"cpu": torch.random.get_rng_state()}, checkpoint / "rng_state_1.pth")
    assert checkpoint_is_complete(checkpoint)

    for name in ("rng_state_1.pth", "scheduler.pt"):  # killed while a rank was writing it
        whole = (checkpoint / name).read_bytes()
        (checkpoint / name).write_bytes(whole[: len(whole) - 100])
        assert not checkpoint_is_complete(checkpoint), name
        (checkpoint / name).write_bytes(whole)
    assert checkpoint_is_complete(checkpoint)


def test_last_checkpoint_skips_half_written_saves(tmp_path):
    run_dir = RunDir(tmp_path)
    assert run_dir.latest_checkpoint() is None and run_dir.checkpoints() == []
    saves = run_dir.checkpoints_dir
    for step in (2, 10):
        (saves / f"checkpoint-{step}").mkdir(parents=True)
        (saves / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    (saves / "checkpoint-12").mkdir()  # killed before its trainer state was written
    (saves / "checkpoint-14").mkdir()
    (saves / "checkpoint-14" / "trainer_state.json").write_text('{"global_st')  # killed mid-write
    (saves / "checkpoint-final").mkdir()  # not a step
    # checkpoint-10 beats checkpoint-2 by number, not by name (a string sort would pick checkpoint-2).
    assert run_dir.latest_checkpoint() == saves / "checkpoint-10"
    assert run_dir.checkpoints() == [saves / "checkpoint-2", saves / "checkpoint-10"]


def test_resumed_training_finishes_the_evaluation_of_the_checkpoint_it_resumes_from():
    """A kill during checkpoint-N's evaluation (on_save) leaves it partial; the resumed run finishes it."""
    from transformers import TrainerControl, TrainerState

    from train.callbacks import CheckpointEval

    calls = []

    class Recorder:
        def evaluate(self, predictor, model_name, step, checkpoint=None):
            calls.append((model_name, step, checkpoint))

    class Models:
        def of(self, model):
            return model

    callback = CheckpointEval(Recorder(), Models(), run_dir=RunDir("run"))
    callback.on_train_begin(None, TrainerState(global_step=0), TrainerControl(), model=None)
    assert calls == [("baseline", 0, None)]
    calls.clear()
    callback.on_train_begin(None, TrainerState(global_step=4), TrainerControl(), model=None)
    assert calls == [("baseline", 0, None), ("checkpoint-4", 4, Path("run/checkpoints/checkpoint-4"))]


# ---------------------------------------------------------------------------------------------------
# Evaluation


class Killed(RuntimeError):
    """Stands for a SIGKILL in the middle of an evaluation."""


@pytest.fixture(scope="module")
def eval_setup(synthetic_build, tiny_checkpoint):
    """The tiny model, its adapter, and the evaluation settings shared by the runs below."""
    from core.config import EvalConfig, ModelConfig
    from core.decoding import MediaSpec
    from eval.benchmarks.ovi import OviSettings
    from eval.benchmarks.v2p import V2PSettings
    from models.loading import load_model

    model, processor = load_model(ModelConfig(name_or_path=str(tiny_checkpoint)))
    settings = {
        "v2p": V2PSettings(root=str(synthetic_build.v2p_bench), max_new_tokens=4),
        "ovi": OviSettings(root=str(synthetic_build.ovibench), max_new_tokens=4, max_new_tokens_open=8),
    }
    cfg = EvalConfig(
        benchmarks=["v2p", "ovi"], settings=settings, limit=6, batch_size=2, bootstrap_resamples=200
    )
    return model, processor, cfg, MediaSpec()


def _evaluate(eval_setup, run_dir: Path, *, kill_after: int | None = None) -> tuple[dict, list]:
    """Evaluate a baseline and one checkpoint (the same weights) into ``run_dir``.

    Returns:
        The summary, and the ids of the items generated in this call (one list per generate call).
    """
    import eval.predictor
    from core.config import EvalRunConfig, ModelConfig
    from core.media import FrameCache
    from core.metric_logging import NullLogger
    from core.run import Run
    from eval.benchmarks import resolve_settings
    from eval.evaluation import Evaluation
    from eval.predictor import InProcess
    from models.chat import make_adapter

    model, processor, cfg, media = eval_setup
    cache = FrameCache(None)
    run_cfg = EvalRunConfig(model=ModelConfig(name_or_path="tiny"), media=media, eval=resolve_settings(cfg))
    evaluation = Evaluation(Run(run_cfg, RunDir(run_dir)), NullLogger(), cache)
    generated: list[list[str]] = []
    real_generate, real_simulate = eval.predictor.generate, eval.predictor.simulate_interruption

    def counted(ids: list[str]) -> None:
        if kill_after is not None and len(generated) == kill_after:
            raise Killed()
        generated.append(ids)

    def counting_generate(model, chat, samples, max_new_tokens):
        counted([s.id for s in samples])
        return real_generate(model, chat, samples, max_new_tokens)

    def counting_simulate(model, chat, sample, **kwargs):  # open OVI items: the paper's simulation
        counted([sample.id])
        return real_simulate(model, chat, sample, **kwargs)

    eval.predictor.generate = counting_generate
    eval.predictor.simulate_interruption = counting_simulate
    try:
        predictor = InProcess(model, make_adapter(ModelConfig().family, processor, media, cache))
        evaluation.evaluate(predictor, "baseline", step=0)
        summary = evaluation.evaluate(predictor, "checkpoint-2", step=2)
    finally:
        eval.predictor.generate, eval.predictor.simulate_interruption = real_generate, real_simulate
    return summary, generated


def _result_ids(run_dir: Path) -> dict[str, list[str]]:
    """Item ids per results file, in file order (JSON lines that parse)."""
    ids = {}
    for path in sorted((run_dir / "eval").glob("*/*.jsonl")):
        ids[str(path.relative_to(run_dir))] = [
            json.loads(line)["id"] for line in path.read_text().splitlines() if _parses(line)
        ]
    return ids


def _parses(line: str) -> bool:
    try:
        json.loads(line)
    except ValueError:
        return False
    return True


@pytest.mark.slow
def test_killed_evaluation_generates_only_the_missing_items_and_ends_equal(eval_setup, tmp_path):
    straight, all_calls = _evaluate(eval_setup, tmp_path / "straight")
    n_items = sum(len(ids) for ids in _result_ids(tmp_path / "straight").values())
    assert sum(len(ids) for ids in all_calls) == n_items > 6  # each item generated exactly once

    resumed_dir = tmp_path / "resumed"
    with pytest.raises(Killed):
        _evaluate(eval_setup, resumed_dir, kill_after=3)
    before = {item for ids in _result_ids(resumed_dir).values() for item in ids}
    assert len(before) == 6  # three batches of two made it to disk

    summary, calls = _evaluate(eval_setup, resumed_dir)
    assert sum(len(ids) for ids in calls) == n_items - 6, "only the missing items are generated again"
    assert summary == straight
    assert json.loads((resumed_dir / "summary.json").read_text()) == straight


@pytest.mark.slow
def test_a_results_line_cut_short_by_a_kill_is_generated_again(eval_setup, tmp_path):
    straight, _ = _evaluate(eval_setup, tmp_path / "straight")
    resumed_dir = tmp_path / "resumed"
    with pytest.raises(Killed):
        _evaluate(eval_setup, resumed_dir, kill_after=2)
    (results,) = (resumed_dir / "eval" / "baseline").glob("*.jsonl")
    text = results.read_text()
    results.write_text(text[: len(text) - 25])  # the last record cut short, no newline after it
    cut_id = json.loads(text.splitlines()[-1])["id"]

    summary, calls = _evaluate(eval_setup, resumed_dir)
    assert cut_id in calls[0], "the cut record is generated again, first"
    assert summary == straight
    for name, ids in _result_ids(resumed_dir).items():
        assert sorted(ids) == sorted(set(ids)) and ids, name  # one whole record per item
    assert _result_ids(resumed_dir).keys() == _result_ids(tmp_path / "straight").keys()
