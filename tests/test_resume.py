"""A killed run resumes where it stopped: training from its newest complete checkpoint, evaluation from
the per-sample results already on disk. The result equals that of a run that was never killed.

Training is killed with SIGKILL right after a checkpoint lands, at a step drawn at random for each test
run (printed with its seed; ``KILL_SEED=<seed>`` replays it): in one process, in one process with two
dataloader workers (which must leave no process and no shared memory behind), and under DeepSpeed ZeRO-2
on two processes.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from core.rundir import RunDir, checkpoint_is_complete

REPO = Path(__file__).resolve().parents[1]

MAX_STEPS = 8
SAVE_STEPS = 2
# A reduced quickstart: 8 steps, a checkpoint every 2, the loss of every single step in the log.
TRAIN_OVERRIDES = [
    "+exp=quickstart",
    f"trainer.max_steps={MAX_STEPS}",
    f"trainer.save_steps={SAVE_STEPS}",
    "trainer.logging_steps=1",
    "trainer.batch_size=2",
    "data.synthetic.train_videos=4",
    "data.synthetic.eval_videos=2",
    "data.synthetic.vp_questions_per_video=2",
    "eval=none",
    "logger=none",
]
# ZeRO-2 on two CPU processes over gloo, launched as tests/test_deepspeed.py launches it.
DEEPSPEED_LAUNCH = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
DEEPSPEED_OVERRIDES = [
    "trainer=zero2",
    "trainer.grad_accum=1",
    "trainer.num_workers=0",
    "trainer.gradient_checkpointing=false",
]
DEEPSPEED_ENV = {
    "DS_ACCELERATOR": "cpu",  # DeepSpeed's CPU accelerator (gloo), even where a GPU is visible
    "CUDA_VISIBLE_DEVICES": "",
    "TORCH_EXTENSIONS_DIR": str(REPO / "outputs" / "torch_extensions"),  # the comm op compiles once
    "OMP_NUM_THREADS": "1",  # two ranks on two cores
}
# Same machine, same kernels, same thread count: the runs are in practice bit-identical. 1e-5 leaves room
# for a reordered float32 reduction (losses near 6 hold ~7 significant digits), yet catches the smallest
# real slip seen so far: LoRA A matrices drawn from another RNG state moved the step-2 loss by 7.5e-4
# (relative). A batch taken out of order moves a step's loss by about a percent or more (consecutive
# steps here differ by that much). Under ZeRO-2 the same holds: the two ranks' gradients are all-reduced
# over gloo in a fixed order, so a resumed run repeats the same float operations (bit-identical losses
# in every run so far).
LOSS_RTOL = 1e-5
WAIT_S = 240  # bound on every wait for the child process


@dataclass
class Launch:
    """How a training is started: one process, or two under torchrun with DeepSpeed."""

    prefix: list[str]
    overrides: list[str]
    env: dict[str, str]


SINGLE = Launch([sys.executable], [], {})
WITH_WORKERS = Launch([sys.executable], ["trainer.num_workers=2"], {})
DEEPSPEED = Launch(DEEPSPEED_LAUNCH, DEEPSPEED_OVERRIDES, DEEPSPEED_ENV)


def _kill_step() -> int:
    """The step whose checkpoint the kill follows: random per test run, printed with its seed."""
    seed = int(os.environ.get("KILL_SEED", random.SystemRandom().randrange(2**32)))
    step = random.Random(seed).choice(range(SAVE_STEPS, MAX_STEPS, SAVE_STEPS))
    print(f"KILL_SEED={seed}: SIGKILL once checkpoint-{step} is complete")
    return step


def _train_command(output_root: Path, run_name: str, launch: Launch) -> list[str]:
    return [
        *launch.prefix,
        "-m",
        "train",
        *TRAIN_OVERRIDES,
        *launch.overrides,
        f"output_root={output_root}",
        f"run_name={run_name}",
    ]


def _env(launch: Launch) -> dict[str, str]:
    return {**os.environ, "WANDB_MODE": "disabled", "TOKENIZERS_PARALLELISM": "false", **launch.env}


def _train(output_root: Path, run_name: str, launch: Launch = SINGLE) -> str:
    """Run the training to the end; its stdout and stderr together."""
    done = subprocess.run(
        _train_command(output_root, run_name, launch),
        cwd=REPO,
        env=_env(launch),
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout + done.stderr


def _train_until_killed(
    output_root: Path, run_name: str, checkpoint: str, launch: Launch = SINGLE
) -> list[int]:
    """Start the training and SIGKILL every process of it as soon as ``checkpoint`` is complete; the ids
    of the processes killed."""
    target = output_root / run_name / "checkpoints" / checkpoint
    child = subprocess.Popen(
        _train_command(output_root, run_name, launch),
        cwd=REPO,
        env=_env(launch),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # a process group of its own, so the kill below spares pytest
    )
    try:
        deadline = time.monotonic() + WAIT_S
        while not checkpoint_is_complete(target):
            assert child.poll() is None, f"the run ended (rc {child.returncode}) before {checkpoint}"
            assert time.monotonic() < deadline, f"no {checkpoint} after {WAIT_S} s"
            time.sleep(0.05)
    finally:
        processes = _process_tree(child.pid)
        _kill_process_groups(processes)
        child.wait(timeout=30)
    for pid in processes:
        assert _wait_until_gone(pid), f"process {pid} of the killed run is still running"
    return processes


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


def _process_tree(pid: int) -> list[int]:
    """``pid`` and all its descendants (Linux), parents first."""
    children = []
    with contextlib.suppress(FileNotFoundError):  # a process that just exited
        for task in Path(f"/proc/{pid}/task").iterdir():
            children += [int(c) for c in (task / "children").read_text().split()]
    return [pid, *(p for c in children for p in _process_tree(c))]


def _kill_process_groups(pids: list[int]) -> None:
    """SIGKILL the process group of each process. torchrun starts each rank in a session of its own, so
    killing the launcher's group alone would leave the ranks training on (as orphans)."""
    groups = set()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            groups.add(os.getpgid(pid))
    assert os.getpgrp() not in groups
    for group in groups:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)


def _wait_until_gone(pid: int) -> bool:
    """Whether the process exits within a few seconds (a zombie has: it holds nothing and runs nothing)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except FileNotFoundError:
            return True
        if stat.rsplit(")", 1)[1].split()[0] in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def _check_resume_after_kill(output_root: Path, launch: Launch) -> None:
    """A run killed right after a checkpoint (drawn at random) and resumed ends as a run never killed."""
    step = _kill_step()
    _train(output_root, "straight", launch)
    _train_until_killed(output_root, "killed", f"checkpoint-{step}", launch)
    assert "resuming from" in _train(output_root, "killed", launch)
    _check_equal_runs(output_root / "straight", output_root / "killed")


def _losses(run_dir: Path) -> dict[int, float]:
    """Step -> training loss, from the final checkpoint's log history (logged every step)."""
    final = run_dir / "checkpoints" / f"checkpoint-{MAX_STEPS}" / "trainer_state.json"
    state = json.loads(final.read_text())
    return {entry["step"]: entry["loss"] for entry in state["log_history"] if "loss" in entry}


def _check_equal_runs(straight: Path, resumed: Path) -> None:
    """Equal per-step losses mean the resumed run drew the same batches in the same order (the dataloader
    skipped exactly the batches already trained on) with the same dropout masks; then equal weights."""
    straight_losses, resumed_losses = _losses(straight), _losses(resumed)
    assert sorted(straight_losses) == list(range(1, MAX_STEPS + 1))
    assert sorted(resumed_losses) == sorted(straight_losses)
    for step, loss in straight_losses.items():
        assert resumed_losses[step] == pytest.approx(loss, rel=LOSS_RTOL), f"step {step}"
    worst = max(abs(resumed_losses[s] - loss) / abs(loss) for s, loss in straight_losses.items())
    print(f"largest relative loss difference: {worst:.1e} (tolerance {LOSS_RTOL:.0e})")
    final_a = load_file(straight / "final" / "adapter_model.safetensors")
    final_b = load_file(resumed / "final" / "adapter_model.safetensors")
    assert final_a.keys() == final_b.keys()
    for name, tensor in final_a.items():
        torch.testing.assert_close(final_b[name], tensor, rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.slow
@pytest.mark.parametrize("launch", [SINGLE, WITH_WORKERS], ids=["no_workers", "2_workers"])
def test_killed_training_resumes_from_the_newest_complete_checkpoint_with_equal_losses(tmp_path, launch):
    step = _kill_step()
    # First the run that is never killed; it also builds the data, the tiny model and the frame cache
    # the other run reuses (building the model draws from the global RNG: see train/recipe.py).
    _train(tmp_path, "straight", launch)
    killed = _train_until_killed(tmp_path, "killed", f"checkpoint-{step}", launch)
    assert _shared_memory_left(killed) == []

    checkpoints = tmp_path / "killed" / "checkpoints"
    for later in range(step + SAVE_STEPS, MAX_STEPS + 1, SAVE_STEPS):  # saves that got through the kill
        shutil.rmtree(checkpoints / f"checkpoint-{later}", ignore_errors=True)
    # A save killed halfway: weights cut short, no trainer_state.json (the Trainer writes it last).
    half = checkpoints / f"checkpoint-{step + SAVE_STEPS}"
    half.mkdir()
    weights = (checkpoints / f"checkpoint-{step}" / "adapter_model.safetensors").read_bytes()
    (half / "adapter_model.safetensors").write_bytes(weights[: len(weights) // 2])

    output = _train(tmp_path, "killed", launch)
    assert f"resuming from {checkpoints / f'checkpoint-{step}'}" in output
    _check_equal_runs(tmp_path / "straight", tmp_path / "killed")


@pytest.mark.slow
def test_killed_deepspeed_training_on_two_processes_resumes_with_equal_losses(tmp_path):
    step = _kill_step()
    _train(tmp_path, "straight", DEEPSPEED)
    _train_until_killed(tmp_path, "killed", f"checkpoint-{step}", DEEPSPEED)

    # The newest complete checkpoint: the one the kill followed, or a later one that got through.
    last = RunDir(tmp_path / "killed").latest_checkpoint()
    assert last is not None and step <= int(last.name.rsplit("-", 1)[1]) < MAX_STEPS
    output = _train(tmp_path, "killed", DEEPSPEED)
    assert f"resuming from {last}" in output
    _check_equal_runs(tmp_path / "straight", tmp_path / "killed")


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
        def evaluate(self, model, chat, model_name, step, checkpoint=None):
            calls.append((model_name, step, checkpoint))

    callback = CheckpointEval(Recorder(), chat=None, run_dir=RunDir("run"))
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
    from models.loading import load_model

    model, processor = load_model(ModelConfig(name_or_path=str(tiny_checkpoint)))
    cfg = EvalConfig(
        benchmarks=["v2p", "ovi"],
        v2p_root=str(synthetic_build.v2p_bench),
        ovi_root=str(synthetic_build.ovibench),
        limit=6,
        batch_size=2,
        max_new_tokens=4,
        max_new_tokens_open=8,
        bootstrap_resamples=200,
    )
    return model, processor, cfg, MediaSpec()


def _evaluate(eval_setup, run_dir: Path, *, kill_after: int | None = None) -> tuple[dict, list]:
    """Evaluate a baseline and one checkpoint (the same weights) into ``run_dir``.

    Returns:
        The summary, and the ids of the items generated in this call (one list per generate call).
    """
    import eval.generation
    from core.config import EvalRunConfig, ModelConfig
    from core.media import FrameCache
    from core.metric_logging import NullLogger
    from eval.evaluation import Evaluation
    from models.chat import make_adapter

    model, processor, cfg, media = eval_setup
    cache = FrameCache(None)
    run_cfg = EvalRunConfig(model=ModelConfig(name_or_path="tiny"), media=media, eval=cfg)
    evaluation = Evaluation(run_cfg, RunDir(run_dir), NullLogger(), cache)
    generated: list[list[str]] = []
    real_generate, real_simulate = eval.generation.generate, eval.generation.simulate_interruption

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

    eval.generation.generate = counting_generate
    eval.generation.simulate_interruption = counting_simulate
    try:
        chat = make_adapter(ModelConfig().family, processor, media, cache)
        evaluation.evaluate(model, chat, "baseline", step=0)
        summary = evaluation.evaluate(model, chat, "checkpoint-2", step=2)
    finally:
        eval.generation.generate, eval.generation.simulate_interruption = real_generate, real_simulate
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
