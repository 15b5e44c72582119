"""Shared setup for the benchmarks: the quickstart's config, a small synthetic build, the tiny model
with the recipe's LoRA, a fixed training batch, and a table printer.

Everything is built once under ``outputs/bench/`` (or ``$BENCH_ROOT``) and reused by later runs, so a
benchmark's timings never include building data or the checkpoint.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_MODE", "disabled")
# Deprecation notices and the CPU pin_memory notice say nothing about the figures.
warnings.filterwarnings("ignore", category=FutureWarning)
warnings.filterwarnings("ignore", message=".*pin_memory.*")
warnings.filterwarnings("ignore", message=".*NumPy array is not writable.*")

import torch  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from core.config import TrainConfig, register_configs  # noqa: E402
from core.media import FrameCache  # noqa: E402
from core.run import Run  # noqa: E402
from core.sample import Sample  # noqa: E402
from models.chat import VideoChatAdapter, make_adapter  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
BENCH_ROOT = Path(os.environ.get("BENCH_ROOT", REPO / "outputs" / "bench"))


def quickstart_config(*overrides: str) -> TrainConfig:
    """The quickstart experiment as ``python -m train +exp=quickstart`` composes it, with a smaller
    synthetic build under ``BENCH_ROOT`` (8 training videos; 8 evaluation videos, 32 V2P items)."""
    from eval.benchmarks import settings_schemas
    from train.stage_settings import STAGE_SETTINGS

    register_configs(settings_schemas(), STAGE_SETTINGS)
    defaults = [
        "+exp=quickstart",
        f"output_root={BENCH_ROOT}",
        "run_name=bench",
        "data.synthetic.train_videos=8",
        "data.synthetic.eval_videos=8",
        "data.synthetic.vp_questions_per_video=4",
        "logger=none",
        "eval=none",
    ]
    with initialize_config_dir(version_base="1.3", config_dir=str(REPO / "conf")):
        return OmegaConf.to_object(compose("train", overrides=[*defaults, *overrides]))


@dataclass
class Setup:
    """The recipe's pieces for one benchmark: config, processor, adapter and training samples whose
    frames are already in the cache (as ``run`` leaves them before its first step)."""

    cfg: TrainConfig
    processor: object
    adapter: VideoChatAdapter
    samples: list[Sample]


def quickstart_run(*overrides: str) -> Run:
    """:func:`quickstart_config` resolved as ``python -m train`` resolves it (the synthetic data built)."""
    from train.recipe import resolve

    return resolve(quickstart_config(*overrides))


def v2p_items(run: Run, count: int, cache: FrameCache) -> tuple[list[Sample], object]:
    """The first ``count`` items of the synthetic V2P twin, media-checked (warming the frame cache), and
    V2P's settings as evaluation reads them."""
    from dataclasses import replace

    from core.media import check_media
    from data_builders.build import synthetic_datasets
    from eval.benchmarks import resolve_settings
    from eval.benchmarks.v2p import load

    evaluation = resolve_settings(replace(run.cfg.eval, benchmarks=["v2p"]), synthetic_datasets(run.cfg.data))
    settings = evaluation.settings["v2p"]
    items, _ = check_media(load(settings)[:count], run.cfg.media, cache, desc="v2p")
    assert len(items) == count, f"the synthetic V2P twin has {len(items)} items, {count} wanted"
    return items, settings


def training_setup(*overrides: str) -> Setup:
    """Build (once) and load the quickstart's data and tiny model; warm the frame cache."""
    from core.media import check_media
    from models.loading import load_model
    from train.data import load_samples

    cfg = quickstart_run(*overrides).cfg
    cache = FrameCache(cfg.data.frame_cache)
    _, processor = load_model(cfg.model)
    adapter = make_adapter(cfg.model.family, processor, cfg.media, cache, cfg.model.chat_format)
    samples, _ = check_media(
        load_samples(cfg.data.train), cfg.media, cache, desc="warm cache", follow_on=adapter.follow_on
    )
    return Setup(cfg, processor, adapter, samples)


def fresh_model(cfg: TrainConfig) -> torch.nn.Module:
    """The tiny model wrapped with the recipe's LoRA, seeded as the recipe seeds it."""
    from transformers import set_seed

    from models.loading import load_model
    from train.recipe import apply_peft

    model, _ = load_model(cfg.model)
    set_seed(cfg.trainer.seed)
    return apply_peft(model, cfg.peft).train()


def tiny_model_for_inference() -> tuple[torch.nn.Module, object]:
    """The quickstart's tiny model (built once) in eval mode, and its processor, the global RNG seeded."""
    from models.loading import load_model

    torch.manual_seed(0)
    model, processor = load_model(quickstart_config().model)
    return model.eval(), processor


def fixed_batch(setup: Setup, size: int) -> dict:
    """The first ``size`` training samples rendered and collated exactly as the Trainer's collator does."""
    from train.data import Collator, SampleDataset

    dataset = SampleDataset(setup.samples, setup.adapter)
    return Collator(setup.adapter)([dataset[i] for i in range(size)])


def timed(fn: Callable[[], object]) -> float:
    """Seconds one call of ``fn`` takes."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def median(values: list[float]) -> float:
    return statistics.median(values)


def machine_line() -> str:
    """What the figures were measured on, printed under every table."""
    gpu = f", GPU {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""
    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores visible{gpu}, torch "
        f"{torch.__version__} with {torch.get_num_threads()} threads; a shared machine makes ratios "
        "noisier than they look"
    )


def print_table(title: str, header: list[str], rows: list[list[str]], notes: list[str] = ()) -> None:
    """A plain-text table (Markdown-compatible, so it can go into a README as it is)."""
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]

    def line(cells):
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    print(f"\n{title}\n")
    print(line(header))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print(line(row))
    for note in [*notes, machine_line()]:
        print(f"\n- {note}", end="")
    print()
