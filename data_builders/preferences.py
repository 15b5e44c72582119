"""Preference pairs from OVI rows: the conversation up to the interruption, the right reaction (chosen) and
each wrong one (rejected), labelled by what it does wrong.

For every OVI instance we know the right reaction and the wrong ones: going on after a cancel, stopping
or restarting after a false trigger, keeping the old answer after a correction. A wrong reaction is one of
four behaviours, read off its text and the row:

- ``continued``: the rest of the interrupted answer (right after a False Trigger);
- ``stopped``: a stop acknowledgement from any phrase bank (right after a Cancellation);
- ``restarted``: the whole original answer, from its start;
- ``off_topic``: anything else the MCQ form offers (an answer to another question, a stock non-answer).

An instance is written in open and/or MCQ form (data_builders/ovi_train.py); both rows share one prompt.
Its wrong reactions are the MCQ distractors (when the instance has an MCQ row) and the three derived from
the row itself (rest of the answer, whole answer, the bank's first acknowledgement), at most one per
behaviour, MCQ distractors first. These pairs take the open form's prompt (question over the video so far,
partial answer, interruption with its new frames) and teach the reaction itself. An MCQ row also gives pairs
in its own form (options shown; chosen ``"B (Correction)"``, rejected each wrong option's letter with the
type; ids ``<instance>-mcq-<error>``), so the answer format the benchmarks score stays in the preference data.

The pairs are :class:`~core.pairs.PreferencePair` s, stored as an HF dataset of rows: a
:class:`~core.sample.Sample` row ending with the chosen reaction, plus ``rejected``, ``error``, ``behaviour``
and ``source_rows`` (provenance: the OVI row ids). KTO trains on the same pairs unpaired
(:func:`core.pairs.unpaired`): each right reaction once, each wrong one once, each a conversation ending with
it and labelled desirable or not.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from core.errors import DataError
from core.files import atomic_dir, crosstab_markdown, write_reports
from core.formats.ovi import LETTERS
from core.pairs import PreferencePair
from core.sample import Part, Sample, Turn
from data_builders.cli_config import ExportBuild, PreferenceBuild
from data_builders.export import ExportResult, export_conversations, is_pairs, read_rows, saved_dataset
from data_builders.outputs import HF_DIR
from data_builders.phrasings import BANKS

# The right reaction's behaviour where it is one of the four (a Correction's is the new answer).
RIGHT_BEHAVIOUR = {"Cancellation": "stopped", "False Trigger": "continued"}
ERRORS = {
    ("Cancellation", "continued"): "continued_after_cancel",
    ("Cancellation", "restarted"): "restarted_after_cancel",
    ("Cancellation", "off_topic"): "off_topic_after_cancel",
    ("False Trigger", "stopped"): "stopped_after_false_trigger",
    ("False Trigger", "restarted"): "restarted_after_false_trigger",
    ("False Trigger", "off_topic"): "off_topic_after_false_trigger",
    ("Correction", "continued"): "kept_old_answer_after_correction",
    ("Correction", "restarted"): "restarted_old_answer_after_correction",
    ("Correction", "stopped"): "stopped_after_correction",
    ("Correction", "off_topic"): "off_topic_after_correction",
}
_ACKNOWLEDGEMENTS = frozenset(a for bank in BANKS.values() for a in bank.acknowledgements)
_NEEDED_META = (
    "interruption_type",
    "reference_reaction",
    "answer",
    "partial_answer",
    "interruption",
    "format",
)


@dataclass
class PairBuild:
    """What :func:`pairs_from_samples` made, and which samples it left out (``(id, reason)``)."""

    pairs: list[PreferencePair]
    skipped: list[tuple[str, str]]


def pairs_from_samples(samples: Iterable[Sample], where: str = "samples") -> PairBuild:
    """Preference pairs from OVI samples (``load_ovibench`` or an OVI-Train ``hf/`` dataset).

    Samples of another task (V2P) are left out and listed. ``where`` names the input in errors.

    Raises:
        DataError: an OVI sample lacks a field the pairs need (naming the sample and the field).
    """
    instances: dict[tuple, list[Sample]] = {}
    skipped = []
    for sample in samples:
        if sample.task != "ovi":
            skipped.append((sample.id, f"task {sample.task!r}: pairs are made from OVI samples only"))
            continue
        missing = [k for k in _NEEDED_META if not isinstance(sample.meta.get(k), str)]
        if missing:
            raise DataError(where, f"sample {sample.id!r}: meta field {missing[0]!r} missing or not a string")
        instances.setdefault(_instance_key(sample), []).append(sample)
    pairs = [pair for rows in instances.values() for pair in _instance_pairs(rows)]
    pairs.sort(key=lambda p: p.id)
    return PairBuild(pairs, skipped)


def _instance_key(sample: Sample) -> tuple:
    """What the open and MCQ rows of one instance share."""
    meta = sample.meta
    return (
        sample.source,
        sample.source_id,
        meta["question"],
        meta["interruption_time"],
        meta["interruption"],
    )


def _instance_pairs(rows: list[Sample]) -> list[PreferencePair]:
    rows = sorted(rows, key=lambda s: (s.meta["format"] != "mcq", s.id))  # MCQ distractors first
    meta = rows[0].meta
    kind, right = meta["interruption_type"], meta["reference_reaction"]
    stem = min(s.id.removesuffix(f"-{s.meta['format']}") for s in rows)
    prompt = _open_prompt(rows[0])
    by_behaviour: dict[str, str] = {}
    for text in _candidates(rows):
        behaviour = _behaviour(text, meta)
        if text != right and behaviour != RIGHT_BEHAVIOUR.get(kind) and behaviour not in by_behaviour:
            by_behaviour[behaviour] = text
    pairs = []
    for behaviour, text in by_behaviour.items():
        error = ERRORS[kind, behaviour]
        sample = replace(prompt, id=f"{stem}-{error}", meta={**prompt.meta, "error": error})
        pairs.append(PreferencePair(sample, text, error, behaviour, sorted(s.id for s in rows)))
    for sample in rows:
        if sample.meta["format"] == "mcq":
            pairs += _mcq_pairs(sample, stem, sorted(s.id for s in rows))
    return pairs


def _mcq_pairs(sample: Sample, stem: str, source_rows: list[str]) -> list[PreferencePair]:
    """The MCQ row as pairs in its own form (options shown): the right answer (``"B (Correction)"``) chosen,
    each wrong option's letter with the type rejected, one per behaviour; the answer format stays trained."""
    meta = sample.meta
    kind, by_behaviour = meta["interruption_type"], {}
    for letter, text in zip(LETTERS, meta.get("options") or [], strict=False):
        behaviour = _behaviour(text, meta)
        if letter != meta.get("answer_letter") and behaviour != RIGHT_BEHAVIOUR.get(kind):
            by_behaviour.setdefault(behaviour, f"{letter} ({kind})")
    pairs = []
    for behaviour, rejected in by_behaviour.items():
        error = ERRORS[kind, behaviour]
        pair_sample = replace(sample, id=f"{stem}-mcq-{error}", meta={**meta, "error": error})
        pairs.append(PreferencePair(pair_sample, rejected, error, behaviour, source_rows))
    return pairs


def _candidates(rows: list[Sample]) -> list[str]:
    """Wrong-reaction texts: every MCQ option, then those derived from the row."""
    meta = rows[0].meta
    options = [o for s in rows if s.meta["format"] == "mcq" for o in s.meta.get("options") or []]
    bank = BANKS.get(meta.get("phrasing", "train"), BANKS["train"])
    return [*options, _rest(meta), meta["answer"], bank.acknowledgements[0]]


def _rest(meta: dict[str, Any]) -> str:
    """The part of the answer not yet spoken at the interruption."""
    return " ".join(meta["answer"].split()[len(meta["partial_answer"].split()) :])


def _behaviour(text: str, meta: dict[str, Any]) -> str:
    if text == _rest(meta):
        return "continued"
    if text == meta["answer"]:
        return "restarted"
    if text in _ACKNOWLEDGEMENTS:
        return "stopped"
    return "off_topic"


def _open_prompt(sample: Sample) -> Sample:
    """The sample in open form: the interruption turn without the MCQ options, the reference reaction as
    the final (trained) turn; meta without the MCQ fields."""
    meta = {k: v for k, v in sample.meta.items() if k not in ("options", "answer_letter")}
    meta["format"] = "open"
    user, partial, interruption = sample.turns[:3]
    media = [p for p in interruption.parts if p.type != "text"]
    turns = [
        user,
        partial,
        Turn("user", [*media, Part.txt(meta["interruption"])]),
        Turn("assistant", [Part.txt(meta["reference_reaction"])], loss=True),
    ]
    return replace(sample, turns=turns, meta=meta)


def load_pairs(dataset_dir: str | Path) -> list[PreferencePair]:
    """Pairs from an HF dataset directory: a saved pair dataset, or OVI samples to make pairs from.

    Raises:
        DataError: the directory is not a saved dataset, or a row is malformed (naming the row).
    """
    rows = saved_dataset(dataset_dir)
    try:
        if "rejected" in rows.column_names:
            return [PreferencePair.from_row(row) for row in rows]
        return pairs_from_samples((Sample.from_row(row) for row in rows), str(dataset_dir)).pairs
    except (KeyError, TypeError, ValueError) as err:
        raise DataError(str(dataset_dir), f"malformed row: {err!r}") from None


def save_pairs(pairs: list[PreferencePair], path: Path) -> None:
    """Save pairs as an HF dataset (``load_pairs`` reads it back)."""
    import datasets

    dataset = datasets.Dataset.from_list([p.to_row() for p in pairs])
    with atomic_dir(path) as tmp:
        dataset.save_to_disk(str(tmp))


def pair_stats(pairs: list[PreferencePair]) -> str:
    """Pairs by error x interruption type, as a markdown table."""
    return crosstab_markdown(((p.error, p.interruption_type) for p in pairs), "error")


def build_preferences(cfg: PreferenceBuild) -> Path:
    """Write ``<out>/hf`` (the pairs), ``stats.md`` and ``build_info.json`` from the OVI samples in
    ``cfg.dataset`` (an OVI-Train ``hf/`` directory).

    Returns:
        ``cfg.out`` as a path.

    Raises:
        DataError: ``cfg.dataset`` is not a saved dataset of OVI samples, or no pair could be made.
    """
    rows = saved_dataset(cfg.dataset)
    built = pairs_from_samples((Sample.from_row(row) for row in rows), str(cfg.dataset))
    if not built.pairs:
        raise DataError(str(cfg.dataset), f"no preference pair could be made ({len(built.skipped)} left out)")
    out_dir = Path(cfg.out)
    save_pairs(built.pairs, out_dir / HF_DIR)
    stats = f"# Preference pairs\n\nPairs by error x interruption type.\n\n{pair_stats(built.pairs)}\n"
    stats += f"Samples left out: {len(built.skipped)}\n"
    info = {
        "dataset": str(cfg.dataset),
        "pairs": len(built.pairs),
        "instances": len({tuple(p.source_rows) for p in built.pairs}),
        "by_type": dict(Counter(p.interruption_type for p in built.pairs)),
        "by_error": dict(Counter(p.error for p in built.pairs)),
        "skipped": [{"id": i, "reason": r} for i, r in built.skipped],
    }
    write_reports(out_dir, stats, info)
    return out_dir


def export_pair_dataset(cfg: ExportBuild) -> ExportResult:
    """:func:`export_pairs` for ``cfg.dataset``, a saved dataset of pairs (``builder=preference``).

    Raises:
        DataError: ``cfg.dataset`` holds no preference pairs.
    """
    rows = read_rows(cfg)
    if not is_pairs(rows):
        raise DataError(str(cfg.dataset), "not preference pairs (no 'rejected' column)")
    return export_pairs([PreferencePair.from_row(row) for row in rows], cfg)


def export_pairs(pairs: list[PreferencePair], cfg: ExportBuild) -> ExportResult:
    """Write pairs as LLaMA-Factory (sharegpt, ``ranking: true``: ``messages`` up to the reaction,
    ``chosen`` and ``rejected`` messages) or ms-swift (``messages`` ending with the chosen reaction, and
    ``rejected_response``) preference data under ``cfg.out``, by the path samples take
    (:func:`~data_builders.export.export_conversations`).

    Raises:
        ConfigError: an unknown format.
        DataError: no pair could be exported.
    """
    items = ((pair.sample, {"rejected": pair.rejected, "error": pair.error}) for pair in pairs)
    return export_conversations(items, cfg, pairs=True)
