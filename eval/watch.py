"""Evaluate a training's checkpoints as they land, in a process of its own (``eval.mode=async``).

    python -m eval.watch outputs/ovi_lora                        # a spare GPU, or the CPU without one
    python -m eval.watch outputs/ovi_lora --device cuda:7 --timeout 86400

The watcher reads the run's ``resolved_config.yaml`` (waiting for the training to start), loads the base
model once and evaluates the baseline (step 0), then every complete checkpoint under
``<run_dir>/checkpoints/`` in step order as it lands: a LoRA checkpoint's adapter is swapped onto the
base, a full fine-tuning checkpoint is loaded whole. Results go where inline evaluation puts them
(``eval/``, ``summary.json``, ``report.md``), metrics and deltas to ``metrics.jsonl`` and to the
training's W&B run at each checkpoint's training step. It stops once the training has written
``training_done`` and every checkpoint is evaluated; past ``--timeout`` seconds it gives up at its next
wait (exit status 1). Killed and started again, it skips what is done: whole models by
``eval/models.json``, items by the results files, and anything these weights answered elsewhere by the
shared results cache.
"""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from core.cli import run_cli
from core.config import EvalMode, PeftMethod, TrainConfig, VideoTransport
from core.errors import ConfigError
from core.media import FrameCache
from core.metric_logging import make_watcher_logger
from core.rundir import BASELINE, RunDir, checkpoint_step
from eval.evaluation import Evaluation
from eval.headline import headline
from eval.served import served_weights, serving
from models.chat import make_adapter
from models.loading import CheckpointModels, default_device, load_base, load_processor


class WatchTimeout(RuntimeError):
    """``--timeout`` passed before the training was done and every checkpoint evaluated."""


class Deadline:
    """The end of ``--timeout`` (None: wait as long as it takes)."""

    def __init__(self, timeout_s: float | None):
        self.end = None if timeout_s is None else time.monotonic() + timeout_s
        self.timeout_s = timeout_s

    def sleep(self, seconds: float, waiting_for: str) -> None:
        """Sleep ``seconds``, or raise ``WatchTimeout`` if the deadline comes first."""
        if self.end is not None and time.monotonic() + seconds > self.end:
            raise WatchTimeout(f"--timeout {self.timeout_s:g} s passed while waiting for {waiting_for}")
        time.sleep(seconds)


def read_run_config(run_dir: RunDir, deadline: Deadline, poll_s: float) -> TrainConfig:
    """The training's resolved config, once the training has written it (whole: it is written atomically).

    Raises:
        DataError: the file does not fit the training config schema.
    """
    while not run_dir.config_file.exists():
        deadline.sleep(poll_s, f"the training to start ({run_dir.config_file})")
    return run_dir.read_config()


def check_watchable(cfg: TrainConfig, run_dir: RunDir) -> None:
    """Refuse runs with nothing to evaluate, and inline runs still training (two writers of eval/)."""
    where = run_dir.config_file
    if not cfg.eval.benchmarks:
        raise ConfigError(f"{where}: eval.benchmarks is empty, there is nothing to evaluate")
    if cfg.eval.mode is EvalMode.inline and not run_dir.is_done():
        raise ConfigError(
            f"{where}: eval.mode is inline, so this training evaluates its own checkpoints; watch runs "
            "trained with eval.mode=async (or inline runs that are done)"
        )


def watch(
    run_dir: str | Path,
    *,
    device: str | None = None,
    timeout_s: float | None = None,
    poll_s: float = 10.0,
    serve: str | None = None,
    video: str | None = None,
) -> dict:
    """Evaluate the baseline and every checkpoint of a training run until it is done.

    Args:
        serve: evaluate through a model server started with this command for each model
            (``eval.server.command``; by default the training's own setting).
        video: how videos travel to it (``eval.server.video``: inline | path; by default the training's).

    Returns:
        The summary (baseline vs every checkpoint), as written to ``<run_dir>/summary.json``.

    Raises:
        WatchTimeout: ``timeout_s`` passed first.
    """
    run_dir = RunDir(run_dir)
    device = device or default_device()
    deadline = Deadline(timeout_s)
    cfg = read_run_config(run_dir, deadline, poll_s)
    if serve:
        cfg.eval.server.command = serve
    if video:
        cfg.eval.server.video = VideoTransport(video)
    check_watchable(cfg, run_dir)
    log = cfg.logger
    logger = make_watcher_logger(log.wandb, log.mode, log.project, log.entity, run_dir.path, cfg.run_name)
    try:
        cache = FrameCache(cfg.data.frame_cache)
        evaluation = Evaluation(cfg, run_dir, logger, cache)
        chat, model_of = _models(cfg, run_dir, device, cache)
        evaluated = {name for name, _ in run_dir.models()}

        def evaluate(name: str, step: int, checkpoint: Path | None = None) -> None:
            print(f"evaluating {name} (step {step})", flush=True)
            with model_of(checkpoint) as model:
                evaluation.evaluate(model, chat, name, step, checkpoint)
            evaluated.add(name)

        if BASELINE not in evaluated:
            evaluate(BASELINE, 0)
        while True:
            done = run_dir.is_done()  # first: every checkpoint saved before it is listed below
            pending = [c for c in run_dir.checkpoints() if c.name not in evaluated]
            for checkpoint in pending:
                evaluate(checkpoint.name, checkpoint_step(checkpoint), checkpoint)
            if done and not pending:
                break
            if not pending:
                deadline.sleep(poll_s, "the training to save another checkpoint or finish")
        return evaluation.write_summary()
    finally:
        logger.finish()


def _models(cfg: TrainConfig, run_dir: RunDir, device: str, cache: FrameCache):
    """The chat adapter, and a context manager giving the model of a checkpoint (None: the base): a model in
    this process (one base; each LoRA adapter swapped onto it), or one served for the block
    (``eval.server``: a LoRA checkpoint merged first)."""
    server = cfg.eval.server
    if server.enabled:
        if not server.command:
            raise ConfigError(
                "the watcher serves each checkpoint in turn: give eval.server.command (or --serve), not a "
                "running server's base_url"
            )
        processor = load_processor(cfg.model)
        chat = make_adapter(cfg.model.family, processor, cfg.media, cache, cfg.model.chat_format)
        merged = run_dir.path / "eval" / "served_weights"

        @contextmanager
        def served(checkpoint: Path | None):
            with serving(
                cfg, served_weights(cfg.model, checkpoint, processor, merged), chat, run_dir
            ) as model:
                yield model

        return chat, served
    base, processor = load_base(cfg.model, quantized=cfg.peft.method is PeftMethod.qlora, device=device)
    chat = make_adapter(cfg.model.family, processor, cfg.media, cache, cfg.model.chat_format)
    checkpoints = CheckpointModels(base, cfg.model, device)

    @contextmanager
    def in_process(checkpoint: Path | None):
        yield base if checkpoint is None else checkpoints.load(checkpoint)

    return chat, in_process


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("run_dir", help="the training's run directory (outputs/<run_name>)")
    parser.add_argument("--device", help="where the model runs (default: cuda if available, else cpu)")
    parser.add_argument("--timeout", type=float, help="give up after this many seconds (default: never)")
    parser.add_argument("--poll", type=float, default=10.0, help="seconds between looks for checkpoints")
    parser.add_argument(
        "--serve",
        metavar="COMMAND",
        help="evaluate through a model server started with COMMAND for each model ({model}, {port} filled "
        "in), e.g. 'vllm serve {model} --port {port}'",
    )
    parser.add_argument(
        "--video",
        choices=[v.value for v in VideoTransport],
        help="how videos travel to the server: inline (data: URIs; vLLM, SGLang) or path (a file the server "
        "reads on this machine; transformers serve)",
    )
    args = parser.parse_args(argv)

    def work() -> None:
        try:
            summary = watch(
                args.run_dir,
                device=args.device,
                timeout_s=args.timeout,
                poll_s=args.poll,
                serve=args.serve,
                video=args.video,
            )
        except WatchTimeout as err:
            print(f"stopped: {err}; run it again to continue", file=sys.stderr)
            sys.exit(1)
        print(headline(summary), f"\nreport: {RunDir(args.run_dir).report_file}", sep="")

    run_cli(work)


if __name__ == "__main__":
    main(sys.argv[1:])
