"""Metric logging: W&B when configured, a null logger otherwise.

W&B runs offline when there is no ``WANDB_API_KEY`` (files under ``<run_dir>/wandb``, syncable later
with ``wandb sync``). If W&B cannot start at all, the run goes on with the null logger and a warning:
nothing fails because the network is absent.

In a multi-process run only rank 0 logs: every other rank gets the null logger, so there is one W&B run.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Protocol


class MetricLogger(Protocol):
    def log(self, values: dict[str, float], step: int) -> None: ...

    def log_table(self, name: str, records: list[dict], step: int) -> None: ...

    def finish(self) -> None: ...


class NullLogger:
    """Logs nothing (W&B disabled or unavailable)."""

    def log(self, values: dict[str, float], step: int) -> None:
        pass

    def log_table(self, name: str, records: list[dict], step: int) -> None:
        pass

    def finish(self) -> None:
        pass


class WandbLogger:
    """One W&B run for a training run: scalars on the training-step axis, per-sample tables."""

    def __init__(self, run):
        self.run = run

    def log(self, values: dict[str, float], step: int) -> None:
        self.run.log(values, step=step)

    def log_table(self, name: str, records: list[dict], step: int) -> None:
        import wandb

        columns = ["id", "prediction", "scores", "categories", "meta"]
        rows = [
            [r["id"], r["prediction"]] + [json.dumps(r.get(c, {}), sort_keys=True) for c in columns[2:]]
            for r in records
        ]
        self.run.log({name: wandb.Table(columns=columns, data=rows)}, step=step)

    def finish(self) -> None:
        self.run.finish()


def wandb_mode(mode: str) -> str:
    """Resolve ``auto``: online with an API key in the environment, offline without."""
    if mode != "auto":
        return mode
    return "online" if os.environ.get("WANDB_API_KEY") else "offline"


def make_logger(
    enabled: bool,
    mode: str,
    project: str,
    entity: str | None,
    run_dir: str | Path,
    run_name: str,
    config: dict,
) -> MetricLogger:
    """A W&B logger writing under ``run_dir``, or the null logger when disabled, unavailable, or on any
    rank but 0."""
    from train.distributed import is_main

    mode = wandb_mode(mode)
    if not enabled or mode == "disabled" or not is_main():
        return NullLogger()
    run_dir = Path(run_dir)
    # W&B writes under the home directory unless every one of its directories is pointed elsewhere.
    # Set per run (not setdefault) so one process running several runs keeps them apart.
    os.environ["WANDB_DIR"] = str(run_dir)  # W&B adds its own wandb/ below this
    for var, sub in (
        ("WANDB_CACHE_DIR", "cache"),
        ("WANDB_CONFIG_DIR", "config"),
        ("WANDB_DATA_DIR", "data"),
    ):
        os.environ[var] = str(run_dir / "wandb" / sub)
        Path(os.environ[var]).mkdir(parents=True, exist_ok=True)
    try:
        import wandb

        run = wandb.init(
            project=project,
            entity=entity,
            name=run_name,
            id=_run_id(run_dir, run_name),
            resume="allow",
            dir=os.environ["WANDB_DIR"],
            mode=mode,
            config=config,
        )
    except Exception as exc:  # any failure to start W&B must not stop training
        warnings.warn(
            f"W&B could not start ({type(exc).__name__}: {exc}); continuing without it", stacklevel=2
        )
        return NullLogger()
    return WandbLogger(run)


def _run_id(run_dir: Path, run_name: str) -> str:
    """A stable W&B run id per run directory, so a resumed run logs into the same W&B run."""
    path = run_dir / "wandb" / "run_id"
    if path.exists():
        return path.read_text().strip()
    import uuid

    run_id = f"{run_name}-{uuid.uuid4().hex[:8]}"
    path.write_text(run_id)
    return run_id
