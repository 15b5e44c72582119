"""Typed configuration for ``python -m data_builders`` (``conf/build.yaml`` and ``conf/builder/``).

Each builder's dataclass is stored in Hydra's ConfigStore in the ``builder`` group
(``<name>_schema``), and ``conf/builder/<name>.yaml`` starts from it, so the chosen builder's node
keeps its type: a misspelt key or a wrong type fails when the config is composed, naming the key.
(A ``builder`` field typed as a Union of the dataclasses would not work: OmegaConf cannot type it.)
Imports no torch and no builder, so composing a config stays cheap.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from data_builders.build import SyntheticDataConfig
from data_builders.qc import QcConfig
from data_builders.questions import QuestionConfig


@dataclass
class OviTrainBuild:
    """OVI-Train from a source dataset's annotations (``format``: a key of ``data_builders.sources.SOURCES``).

    See :func:`~data_builders.ovi_train.build_ovi_train`.
    """

    captions: str = MISSING  # the annotation file (a directory of JSON files for moviechat)
    videos: str = MISSING  # directory holding the annotated videos (<key>.mp4 for activitynet)
    out: str = MISSING  # output directory: ovibench.jsonl, videos/, hf/, stats.md, build_info.json
    seed: int = 0
    # Cancellation : Correction : False Trigger
    mix: list[float] = field(default_factory=lambda: [1.0, 2.0, 1.0])
    forms: list[str] = field(default_factory=lambda: ["open", "mcq"])  # each instance once per form
    words_per_second: float = 2.5  # speaking rate that times the interruption
    # activitynet | qvhighlights | youcook2 | ucf_crime | moviechat: how `captions` is read
    format: str = "activitynet"
    # the reader's options, e.g. {subset: training} (youcook2), {window_s: 10} (moviechat)
    source_options: dict[str, Any] = field(default_factory=dict)
    source: str | None = None  # the source name stored in each row; None: the format's name
    # question generation: backend template (default) | endpoint | hf, model, base_url, cache, frames ...
    questions: QuestionConfig = field(default_factory=QuestionConfig)


@dataclass
class VpSftBuild:
    """Visual-prompt SFT data from object tracks; see :func:`~data_builders.vp_sft.build_vp_sft`."""

    world: str = MISSING  # generic: directory with tracks/*.json and videos; got10k/lasot: the dataset root
    out: str = MISSING  # output directory: v2p/ (release format), hf/, stats.md, build_info.json
    seed: int = 0
    questions_per_video: int = 4
    shapes: list[str] = field(default_factory=lambda: ["rectangle", "ellipse", "arrow", "point"])
    # colour | shape | direction | count | order | visibility | class (each where the track supports it)
    kinds: list[str] = field(
        default_factory=lambda: ["colour", "shape", "direction", "count", "order", "visibility", "class"]
    )
    colours: list[str] = field(
        default_factory=lambda: ["red", "green", "blue", "yellow", "white", "magenta", "cyan", "orange"]
    )
    line_widths: list[int] = field(default_factory=lambda: [2, 3])  # px on <= 256-px frames, scaled up above
    doodle_share: float = 0.25  # share of prompts drawn with a shaky hand
    format: str = "generic"  # generic | got10k | lasot
    source_options: dict[str, Any] = field(default_factory=dict)  # got10k/lasot: {fps, stride, max_side}
    qc: QcConfig = field(default_factory=QcConfig)


@dataclass
class ExportBuild:
    """An HF dataset of Sample rows as LLaMA-Factory or ms-swift data; see :mod:`data_builders.export`."""

    dataset: str = MISSING  # an hf/ directory a builder wrote (V2P SFT or OVI-Train)
    format: str = "llamafactory"  # llamafactory | swift
    out: str = MISSING  # output directory
    name: str | None = None  # dataset name (file name, dataset_info.json key); None: the out folder's name
    system: str | None = "You are a helpful assistant."  # None: no system message
    clip_fps: float | None = 4.0  # frame rate of trimmed span clips; None: the source's
    clip_max_side: int = 640


@dataclass
class BuildConfig:
    """The primary config: which builder runs (``builder=NAME``) and its settings (``builder.KEY=...``)."""

    builder: Any = MISSING  # typed by the chosen builder's schema, see the module docstring
    output_root: str = "outputs"  # Hydra's run records go under <output_root>/build/<builder>


BUILDER_SCHEMAS: dict[str, type] = {
    "synthetic": SyntheticDataConfig,
    "ovi_train": OviTrainBuild,
    "vp_sft": VpSftBuild,
    "export": ExportBuild,
}


def register_configs() -> None:
    """Register ``build_schema`` and one ``builder/<name>_schema`` per builder."""
    store = ConfigStore.instance()
    store.store(name="build_schema", node=BuildConfig)
    for name, schema in BUILDER_SCHEMAS.items():
        store.store(group="builder", name=f"{name}_schema", node=schema)
