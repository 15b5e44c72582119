"""Metric logging: every scalar to ``<run_dir>/metrics.jsonl``, and to W&B when configured.

W&B runs offline when there is no ``WANDB_API_KEY`` (files under ``<run_dir>/wandb``, syncable later
with ``wandb sync``). Nothing fails because W&B does: if it cannot start, or any call fails later (the
server rejects a log, the network drops), a warning says so once, W&B is not called again, and the run
goes on. The local file keeps every scalar whatever W&B does; per-sample tables are not copied there, as
they are already ``<run_dir>/eval/<model>/<benchmark>.jsonl``, and the evaluation metrics with their
deltas are in ``summary.json``.

Every logged row carries the training step as ``train/global_step``, the x-axis of every chart. The
evaluation watcher (``python -m eval.watch``) logs into the training's W&B run from another process
(``make_watcher_logger``): it cannot own the run's own step counter, so its rows are placed by
``train/global_step`` alone.

In a multi-process run only rank 0 logs: every other rank gets the null logger, so there is one W&B run.
"""

from __future__ import annotations

import json
import os
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from filelock import FileLock

from core.files import JsonlStore, write_text_atomic
from core.rundir import RunDir

STEP_KEY = "train/global_step"
WATCHER_LABEL = "eval-watcher"


class MetricLogger(Protocol):
    def log(self, values: dict[str, float], step: int) -> None: ...

    def log_table(self, name: str, records: list[dict], step: int) -> None: ...

    def log_rows(self, name: str, columns: list[str], rows: list[list], step: int) -> None: ...

    def finish(self) -> None: ...


class NullLogger:
    """Logs nothing (ranks other than 0)."""

    def log(self, values: dict[str, float], step: int) -> None:
        pass

    def log_table(self, name: str, records: list[dict], step: int) -> None:
        pass

    def log_rows(self, name: str, columns: list[str], rows: list[list], step: int) -> None:
        pass

    def finish(self) -> None:
        pass


class MetricsFile:
    """Appends every scalar log call to a JSON-lines file: ``{"train/global_step": N, ...values}``.

    The training and the evaluation watcher may append at the same time; a line a kill cut short is
    skipped by readers and ended before the next append (``core.files.JsonlStore``)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._store = JsonlStore(self.path, key=STEP_KEY, shared=True)

    def log(self, values: dict[str, float], step: int) -> None:
        self._store.append([{STEP_KEY: step, **values}])

    def log_table(self, name: str, records: list[dict], step: int) -> None:
        pass  # the records are the run's per-sample results files already

    def log_rows(self, name: str, columns: list[str], rows: list[list], step: int) -> None:
        pass  # tables are written as files by whoever makes them (report, results)

    def finish(self) -> None:
        pass


class WandbLogger:
    """One W&B run: scalars and per-sample tables against ``train/global_step``.

    Args:
        run: the started W&B run.
        owns_step: whether this process owns the run's step counter (the training process, unless W&B
            runs in shared mode, where ``step=`` is ignored); the watcher logs by ``train/global_step``.
        keep: where the metrics also are, named in the warning when W&B fails.
    """

    def __init__(self, run, owns_step: bool = True, keep: str = "the local metrics file"):
        self.run, self.owns_step, self.keep = run, owns_step, keep
        self.failed = False
        self._call("define_metric", self._define_step_axis)

    def _define_step_axis(self) -> None:
        self.run.define_metric(STEP_KEY)
        self.run.define_metric("*", step_metric=STEP_KEY)

    def log(self, values: dict[str, float], step: int) -> None:
        self._call("log", lambda: self._log({**values, STEP_KEY: step}, step))

    def log_table(self, name: str, records: list[dict], step: int) -> None:
        """Per-sample results: id, prediction, and scores, categories and meta as JSON."""
        columns = ["id", "prediction", "scores", "categories", "meta"]
        rows = [
            [r["id"], r["prediction"]] + [json.dumps(r.get(c, {}), sort_keys=True) for c in columns[2:]]
            for r in records
        ]
        self.log_rows(name, columns, rows, step)

    def log_rows(self, name: str, columns: list[str], rows: list[list], step: int) -> None:
        def log_rows() -> None:
            import wandb

            self._log({name: wandb.Table(columns=columns, data=rows), STEP_KEY: step}, step)

        self._call("log_table", log_rows)

    def finish(self) -> None:
        self._call("finish", self.run.finish)

    def _log(self, row: dict, step: int) -> None:
        if self.owns_step:
            self.run.log(row, step=step)
        else:
            self.run.log(row)

    def _call(self, what: str, action: Callable[[], None]) -> None:
        """Run a W&B call; on the first failure warn, and make no W&B call again."""
        if self.failed:
            return
        try:
            action()
        except Exception as exc:  # whatever W&B raises must not stop training or evaluation
            self.failed = True
            warnings.warn(
                f"W&B {what} failed ({type(exc).__name__}: {exc}); W&B is off for the rest of this "
                f"process, metrics are kept in {self.keep}",
                stacklevel=3,
            )


class BothLoggers:
    """The local metrics file and W&B, each given every call."""

    def __init__(self, local: MetricsFile, wandb: WandbLogger):
        self.local, self.wandb = local, wandb

    def log(self, values: dict[str, float], step: int) -> None:
        self.local.log(values, step)
        self.wandb.log(values, step)

    def log_table(self, name: str, records: list[dict], step: int) -> None:
        self.wandb.log_table(name, records, step)

    def log_rows(self, name: str, columns: list[str], rows: list[list], step: int) -> None:
        self.wandb.log_rows(name, columns, rows, step)

    def finish(self) -> None:
        self.wandb.finish()


def wandb_mode(mode: str) -> str:
    """Resolve ``auto``: online with an API key in the environment, offline without."""
    if mode != "auto":
        return str(mode)  # a LoggerMode member: W&B wants the plain string
    return "online" if os.environ.get("WANDB_API_KEY") else "offline"


def make_logger(
    enabled: bool,
    mode: str,
    project: str,
    entity: str | None,
    run_dir: str | Path,
    run_name: str,
    config: dict,
    shared: bool = False,
) -> MetricLogger:
    """The run's logger: ``<run_dir>/metrics.jsonl`` plus W&B (writing under ``run_dir``) when enabled
    and it starts; the null logger on any rank but 0.

    Args:
        shared: another process (the evaluation watcher) logs into this run too; online, W&B then runs
            in its shared mode with this process as the primary writer.
    """
    from core.distributed import is_main

    if not is_main():
        return NullLogger()
    local = MetricsFile(RunDir(run_dir).metrics_file)
    mode = wandb_mode(mode)
    if not enabled or mode == "disabled":
        return local
    if shared and mode == "online":
        mode, settings = "shared", {"x_label": "train", "x_primary": True}
    else:
        shared, settings = False, {}
    run = _start_wandb(project, entity, Path(run_dir), run_name, config, mode, settings)
    return BothLoggers(local, WandbLogger(run, owns_step=not shared, keep=str(local.path))) if run else local


def logger_for_run(cfg, shared: bool = False) -> MetricLogger:
    """:func:`make_logger` for a composed run config, training's or evaluation's: its ``logger``
    settings, directory and name, and the whole config recorded with the W&B run."""
    from omegaconf import OmegaConf

    return make_logger(
        cfg.logger.wandb,
        cfg.logger.mode,
        cfg.logger.project,
        cfg.logger.entity,
        cfg.run_dir,
        cfg.run_name,
        OmegaConf.to_container(OmegaConf.structured(cfg)),
        shared=shared,
    )


def make_watcher_logger(
    enabled: bool, mode: str, project: str, entity: str | None, run_dir: str | Path, run_name: str
) -> MetricLogger:
    """The evaluation watcher's logger: the training run's ``metrics.jsonl`` and, when the training logs
    to W&B, the training's W&B run (same id). Online it joins as a secondary writer in W&B's shared mode;
    offline it writes its own run directory with that id (``offline-run-…-eval-watcher``), which
    ``wandb sync <run_dir>/wandb`` uploads after the training's, into the same run.
    """
    local = MetricsFile(RunDir(run_dir).metrics_file)
    mode = wandb_mode(mode)
    if not enabled or mode == "disabled":
        return local
    settings = {
        "x_label": WATCHER_LABEL,
        "x_primary": False,  # the training process keeps the run's config and metadata
        "x_update_finish_state": False,  # the watcher finishing does not finish the training's run
        "x_sync_dir_suffix": WATCHER_LABEL,  # never the training's local run directory
    }
    mode = "shared" if mode == "online" else mode
    # A W&B service inherited from the process that started the watcher may already hold this run id (it
    # refuses a second run of the same id): the watcher starts its own service, as a separate job would.
    os.environ.pop("WANDB_SERVICE", None)
    run = _start_wandb(project, entity, Path(run_dir), run_name, None, mode, settings)
    return BothLoggers(local, WandbLogger(run, owns_step=False, keep=str(local.path))) if run else local


def _start_wandb(
    project: str,
    entity: str | None,
    run_dir: Path,
    run_name: str,
    config: dict | None,
    mode: str,
    settings: dict,
):
    """The W&B run of ``run_dir`` (resumed when it exists), or None with a warning if W&B cannot start."""
    _point_wandb_at(run_dir)
    try:
        import wandb

        return wandb.init(
            project=project,
            entity=entity,
            name=run_name,
            id=_run_id(run_dir, run_name),
            resume="allow",
            dir=os.environ["WANDB_DIR"],
            mode=mode,
            config=config,
            settings=wandb.Settings(**settings),
        )
    except Exception as exc:  # any failure to start W&B must not stop training
        warnings.warn(
            f"W&B could not start ({type(exc).__name__}: {exc}); continuing without it, metrics are kept "
            f"in {RunDir(run_dir).metrics_file}",
            stacklevel=3,
        )
        return None


def _point_wandb_at(run_dir: Path) -> None:
    """W&B writes under the home directory unless every one of its directories is pointed elsewhere.
    Set per run (not setdefault) so one process running several runs keeps them apart."""
    os.environ["WANDB_DIR"] = str(run_dir)  # W&B adds its own wandb/ below this
    for var, sub in (
        ("WANDB_CACHE_DIR", "cache"),
        ("WANDB_CONFIG_DIR", "config"),
        ("WANDB_DATA_DIR", "data"),
    ):
        os.environ[var] = str(RunDir(run_dir).wandb_dir / sub)
        Path(os.environ[var]).mkdir(parents=True, exist_ok=True)


def _run_id(run_dir: Path, run_name: str) -> str:
    """A stable W&B run id per run directory, so a resumed run, and the evaluation watcher of the run,
    log into the same W&B run. Locked: the training and the watcher may start at the same time."""
    path = RunDir(run_dir).wandb_id_file
    with FileLock(f"{path}.lock"):
        if not path.exists():
            write_text_atomic(path, f"{run_name}-{uuid.uuid4().hex[:8]}")
        return path.read_text().strip()
