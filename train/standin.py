"""Publish the stand-in base model: a finished ``+exp=standin`` run's final weights, with their build record.

    python -m train +exp=standin                 # pretrain it (outputs/standin)
    python -m train.standin outputs/standin      # copy final/ to assets/standin-qwen2.5-vl with its record

The record (``build_record.json``) says how the weights were made and what they score: the command, the
data (worlds' seeds, videos, items), the steps, learning rate, batch and seed, the torch version, the
weights' fingerprint (the sha256 of ``model.safetensors``) and the held-out generic
skills of the pretrained model against its random start, from the run's ``summary.json``. CI checks the
committed weights against their fingerprint (tests/test_standin.py).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import shutil
import sys
from pathlib import Path
from typing import Any

from core.files import atomic_dir, write_json_atomic
from core.rundir import BASELINE, RunDir
from models.centring import CENTRING_CLIPS

ASSET = Path("assets/standin-qwen2.5-vl")
RECORD_FILE = "build_record.json"
WEIGHTS_FILE = "model.safetensors"
COMMAND = "python -m train +exp=standin"


def fingerprint(checkpoint: str | Path) -> str:
    """The sha256 of a checkpoint's weights file."""
    return hashlib.sha256((Path(checkpoint) / WEIGHTS_FILE).read_bytes()).hexdigest()


def build_record(run_dir: RunDir) -> dict[str, Any]:
    """What made the run's final weights and what they score on the held-out generic questions."""
    import torch

    cfg = run_dir.read_config()
    summary = json.loads(run_dir.summary_file.read_text())
    skills = summary["benchmarks"]["skills"]
    final = summary["checkpoints"][-1]["name"]
    built = {
        "skills": json.loads((Path(cfg.data.skills.root) / "build.json").read_text()),
        **{split: _build_info(Path(cfg.data.skills.root) / split) for split in ("train", "heldout")},
    }
    return {
        "command": COMMAND,
        "model": {
            "family": str(cfg.model.family),
            "hidden": cfg.model.tiny_hidden,
            "layers": cfg.model.tiny_layers,
            "head_dim": cfg.model.tiny_head_dim,
            "tokenizer_words": str(cfg.model.tiny_words),
            "visual_output_centred_on_clips": CENTRING_CLIPS if cfg.model.tiny_centre_visual else 0,
        },
        "data": built,
        "training": {
            "steps": cfg.trainer.max_steps,
            "batch_size": cfg.trainer.batch_size,
            "lr": cfg.trainer.lr,
            "frozen": [tower.value for tower in cfg.peft.freeze],
            "seed": cfg.trainer.seed,
            "media_max_pixels": cfg.media.max_pixels,
        },
        "torch": torch.__version__,
        "parameters": _parameters(run_dir.final_dir),
        "fingerprint_sha256": fingerprint(run_dir.final_dir),
        "heldout_skills": {
            "checkpoint": final,
            "items": skills["checkpoints"][final]["n_items"],
            "accuracy": _scores(skills["metrics"], final),
            "random_start": _scores(skills["metrics"], BASELINE),
        },
    }


def _parameters(checkpoint: Path) -> int:
    from safetensors import safe_open

    with safe_open(checkpoint / WEIGHTS_FILE, "pt") as weights:
        return sum(math.prod(weights.get_slice(name).get_shape()) for name in weights.keys())


def _build_info(split: Path) -> dict[str, Any]:
    info = json.loads((split / "build_info.json").read_text())
    return {key: info[key] for key in ("seed", "videos", "items")}


def _scores(metrics: dict[str, Any], model: str) -> dict[str, float]:
    """Every accuracy key of one model (overall, per kind, per form), in points."""
    scores = {}
    for key, entry in metrics.items():
        value = entry["baseline"] if model == BASELINE else entry["checkpoints"][model]["value"]
        scores[key] = round(100 * value, 1)
    return scores


def publish(run_dir: str | Path, dest: str | Path = ASSET) -> Path:
    """Copy the run's ``final/`` to ``dest`` (atomically) with its build record; returns ``dest``."""
    run = RunDir(run_dir)
    record = build_record(run)
    with atomic_dir(dest) as tmp:
        shutil.copytree(run.final_dir, tmp, dirs_exist_ok=True)
        write_json_atomic(Path(tmp) / RECORD_FILE, record, indent=2)
    return Path(dest)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", help="a finished +exp=standin run (outputs/standin)")
    parser.add_argument("--dest", default=str(ASSET), help=f"where to publish it ({ASSET})")
    args = parser.parse_args(argv)
    path = publish(args.run_dir, args.dest)
    print(f"published {path} (sha256 {fingerprint(path)[:12]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
