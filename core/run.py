"""A run as its entry point resolved it: the one object training, the evaluation watcher and
``python -m eval`` hand down, instead of a config that each step rewrites in place."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from core.config import RunConfig
from core.rundir import RunDir


@dataclass(frozen=True)
class Run:
    """What a run is, once resolved (``train.recipe.resolve``, ``eval.run.resolve``, ``eval.watch.resolve``).

    Attributes:
        cfg: the config with every path filled in (training data, benchmark roots, the base model a
            post-SFT stage starts from) and each benchmark's settings typed; nothing assigns to it after.
        dir: the run directory.
        checkpoint: the training checkpoint a standalone evaluation evaluates on ``cfg.model`` (None: the
            model itself).
        quantized: whether the base loads in 4 bits (a QLoRA run, or a checkpoint of one).
    """

    cfg: RunConfig
    dir: RunDir
    checkpoint: Path | None = None
    quantized: bool = False
