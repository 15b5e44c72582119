"""Build the synthetic world and everything derived from it, once per configuration.

Layout under ``root``::

    world_train/   world_eval/        rendered videos, object tracks, ActivityNet-format captions
    v2p_sft/       ovi_train/         training sets (HF datasets under hf/, JSONL, stats.md)
    v2p_bench/v2p/ ovibench/          evaluation sets in the benchmarks' own formats

Training and evaluation use disjoint videos (different world seeds), and OVI-Train and the OVIBench
twin disjoint interruption wording (the training and evaluation phrase banks,
:mod:`data_builders.phrasings`). A finished build writes ``build.json`` last; a build whose
``build.json`` matches the config is reused as is.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from core.config import DataConfig, SkillsDataConfig, SyntheticDataConfig
from core.errors import ConfigError
from core.files import write_json_atomic
from core.vocab import PAPER_MIX, by_type
from data_builders.cli_config import OviTrainBuild, VpSftBuild
from data_builders.phrasings import PHRASINGS_VERSION, PhraseBank

# Part of the build hash: bump it when the builders' output changes for the same config, so
# existing builds are redone rather than reused. 2: OVI rows from the synthetic world say so. 4: OVI
# interruptions at least 1 s after the question (past the video's end if need be), visual evidence,
# disjoint phrase banks for OVI-Train and the OVIBench twin; all 8 prompt shapes by default. 5: OVI rows
# record question_kind and source_annotations; template questions of several kinds, balanced.
BUILDER_VERSION = 5
SKILLS_VERSION = 4  # the same for data_builders/generic_skills.py's output


@dataclass
class SyntheticPaths:
    """Where a synthetic build put each dataset."""

    v2p_sft: Path
    ovi_train: Path
    v2p_bench: Path
    ovibench: Path


def _paths(root: Path) -> SyntheticPaths:
    return SyntheticPaths(
        v2p_sft=root / "v2p_sft" / "hf",
        ovi_train=root / "ovi_train" / "hf",
        v2p_bench=root / "v2p_bench" / "v2p",
        ovibench=root / "ovibench",
    )


def _settings(cfg: SyntheticDataConfig) -> dict:
    """The build's settings as ``build.json`` records them (the type mix keyed by type name)."""
    return {**asdict(cfg), "ovi_mix": {kind.name: weight for kind, weight in by_type(cfg.ovi_mix).items()}}


def _config_hash(cfg: SyntheticDataConfig) -> str:
    fields = {k: v for k, v in _settings(cfg).items() if k != "root"}
    # The mix as the positional list builds were hashed with before mixes were keyed by type (Cancellation,
    # Correction, False Trigger), so those builds keep their hash and are reused.
    fields["ovi_mix"] = [by_type(cfg.ovi_mix)[kind] for kind in PAPER_MIX]
    fields["builder_version"] = BUILDER_VERSION
    fields["phrasings_version"] = PHRASINGS_VERSION
    return hashlib.sha1(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:12]


def _refuse_other_build(root: Path, built: dict, wanted: dict) -> None:
    """Another configuration's finished build is at ``root``: never delete it silently (other runs'
    results refer to its items); say which settings differ."""
    differ = sorted(k for k in wanted if k != "root" and built.get(k) != wanted[k])
    if differ:
        changes = ", ".join(f"{k}: {built.get(k)!r} there, {wanted[k]!r} asked" for k in differ)
        raise ConfigError(
            f"{root} holds a synthetic build with other settings ({changes}); set data.synthetic.root "
            f"to another directory, or delete {root} to rebuild it"
        )


def build_synthetic(cfg: SyntheticDataConfig) -> SyntheticPaths:
    """Render the worlds and build the four datasets, unless an identical build is already there.

    Safe to call from every rank of a multi-process run: the first takes a file lock and builds,
    the others wait for it and then reuse the build.
    """
    from filelock import FileLock

    Path(cfg.root).parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{cfg.root}.lock"):
        return _build_synthetic(cfg)


def _build_synthetic(cfg: SyntheticDataConfig) -> SyntheticPaths:
    from data_builders.ovi_train import build_ovi_train
    from data_builders.synthetic_world import build_world
    from data_builders.vp_sft import build_vp_sft

    root = Path(cfg.root)
    marker = root / "build.json"
    config_hash = _config_hash(cfg)
    if marker.exists():
        built = json.loads(marker.read_text())
        if built.get("config_hash") == config_hash:
            return _paths(root)
        _refuse_other_build(root, built.get("config", {}), _settings(cfg))
    if root.exists():
        shutil.rmtree(root)  # a partial build, or one by an older builder: start clean rather than mix
    root.mkdir(parents=True)
    worlds = {"train": root / "world_train", "eval": root / "world_eval"}
    build_world(worlds["train"], cfg.train_videos, seed=cfg.seed)
    build_world(worlds["eval"], cfg.eval_videos, seed=cfg.seed + 1)
    for split, out in (("train", root / "v2p_sft"), ("eval", root / "v2p_bench")):
        build_vp_sft(_vp_sft_build(cfg, worlds[split], out, seed=cfg.seed + (split == "eval")))
    for split, out in (("train", root / "ovi_train"), ("eval", root / "ovibench")):
        seed, bank = cfg.seed + (split == "eval"), PhraseBank(split)
        build_ovi_train(_ovi_train_build(cfg, worlds[split], out, seed=seed, phrase_bank=bank))
    write_json_atomic(marker, {"config_hash": config_hash, "config": _settings(cfg)}, indent=2)
    return _paths(root)


def _vp_sft_build(cfg: SyntheticDataConfig, world: Path, out: Path, *, seed: int) -> VpSftBuild:
    return VpSftBuild(
        world=str(world),
        out=str(out),
        seed=seed,
        questions_per_video=cfg.vp_questions_per_video,
        shapes=list(cfg.shapes),
    )


def _ovi_train_build(
    cfg: SyntheticDataConfig, world: Path, out: Path, *, seed: int, phrase_bank: PhraseBank
) -> OviTrainBuild:
    return OviTrainBuild(
        captions=str(world / "activitynet_captions.json"),
        videos=str(world / "videos"),
        out=str(out),
        seed=seed,
        mix=dict(cfg.ovi_mix),
        phrase_bank=phrase_bank,
        # The captions are in ActivityNet's format, but the videos are the synthetic world's.
        source="synthetic",
    )


def synthetic_datasets(data: DataConfig) -> dict[str, str]:
    """The synthetic datasets by name, built first where ``data`` asks (file-locked: every rank may call
    it, one builds): ``v2p_sft``, ``ovi_train``, ``v2p_bench`` and ``ovibench`` when
    ``data.build_synthetic``; ``skills_train`` and ``skills_heldout`` when ``data.build_skills``."""
    datasets = {}
    if data.build_synthetic:
        datasets |= {name: str(path) for name, path in asdict(build_synthetic(data.synthetic)).items()}
    if data.build_skills:
        datasets |= build_skills(data.skills)
    return datasets


def build_skills(cfg: SkillsDataConfig) -> dict[str, str]:
    """Build the generic-skills training set and its held-out questions under ``cfg.root`` (``train/``,
    ``heldout/``), unless an identical build is there; their directories by name.

    Raises:
        ConfigError: ``cfg.root`` holds a finished build of other settings (never deleted silently).
    """
    from filelock import FileLock

    from data_builders.generic_skills import build_generic_skills

    root = Path(cfg.root)
    splits = {"skills_train": (root / "train", cfg.train_videos, cfg.seed)}
    splits["skills_heldout"] = (root / "heldout", cfg.heldout_videos, cfg.seed + 1)
    marker, settings = root / "build.json", {**asdict(cfg), "builder_version": SKILLS_VERSION}
    settings.pop("root")
    root.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{root}.lock"):
        built = json.loads(marker.read_text()) if marker.exists() else None
        if built is not None and built != settings:
            _refuse_other_build(root, built, settings)
        if built != settings:
            shutil.rmtree(root, ignore_errors=True)  # a partial build, or an older builder's: start clean
            for out, videos, seed in splits.values():
                build_generic_skills(out, videos, seed)
            write_json_atomic(marker, settings, indent=2)
    return {name: str(out) for name, (out, _, _) in splits.items()}


def built_synthetic_datasets(data: DataConfig) -> dict[str, str]:
    """The synthetic datasets by name as :func:`synthetic_datasets` gives them, when ``data.build_synthetic``
    asks for them and a build is already on disk; ``{}`` otherwise (nothing is built: a plan reads only)."""
    paths = {name: str(path) for name, path in asdict(_paths(Path(data.synthetic.root))).items()}
    if not data.build_synthetic or not all(Path(path).exists() for path in paths.values()):
        return {}
    return paths


def with_synthetic_training_data(data: DataConfig, datasets: dict[str, str]) -> DataConfig:
    """``data`` training on the synthetic training sets when it names none of its own."""
    if data.train or not datasets:
        return data
    return replace(data, train=[datasets["v2p_sft"], datasets["ovi_train"]])
