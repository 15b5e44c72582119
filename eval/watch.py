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
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from core.config import EvalMode, ModelConfig, PeftMethod, TrainConfig
from core.metric_logging import make_watcher_logger
from data_builders.cli import run_cli
from data_builders.errors import ConfigError, DataError
from data_builders.media import FrameCache
from eval.evaluator import Evaluator
from eval.headline import headline
from eval.results_cache import run_weights
from train.callbacks import training_done
from train.data import quarantine_counts
from train.recipe import _is_complete

RESOLVED_CONFIG = "resolved_config.yaml"


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


def read_run_config(run_dir: Path, deadline: Deadline, poll_s: float) -> TrainConfig:
    """The training's resolved config, once the training has written it whole.

    Raises:
        DataError: the file does not fit the training config schema.
    """
    path = run_dir / RESOLVED_CONFIG
    text = None
    while True:
        # The training writes it in one go at start: equal on two reads apart means complete.
        previous, text = text, path.read_text() if path.exists() else None
        if text is not None and text == previous:
            break
        deadline.sleep(poll_s if text is None else min(poll_s, 0.5), f"the training to start ({path})")
    try:
        config = OmegaConf.merge(OmegaConf.structured(TrainConfig), OmegaConf.create(text))
        return OmegaConf.to_object(config)
    except OmegaConfBaseException as err:
        raise DataError(str(path), f"not a training config: {str(err).splitlines()[0]}") from None


def check_watchable(cfg: TrainConfig, run_dir: Path) -> None:
    """Refuse runs with nothing to evaluate, and inline runs still training (two writers of eval/)."""
    where = run_dir / RESOLVED_CONFIG
    if not cfg.eval.benchmarks:
        raise ConfigError(f"{where}: eval.benchmarks is empty, there is nothing to evaluate")
    if cfg.eval.mode is EvalMode.inline and not training_done(run_dir):
        raise ConfigError(
            f"{where}: eval.mode is inline, so this training evaluates its own checkpoints; watch runs "
            "trained with eval.mode=async (or inline runs that are done)"
        )


def complete_checkpoints(directory: Path) -> list[Path]:
    """The checkpoints whose save finished, in step order."""
    found = [p for p in directory.glob("checkpoint-*") if p.name.split("-")[-1].isdigit() and _is_complete(p)]
    return sorted(found, key=checkpoint_step)


def checkpoint_step(checkpoint: Path) -> int:
    return int(checkpoint.name.split("-")[-1])


class CheckpointModels:
    """The model of each checkpoint on one loaded base: a LoRA checkpoint's adapter replaces the previous
    one on the base; a full fine-tuning checkpoint is loaded whole, after the previous one is let go."""

    def __init__(self, base, model_cfg: ModelConfig, device: str):
        self.base, self.model_cfg, self.device = base, model_cfg, device
        self.with_adapter = None  # the base wrapped by PEFT, holding the current adapter
        self.adapter_name: str | None = None
        self.full = None

    def load(self, checkpoint: Path):
        if (checkpoint / "adapter_config.json").exists():
            return self._swap_adapter(checkpoint)
        from models.loading import load_model

        self.full = None  # free the previous checkpoint's weights before loading the next
        self.full, _ = load_model(replace(self.model_cfg, name_or_path=str(checkpoint), tiny=False))
        self.full.to(self.device)
        return self.full

    def _swap_adapter(self, checkpoint: Path):
        from peft import PeftModel

        name = checkpoint.name
        if self.with_adapter is None:
            self.with_adapter = PeftModel.from_pretrained(
                self.base, checkpoint, adapter_name=name, torch_device=self.device
            )
        elif name != self.adapter_name:
            self.with_adapter.load_adapter(checkpoint, adapter_name=name, torch_device=self.device)
            self.with_adapter.set_adapter(name)
            self.with_adapter.delete_adapter(self.adapter_name)
        self.adapter_name = name
        return self.with_adapter


def load_base(cfg: TrainConfig, device: str):
    """``(model, processor)`` of the base checkpoint, loaded as the training loaded it, on ``device``."""
    from models.loading import load_model

    if cfg.peft.method is not PeftMethod.qlora:
        model, processor = load_model(cfg.model)
        return model.to(device), processor
    import torch

    from models.qlora import quantization_config

    if not device.startswith("cuda"):
        raise ConfigError(f"--device {device}: a QLoRA run's 4-bit base needs a CUDA device")
    torch.cuda.set_device(torch.device(device))  # bitsandbytes quantizes on the current device
    return load_model(cfg.model, quantization_config(cfg.model.family))


def watch(
    run_dir: str | Path, *, device: str | None = None, timeout_s: float | None = None, poll_s: float = 10.0
) -> dict:
    """Evaluate the baseline and every checkpoint of a training run until it is done.

    Returns:
        The summary (baseline vs every checkpoint), as written to ``<run_dir>/summary.json``.

    Raises:
        WatchTimeout: ``timeout_s`` passed first.
    """
    from models.chat import make_adapter

    run_dir = Path(run_dir)
    device = device or _default_device()
    deadline = Deadline(timeout_s)
    cfg = read_run_config(run_dir, deadline, poll_s)
    check_watchable(cfg, run_dir)
    log = cfg.logger
    logger = make_watcher_logger(log.wandb, log.mode, log.project, log.entity, run_dir, cfg.run_name)
    try:
        cache = FrameCache(cfg.data.frame_cache)
        weights_of = run_weights(cfg.model.name_or_path, run_dir / "checkpoints")
        evaluator = Evaluator(cfg.eval, cfg.media, cache, run_dir, logger, cfg.judge, weights_of)
        base, processor = load_base(cfg, device)
        adapter = make_adapter(cfg.model.family, processor, cfg.media, cache)
        models = CheckpointModels(base, cfg.model, device)
        evaluated = {name for name, _ in evaluator.models}
        if "baseline" not in evaluated:
            _evaluate(evaluator, base, adapter, "baseline", 0, run_dir)
        while True:
            done = training_done(run_dir)  # first: every checkpoint saved before it is listed below
            pending = [c for c in complete_checkpoints(run_dir / "checkpoints") if c.name not in evaluated]
            for checkpoint in pending:
                model = models.load(checkpoint)
                _evaluate(evaluator, model, adapter, checkpoint.name, checkpoint_step(checkpoint), run_dir)
                evaluated.add(checkpoint.name)
            if done and not pending:
                break
            if not pending:
                deadline.sleep(poll_s, "the training to save another checkpoint or finish")
        return evaluator.write_summary()
    finally:
        logger.finish()


def _evaluate(evaluator: Evaluator, model, adapter, name: str, step: int, run_dir: Path) -> None:
    print(f"evaluating {name} (step {step})", flush=True)
    evaluator.quarantine["train"] = _train_quarantine(run_dir)
    evaluator.evaluate(model, adapter, name, step=step)


def _train_quarantine(run_dir: Path) -> dict[str, int]:
    """Training items the training left out, counted as the inline summary counts them."""
    path = run_dir / "quarantine_train.json"
    return quarantine_counts(json.loads(path.read_text())) if path.exists() else {}


def _default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("run_dir", help="the training's run directory (outputs/<run_name>)")
    parser.add_argument("--device", help="where the model runs (default: cuda if available, else cpu)")
    parser.add_argument("--timeout", type=float, help="give up after this many seconds (default: never)")
    parser.add_argument("--poll", type=float, default=10.0, help="seconds between looks for checkpoints")
    args = parser.parse_args(argv)

    def work() -> None:
        try:
            summary = watch(args.run_dir, device=args.device, timeout_s=args.timeout, poll_s=args.poll)
        except WatchTimeout as err:
            print(f"stopped: {err}; run it again to continue", file=sys.stderr)
            sys.exit(1)
        print(headline(summary), f"\nreport: {Path(args.run_dir) / 'report.md'}", sep="")

    run_cli(work)


if __name__ == "__main__":
    main(sys.argv[1:])
