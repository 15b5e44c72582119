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
from dataclasses import replace
from pathlib import Path

from core.cli import run_cli
from core.config import EvalMode, PeftMethod, TrainConfig, VideoTransport
from core.errors import ConfigError
from core.media import FrameCache
from core.metric_logging import make_watcher_logger
from core.run import Run
from core.rundir import BASELINE, RunDir, checkpoint_step
from eval.benchmarks import resolve_settings
from eval.evaluation import Evaluation
from eval.headline import headline
from eval.run_models import open_models
from models.loading import default_device


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


def resolve(run_dir: RunDir, cfg: TrainConfig, serve: str | None, video: str | None) -> Run:
    """The training run as the watcher evaluates it: its resolved config, served through ``serve`` (a
    server command) and ``video`` (how videos travel) when given instead of the training's own setting."""
    server = cfg.eval.server
    if serve:
        server = replace(server, command=serve)
    if video:
        server = replace(server, video=VideoTransport(video))
    evaluation = resolve_settings(replace(cfg.eval, server=server))
    return Run(replace(cfg, eval=evaluation), run_dir, quantized=cfg.peft.method is PeftMethod.qlora)


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
        ConfigError: the run serves its models through a running server's ``base_url`` (the watcher
            serves each checkpoint in turn).
    """
    run_dir = RunDir(run_dir)
    deadline = Deadline(timeout_s)
    run = resolve(run_dir, read_run_config(run_dir, deadline, poll_s), serve, video)
    check_watchable(run.cfg, run_dir)
    if run.cfg.eval.server.enabled and not run.cfg.eval.server.command:
        raise ConfigError(
            "the watcher serves each checkpoint in turn: give eval.server.command (or --serve), not a "
            "running server's base_url"
        )
    log = run.cfg.logger
    logger = make_watcher_logger(log.wandb, log.mode, log.project, log.entity, run_dir.path, run.cfg.run_name)
    try:
        cache = FrameCache(run.cfg.data.frame_cache)
        evaluation = Evaluation(run, logger, cache)
        models = open_models(run, cache, device=device or default_device())
        evaluated = {name for name, _ in run_dir.models()}

        def evaluate(name: str, step: int, checkpoint: Path | None = None) -> None:
            print(f"evaluating {name} (step {step})", flush=True)
            with models.predictor(checkpoint) as predictor:
                evaluation.evaluate(predictor, name, step, checkpoint)
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
