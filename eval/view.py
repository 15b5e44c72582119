"""The results viewer of a finished run: its page written again from the run's files.

    python -m eval view outputs/quickstart            # writes outputs/quickstart/viewer.html
    python -m eval view outputs/quickstart --out quickstart.html

The run is found as its evaluation resolved it (a training's resolved config, else the config
``python -m eval`` composed), its stored results are read as its summary read them, and ``eval.viewer``
writes the page.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from core.cli import run_cli
from core.config import EvalRunConfig
from core.errors import DataError
from core.media import FrameCache
from core.metric_logging import NullLogger
from core.run import Run
from core.rundir import RunDir
from eval.benchmarks import resolve_settings
from eval.evaluation import Evaluation
from eval.run import resolve


def view(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Write the viewer page of a finished run (a training's or ``python -m eval``'s) from its files.

    Raises:
        DataError: the directory holds no evaluation, or no config to find its items by.
    """
    directory = RunDir(run_dir)
    if not directory.models():
        raise DataError(str(directory.models_file), "not found: no evaluation in this run directory")
    run = run_of(directory)
    evaluation = Evaluation(run, NullLogger(), FrameCache(run.cfg.data.frame_cache))
    (first, _), *rest = directory.models()
    stored = {first: evaluation.read_results(first)}
    stored.update((name, evaluation.read_results(name, stored[first])) for name, _ in rest)
    if not directory.summary_file.exists():
        raise DataError(str(directory.summary_file), "not found: the run has no summary yet")
    summary = json.loads(directory.summary_file.read_text())
    return evaluation.viewer.write(evaluation.suites, summary, stored, Path(out) if out else None)


def run_of(directory: RunDir) -> Run:
    """The run as its evaluation resolved it: a training's resolved config, else the config
    ``python -m eval`` composed, resolved again.

    Raises:
        DataError: neither is there, or the composed one is not an evaluation's.
    """
    if directory.config_file.exists():
        cfg = directory.read_config()
        return Run(replace(cfg, eval=resolve_settings(cfg.eval)), directory)
    composed = directory.composed_config_file
    if not composed.exists():
        raise DataError(
            str(directory.config_file),
            f"not found (nor {composed.relative_to(directory.path)}): which run is this?",
        )
    try:
        merged = OmegaConf.merge(OmegaConf.structured(EvalRunConfig), OmegaConf.load(composed))
        merged.run_dir = str(directory.path)  # where the run is now (it may have been moved or copied)
        cfg = OmegaConf.to_object(merged)
    except OmegaConfBaseException as err:
        raise DataError(str(composed), f"not an evaluation config: {str(err).splitlines()[0]}") from None
    return resolve(cfg)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m eval view", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", help="a run directory with an evaluation (summary.json, eval/)")
    parser.add_argument("--out", default=None, help="the page to write (default: <run_dir>/viewer.html)")
    args = parser.parse_args(argv)
    run_cli(lambda: print(f"viewer: {view(args.run_dir, args.out)}"))
