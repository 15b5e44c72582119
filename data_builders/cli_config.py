"""Typed configuration for ``python -m data_builders`` (``conf/build.yaml`` and ``conf/builder/``).

Each builder takes its dataclass whole (``build_ovi_train(cfg)``), and the dataclass is the one home of
every default and its meaning; ``conf/builder/<name>.yaml`` sets only what differs. Each dataclass is
stored in Hydra's ConfigStore in the ``builder`` group (``<name>_schema``), and the yaml starts from it,
so the chosen builder's node keeps its type: a misspelt key, a wrong type or a value outside a closed
choice (a :class:`~core.choice.Choice`) fails when the config is composed, naming the key.
(A ``builder`` field typed as a Union of the dataclasses would not work: OmegaConf cannot type it.)
Imports no torch and no builder, so composing a config stays cheap.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from core.choice import Choice
from core.config import Family, SyntheticDataConfig
from core.decoding import MediaSpec
from core.vocab import PAPER_MIX, InterruptionType, ItemForm, PromptShape
from data_builders.phrasings import PhraseBank
from data_builders.qc import QcConfig
from data_builders.questions import QuestionConfig
from data_builders.visual_prompts import DEFAULT_SHAPES
from data_builders.vp_kinds import VP_KINDS


class SourceFormat(Choice):
    """How OVI-Train reads its annotations: the keys of :data:`data_builders.sources.SOURCES`."""

    activitynet = "activitynet"  # ActivityNet Captions JSON
    qvhighlights = "qvhighlights"  # QVHighlights JSONL: each query's relevant windows
    youcook2 = "youcook2"  # YouCook2 annotations JSON: recipe steps
    ucf_crime = "ucf_crime"  # UCF-Crime temporal anomaly annotations, in frames
    moviechat = "moviechat"  # MovieChat-1K: a directory of per-video JSON files with breakpoint QA


class TrackFormat(Choice):
    """How visual-prompt SFT reads its tracks: the keys of ``data_builders.sources.tracks.TRACK_FORMATS``."""

    generic = "generic"  # tracks/*.json beside their videos (the synthetic world's layout)
    got10k = "got10k"  # a GOT-10k split root of sequence folders
    lasot = "lasot"  # a LaSOT root of <class>/<class>-<n> sequence folders


# Made from the kinds' table, so a kind is defined in one place, and by a call rather than a class
# statement: one kind is named `class`, a keyword. The order is the table's (the default `kinds`).
QuestionKind = Choice("QuestionKind", [(kind, kind) for kind in VP_KINDS], module=__name__)
QuestionKind.__doc__ = """A visual-prompt question kind (a row of :data:`data_builders.vp_kinds.VP_KINDS`)."""


class ExportFormat(Choice):
    """The training tool an export is for."""

    llamafactory = "llamafactory"  # <name>.json and its dataset_info.json entry (sharegpt formatting)
    swift = "swift"  # ms-swift: <name>.jsonl of {messages, videos, images}


@dataclass
class OviTrainBuild:
    """OVI-Train from a source dataset's annotations; see :func:`~data_builders.ovi_train.build_ovi_train`."""

    captions: str = MISSING  # the annotation file (a directory of JSON files for moviechat)
    videos: str = MISSING  # directory holding the annotated videos (<key>.mp4 for activitynet)
    out: str = MISSING  # output directory: ovibench.jsonl, videos/, hf/, stats.md, build_info.json
    seed: int = 0  # every random choice of the build
    # interruption type weights (the paper's 1 : 2 : 1); a type left out weighs 0
    mix: dict[InterruptionType, float] = field(default_factory=lambda: dict(PAPER_MIX))
    # each instance is written once per form
    forms: list[ItemForm] = field(default_factory=lambda: [ItemForm.open, ItemForm.mcq])
    words_per_second: float = 2.5  # speaking rate that times the interruption
    # the interruption comes at least this long after the question (3 answer tokens at the offline
    # simulation's 3 tokens/s), unless the whole answer is shorter; it may come after the video's end
    min_spoken_s: float = 1.0
    # the user's words (data_builders/phrasings.py): train for OVI-Train, eval for an OVIBench twin
    phrase_bank: PhraseBank = PhraseBank.train
    paraphrased_share: float = 0.25  # phrase_bank eval: share of each type in casual (OVI-Human-like) words
    format: SourceFormat = SourceFormat.activitynet  # how `captions` is read
    # the reader's options, e.g. builder.source_options={subset: training} (youcook2) or
    # builder.source_options.window_s=10 (moviechat); the reader names the options it takes
    source_options: dict[str, Any] = field(default_factory=dict)
    source: str | None = None  # the source name stored in each row; None: the format's name
    questions: QuestionConfig = field(default_factory=QuestionConfig)  # question generation (questions/)


@dataclass
class OviSourceBuild:
    """One source of the OVI-Train recipe: its annotations, its videos and how many instances it gives."""

    captions: str = MISSING  # annotation file (moviechat: a directory of JSON files); absent: source skipped
    videos: str = MISSING  # directory holding its videos; absent: source skipped
    format: SourceFormat = MISSING  # how `captions` is read
    # instances wanted of each interruption type (all three; an instance is written once per form), sampled
    # down to these, never padded
    targets: dict[InterruptionType, int] = field(default_factory=dict)
    source_options: dict[str, Any] = field(default_factory=dict)  # the reader's options, as in ovi_train


@dataclass
class OviTrainPaperBuild:
    """The paper's OVI-Train from all its sources (:func:`data_builders.ovi_compose.compose_ovi_train`)."""

    # sources/<name>/ (each source's ovi_train build), ovibench.jsonl, videos/, hf/, composition.md/.json
    out: str = "data/ovi_train"
    data_root: str = "data/ovi_sources"  # where conf/builder/ovi_train_paper.yaml finds the datasets
    sources: dict[str, OviSourceBuild] = field(default_factory=dict)  # by the name rows store as `source`
    seed: int = 0  # every source's build and every sampling draw
    # each instance is written once per form (and sampled with all its forms)
    forms: list[ItemForm] = field(default_factory=lambda: [ItemForm.open, ItemForm.mcq])
    questions: QuestionConfig = field(default_factory=QuestionConfig)  # question generation (questions/)


@dataclass
class VpSftBuild:
    """Visual-prompt SFT data from object tracks; see :func:`~data_builders.vp_sft.build_vp_sft`."""

    world: str = MISSING  # generic: directory with tracks/*.json and videos; got10k/lasot: the dataset root
    out: str = MISSING  # output directory: v2p/ (release format), hf/, stats.md, build_info.json
    seed: int = 0  # every random choice of the build
    questions_per_video: int = 4  # wanted; fewer where a track supports fewer
    shapes: list[PromptShape] = field(default_factory=lambda: list(DEFAULT_SHAPES))  # drawn from
    # question kinds drawn from, each only where the track supports it
    kinds: list[QuestionKind] = field(default_factory=lambda: list(QuestionKind))
    # prompt stroke colours: keys of visual_prompts.PROMPT_COLOURS
    colours: list[str] = field(
        default_factory=lambda: ["red", "green", "blue", "yellow", "white", "magenta", "cyan", "orange"]
    )
    line_widths: list[int] = field(default_factory=lambda: [2, 3])  # px on <= 256-px frames, scaled up above
    doodle_share: float = 0.25  # share of prompts drawn with a shaky hand
    format: TrackFormat = TrackFormat.generic  # how `world` is read
    # the reader's options: got10k/lasot {fps, stride, max_side}, e.g. builder.source_options.stride=2
    source_options: dict[str, Any] = field(default_factory=dict)
    qc: QcConfig = field(default_factory=QcConfig)  # quality control (qc.py)


FAMILY_SYSTEM = "family"  # ExportBuild.system: the model family's own system turn


@dataclass
class ExportBuild:
    """An HF dataset of Sample rows as LLaMA-Factory or ms-swift data; see :mod:`data_builders.export`."""

    dataset: str = MISSING  # an hf/ directory a builder wrote (V2P SFT or OVI-Train)
    format: ExportFormat = ExportFormat.llamafactory  # the training tool's format
    out: str = MISSING  # output directory
    name: str | None = None  # dataset name (file name, dataset_info.json key); None: the out folder's name
    # The model family the export is for: its chat format's system turn is written first (Qwen3-VL and
    # InternVL have none), and README.md gives the tools' media settings for it.
    family: Family = Family.qwen2_5_vl
    system: str | None = FAMILY_SYSTEM  # "family": the family's own system turn; None: none; else this text
    clip_fps: float | None = 4.0  # frame rate of trimmed span clips; None: the source's
    clip_max_side: int = 640  # longer side of trimmed span clips, px
    # The frames our training takes per span (the run's `media`): README.md gives each tool's settings
    # that come closest to them.
    media: MediaSpec = field(default_factory=MediaSpec)


@dataclass
class PreferenceBuild:
    """Preference pairs (chosen vs wrong reactions) from OVI samples; see :mod:`data_builders.preferences`."""

    dataset: str = MISSING  # an OVI-Train hf/ directory (or any saved dataset of OVI samples)
    out: str = MISSING  # output directory: hf/ (the pairs), stats.md, build_info.json


@dataclass
class BuildConfig:
    """The primary config: which builder runs (``builder=NAME``) and its settings (``builder.KEY=...``)."""

    builder: Any = MISSING  # typed by the chosen builder's schema, see the module docstring
    output_root: str = "outputs"  # Hydra's run records go under <output_root>/build/<builder>


BUILDER_SCHEMAS: dict[str, type] = {
    "synthetic": SyntheticDataConfig,
    "ovi_train": OviTrainBuild,
    "ovi_train_paper": OviTrainPaperBuild,
    "vp_sft": VpSftBuild,
    "export": ExportBuild,
    "preference": PreferenceBuild,
}


def register_configs() -> None:
    """Register ``build_schema`` and one ``builder/<name>_schema`` per builder."""
    store = ConfigStore.instance()
    store.store(name="build_schema", node=BuildConfig)
    for name, schema in BUILDER_SCHEMAS.items():
        store.store(group="builder", name=f"{name}_schema", node=_schema_node(schema))


def _schema_node(schema: type) -> DictConfig:
    """``schema`` as a config node whose free-form dicts (``dict[str, Any]``: a reader's options) are open.

    Hydra closes every dict of the composed config, so ``builder.source_options={subset: validation}``
    and ``builder.source_options.subset=validation`` would fail ("not in struct") and only
    ``+builder.source_options.subset=validation`` would work. The reader checks the option names instead.
    """
    node = OmegaConf.structured(schema)
    _open_free_dicts(node, schema)
    return node


def _open_free_dicts(node: DictConfig, schema: type) -> None:
    for name, hint in typing.get_type_hints(schema).items():
        if hint == dict[str, Any]:
            OmegaConf.set_struct(node[name], False)
        elif dataclasses.is_dataclass(hint):
            _open_free_dicts(node[name], hint)
