"""The paper's OVI-Train in one command: every source built, sampled down to its targets, merged.

Each source whose annotations and videos are present is built by
:func:`~data_builders.ovi_train.build_ovi_train` into ``<out>/sources/<name>/``, with the interruption
mix set to the source's own targets (so sampling leaves little unused), and then sampled down to its
target count per interruption type. The paper's Table 3 is the default
(``conf/builder/ovi_train_paper.yaml``).

What is counted is the *instance*: one question and its interruption, written once per form (open and
mcq). An instance is kept or left out with all its forms, so the set holds ``instances x len(forms)``
rows, as ``build_ovi_train`` writes them. The draw is seeded per source and type, so it does not depend
on which other sources are present. A source with fewer instances of a type than its target gives all
it has: ``composition.md`` marks the cell short; nothing is repeated to fill it. A source whose
annotations or videos are absent is skipped with one printed line, and recorded.

Layout of ``out``::

    sources/<name>/                    that source's ovi_train build, reused by a rerun with the same settings
    ovibench.jsonl, videos/<name>/     the merged rows, and their videos (hard links into sources/)
    hf/                                the training set (Sample rows)
    composition.md, composition.json   target vs achieved per source x type
"""

from __future__ import annotations

import json
import re
import zlib
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from core.errors import ConfigError, DataError, DataErrors
from core.files import link_or_copy, markdown_table, read_jsonl, write_json_atomic, write_text_atomic
from core.formats.ovi import OVI_FILE, release_ovibench
from core.text_models import TextBackend
from core.vocab import PAPER_MIX, InterruptionType
from data_builders.build import BUILDER_VERSION
from data_builders.cli_config import OviSourceBuild, OviTrainBuild, OviTrainPaperBuild
from data_builders.outputs import save_build
from data_builders.phrasings import PHRASINGS_VERSION
from data_builders.questions import NOT_THE_PAPERS, QuestionConfig

SOURCES_DIR = "sources"
SOURCE_RECORD = "compose_source.json"  # the settings a source's build was made with; written last
COMPOSITION_MD = "composition.md"
COMPOSITION_JSON = "composition.json"
TYPES = tuple(kind.value for kind in PAPER_MIX)  # the paper's Table 3 order: its columns here
INSTANCE = "one question and its interruption, written once per form"


@dataclass
class SourceComposition:
    """What one source gave: instances built (available), wanted (target) and taken (achieved), per type."""

    name: str
    status: str  # built | reused | skipped
    target: dict[str, int]
    available: dict[str, int] = field(default_factory=dict)
    achieved: dict[str, int] = field(default_factory=dict)
    note: str = ""  # why a source was skipped


def compose_ovi_train(cfg: OviTrainPaperBuild) -> Path:
    """Build every present source, sample each to its targets, and write the merged set to ``cfg.out``.

    Returns:
        ``cfg.out`` as a path.

    Raises:
        ConfigError: no sources, a source name unfit for a directory, or a negative target.
        DataError: no source gave an instance; or a source's build failed on its input.
    """
    _check(cfg)
    out = Path(cfg.out)
    compositions, rows = [], []
    for name, source in cfg.sources.items():
        target = {kind: int(source.targets[InterruptionType(kind)]) for kind in TYPES}
        absent = _absent_input(source, target)
        if absent:
            print(f"{name}: skipped, {absent}", flush=True)
            compositions.append(SourceComposition(name, "skipped", target, note=absent))
            continue
        source_dir, status = _build_source(_source_build(cfg, name, source, target))
        chosen, available = _sample(source_dir, target, cfg.seed, name)
        achieved = {kind: min(target[kind], available[kind]) for kind in TYPES}
        compositions.append(SourceComposition(name, status, target, available, achieved))
        rows += [_moved(row, name, source_dir, out) for row in chosen]
    if not rows:
        skipped = [c.name for c in compositions if c.status == "skipped"]
        raise DataError(str(out), f"no source gave any instance (skipped: {', '.join(skipped) or 'none'})")
    save_build(out, release_ovibench(sorted(rows, key=lambda r: r["id"]), out))
    table = _write_composition(out, cfg, compositions, len(rows))
    print(table, flush=True)
    return out


def _check(cfg: OviTrainPaperBuild) -> None:
    if not cfg.sources:
        raise ConfigError("sources is empty: name at least one source (conf/builder/ovi_train_paper.yaml)")
    for name, source in cfg.sources.items():
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
            raise ConfigError(f"sources.{name}: a source name must be letters, digits, '_', '.' or '-'")
        missing = [kind.name for kind in InterruptionType if kind not in source.targets]
        if missing:
            raise ConfigError(f"sources.{name}.targets: give {', '.join(missing)} (an instance count each)")
        for kind, count in source.targets.items():
            if count < 0:
                raise ConfigError(
                    f"sources.{name}.targets.{InterruptionType(kind).name} must not be negative"
                )


def _absent_input(source: OviSourceBuild, target: dict[str, int]) -> str:
    """Why a source cannot be built ("" when it can)."""
    if not Path(source.captions).exists():
        return f"annotations not found: {source.captions}"
    if not Path(source.videos).is_dir():
        return f"videos directory not found: {source.videos}"
    if not sum(target.values()):
        return "every target is 0"
    return ""


def _source_build(
    cfg: OviTrainPaperBuild, name: str, source: OviSourceBuild, target: dict[str, int]
) -> OviTrainBuild:
    return OviTrainBuild(
        captions=source.captions,
        videos=source.videos,
        out=str(Path(cfg.out) / SOURCES_DIR / name),
        seed=cfg.seed,
        mix={InterruptionType(kind): float(target[kind]) for kind in TYPES},  # shares follow the targets
        forms=list(cfg.forms),
        format=source.format,
        source_options=dict(source.source_options),
        source=name,
        questions=paper_questions(cfg.questions),
    )


def paper_questions(questions: QuestionConfig) -> QuestionConfig:
    """The paper's recipe asks a VLM for the questions (OVIBench Fig. 3a): an endpoint given
    (``builder.questions.endpoint.base_url``) is used without ``backend=endpoint`` having to be said too;
    without one, the questions come from templates and composition.md says so."""
    if questions.backend is TextBackend.none and questions.endpoint.base_url:
        return replace(questions, backend=TextBackend.endpoint)
    return questions


def questions_line(questions: QuestionConfig) -> str:
    """How the questions were written, against the paper's VLM-generated ones."""
    if questions.backend is TextBackend.none:
        return (
            f"Questions: {NOT_THE_PAPERS}; give builder.questions.endpoint.base_url and "
            "builder.questions.model for the paper's"
        )
    seen = f"{questions.frames} frames of each segment" if questions.frames else "the captions only"
    return f"Questions: {questions.backend} model {questions.model}, shown {seen}"


def _build_source(build: OviTrainBuild) -> tuple[Path, str]:
    """Build one source, unless a finished build with the same settings is there; ``(its dir, status)``."""
    from data_builders.ovi_train import build_ovi_train

    out = Path(build.out)
    record_path = out / SOURCE_RECORD
    record = json.loads(
        json.dumps(
            {
                "build": asdict(build),
                "builder_version": BUILDER_VERSION,
                "phrasings_version": PHRASINGS_VERSION,
            }
        )
    )
    if record_path.is_file() and json.loads(record_path.read_text()) == record:
        print(f"{build.source}: reusing {out}", flush=True)
        return out, "reused"
    print(f"{build.source}: building {out}", flush=True)
    record_path.unlink(missing_ok=True)  # a rebuild cut short must not pass for a finished one
    build_ovi_train(build)  # rewrites every file; a model's question cache there is kept and reused
    write_json_atomic(record_path, record, indent=2)
    return out, "built"


def _sample(
    source_dir: Path, target: dict[str, int], seed: int, name: str
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The rows of a seeded draw of ``target[type]`` instances of each type (all forms of each), and the
    instances there were to draw from."""
    path = source_dir / OVI_FILE
    problems: list[str] = []
    numbered = read_jsonl(path, problems)
    if problems:
        raise DataErrors(path, problems)
    instances: dict[str, dict[str, list[dict]]] = {kind: {} for kind in TYPES}
    for number, row in numbered:
        instances[row["interruption_type"]].setdefault(_instance_id(row, path, number), []).append(row)
    chosen = []
    for kind in TYPES:
        ids = sorted(instances[kind])
        rng = np.random.default_rng([seed, zlib.crc32(f"{name}/{kind}".encode())])
        for i in sorted(rng.permutation(len(ids))[: target[kind]]):
            chosen += instances[kind][ids[i]]
    return chosen, {kind: len(instances[kind]) for kind in TYPES}


def _instance_id(row: dict[str, Any], path: Path, number: int) -> str:
    """The id the forms of one instance share: ``build_ovi_train`` ends each row's id with ``-<form>``."""
    suffix = f"-{row['format']}"
    if not row["id"].endswith(suffix):
        raise DataError(str(path), f"id {row['id']!r} does not end with its form {suffix!r}", number, "id")
    return row["id"].removesuffix(suffix)


def _moved(row: dict[str, Any], name: str, source_dir: Path, out: Path) -> dict[str, Any]:
    """The row with its video under ``<out>/videos/<name>/`` (linked there): sources may share file names."""
    file = row["video_path"].removeprefix("videos/")
    link_or_copy(source_dir / "videos" / file, out / "videos" / name / file)
    return {**row, "video_path": f"videos/{name}/{file}"}


def _write_composition(
    out: Path, cfg: OviTrainPaperBuild, compositions: list[SourceComposition], rows: int
) -> str:
    """Write composition.json and composition.md; return the markdown table."""
    total_target = {kind: sum(c.target[kind] for c in compositions) for kind in TYPES}
    total_achieved = {kind: sum(c.achieved.get(kind, 0) for c in compositions) for kind in TYPES}
    record = {
        "instance": INSTANCE,
        "forms": [str(form) for form in cfg.forms],
        "seed": cfg.seed,
        "rows": rows,
        "sources": {
            c.name: {
                "status": c.status,
                "note": c.note,
                "captions": cfg.sources[c.name].captions,
                "format": str(cfg.sources[c.name].format),
                "target": c.target,
                "available": c.available,
                "achieved": c.achieved,
            }
            for c in compositions
        },
        "total": {"target": total_target, "achieved": total_achieved},
        "questions": questions_line(paper_questions(cfg.questions)),
    }
    write_json_atomic(out / COMPOSITION_JSON, record, indent=2)
    table = _composition_table(compositions, total_target, total_achieved)
    forms = ", ".join(record["forms"])
    text = (
        f"# OVI-Train composition\n\nInstances ({INSTANCE}: {forms}; {rows} rows) by source and type, "
        f"achieved / target. Each source x type is a seeded draw (seed {cfg.seed}) of its target from the "
        "instances built; a source with too few gives all it has (marked short), never repeats.\n\n"
        f"{record['questions']}.\n\n{table}"
    )
    write_text_atomic(out / COMPOSITION_MD, text)
    return table


def _composition_table(
    compositions: list[SourceComposition], total_target: dict[str, int], total_achieved: dict[str, int]
) -> str:
    rows = []
    for c in compositions:
        cells = [_cell(c.achieved.get(kind, 0), c.target[kind]) for kind in TYPES]
        total = _cell(sum(c.achieved.values()), sum(c.target.values()))
        status = f"skipped: {c.note}" if c.status == "skipped" else c.status
        if c.status != "skipped" and c.achieved != c.target:
            built = ", ".join(f"{c.available[k]} {k}" for k in TYPES if c.available[k] < c.target[k])
            status += f"; short: only {built} built"
        rows.append([c.name, *cells, total, status])
    cells = [_cell(total_achieved[kind], total_target[kind]) for kind in TYPES]
    total = _cell(sum(total_achieved.values()), sum(total_target.values()))
    rows.append(["total", *cells, total, ""])
    return "\n".join(markdown_table(["source", *TYPES, "total", "status"], rows)) + "\n"


def _cell(achieved: int, target: int) -> str:
    return f"{achieved} / {target}" + (" short" if achieved < target else "")
