"""OVI-Train (and the synthetic OVIBench) from a source dataset's temporal annotations.

Following the paper's pipeline: caption segments are the scenes; each scene gets a question whose
answer is grounded in the segment, from templates (the default) or a VLM/LLM (see
:mod:`data_builders.questions`). The question arrives at the segment's end, so the evidence has been
seen; the answer is cut at a word offset between 30% and 70%, and an interruption of one of the three
types is inserted there, timed at a fixed speaking rate. The reference reaction is a stop
acknowledgement (Cancellation), the rest of the answer (False Trigger) or the answer to the corrected
question (Correction). Each instance is written in open and/or multiple-choice form, as rows of
:mod:`core.formats.ovi`, with the captions seen by the interruption as its ``visual_evidence``
(the LLM judge's text stand-in for the frames).

Every item can be interrupted: the interruption comes at least ``min_spoken_s`` after the question (3
answer tokens at the offline simulation's 3 tokens/s), unless the whole answer is too short, and may
come after the video has ended (a user can interrupt an answer to a question asked at the last frame).

The user's words come from a bank of :mod:`data_builders.phrasings`: OVI-Train's own (``phrase_bank:
train``), or, for the OVIBench twin, the disjoint evaluation bank plus a share from the paraphrased
(casual spoken) bank; each row records its bank as ``phrasing``.

With templates (:mod:`data_builders.questions`), each scene offers questions of several kinds (what
happens in a window, what the person does, when an event happens, what happens next / just before,
which event comes first, and objects of a closed colour/shape vocabulary); the build takes the kind
asked least so far, so no kind dominates, and ``stats.md`` shows the distribution. A Correction switches
to another question: another object for an object question, else another question seen by then (a
time-window one phrased by its window). Each row records its ``question_kind`` and the source's own
ids of the annotations it rests on (``source_annotations``, e.g. QVHighlights' ``qid``).

The five source readers of :mod:`data_builders.sources` (ActivityNet Captions, QVHighlights, YouCook2,
UCF-Crime, MovieChat; the config's ``format`` picks one) turn each dataset's annotations into the same
captioned segments. A caption with its own question (MovieChat's breakpoint QA) is asked that question,
and a correction to it asks another such question.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from core.errors import ConfigError, DataError
from core.files import crosstab_markdown, link_or_copy
from core.formats.ovi import LETTERS, release_ovibench
from core.vocab import INTERRUPTION_TYPES, ITEM_FORMS, InterruptionType, by_type
from data_builders.cli_config import OviTrainBuild
from data_builders.outputs import BuildReport, save_build
from data_builders.phrasings import BANKS, PHRASINGS_VERSION, PhraseBank, Phrasings
from data_builders.questions import (
    NOT_THE_PAPERS,
    QA,
    QuestionContext,
    QuestionGenerator,
    as_sentence,
    choose_question,
    make_question_generator,
    video_questions,
)
from data_builders.sources import read_source
from data_builders.sources.captions import Caption, CaptionedVideo


@dataclass(frozen=True)
class _Scene:
    """A question asked when its evidence has been seen (``qa.end``; ``qa.segment`` is the row's segment);
    ``caption`` is the scene's anchor, whose index the row id carries."""

    video: CaptionedVideo
    caption: Caption
    qa: QA
    video_qas: tuple[QA, ...]  # every question the video supports: corrections and wrong options


def _scenes(video: CaptionedVideo, qas: list[QA], asked: Counter, rng: np.random.Generator) -> list[_Scene]:
    """One question per scene (a distinct caption window, or a caption with its own question), chosen
    among the scene's options as the kind asked least so far in the build (``asked``)."""
    by_index = {cap.index: cap for cap in video.captions}
    options: dict[int, list[QA]] = {}
    for qa in qas:
        options.setdefault(qa.anchor, []).append(qa)
    return [
        _Scene(video, by_index[anchor], choose_question(scene_qas, asked, rng), tuple(qas))
        for anchor, scene_qas in options.items()
    ]


def _corrected_qa(scene: _Scene, t_i: float, rng: np.random.Generator) -> QA | None:
    """Another question of the same kind to switch to, answerable from the video up to ``t_i``."""
    asked = scene.qa
    candidates = [
        qa
        for qa in scene.video_qas
        if (qa.name is None) == (asked.name is None)
        and qa.end <= t_i
        and not qa.captions & asked.captions
        and (qa.name is None or qa.name != asked.name)
    ]
    return candidates[int(rng.integers(len(candidates)))] if candidates else None


def _correction(corrected: QA, phrases: Phrasings, rng: np.random.Generator) -> str:
    """The user's switch to ``corrected``: another object, another time window, or another question."""
    if corrected.name is not None:
        return _pick(phrases.correction_object, rng).format(corrected.name)
    if corrected.kind != "window":  # the source's own question, or a generated one
        return phrases.question(_pick(phrases.correction_question, rng), corrected.question)
    return _pick(phrases.correction_time, rng).format(*corrected.window)


def _pick(options: Sequence[str], rng: np.random.Generator) -> str:
    return options[int(rng.integers(len(options)))]


def mix_shares(mix: Mapping[InterruptionType, float]) -> dict[str, float]:
    """Each interruption type's share of a mix of weights keyed by type (a type left out weighs 0).

    Raises:
        ConfigError: a negative weight, or all zero.
    """
    weights = {kind.value: float(weight) for kind, weight in by_type(mix).items()}
    if min(weights.values()) < 0 or sum(weights.values()) <= 0:
        raise ConfigError(f"mix needs non-negative weights, not all zero, got {_named(mix)}")
    total = sum(weights.values())
    return {kind: weight / total for kind, weight in weights.items()}


def _named(mix: Mapping[InterruptionType, float]) -> dict[str, float]:
    return {InterruptionType(kind).name: weight for kind, weight in mix.items()}


def _choose_type(
    feasible: list[str], shares: dict[str, float], counts: Counter, rng: np.random.Generator
) -> str | None:
    # The type furthest behind its target share wins, so the mix holds even when Correction is
    # sometimes impossible; ties are broken at random.
    n = sum(counts.values()) + 1
    deficit = {t: shares[t] * n - counts[t] for t in feasible if shares[t] > 0}
    if not deficit:
        return None
    best = max(deficit.values())
    return _pick([t for t in deficit if deficit[t] == best], rng)


@dataclass
class _Tally:
    """What the build has made so far: instances per type, and per (type, phrasing)."""

    types: Counter = field(default_factory=Counter)
    phrasings: Counter = field(default_factory=Counter)


def _interruption_point(
    n_words: int, words_per_second: float, min_spoken_s: float, rng: np.random.Generator
) -> tuple[int, float]:
    """Words spoken before the interruption (30-70% of the answer) and its delay after the question.

    ``cut`` words are spoken by ``cut / rate`` s and the next one by ``(cut + 1) / rate`` s; any delay in
    between interrupts after exactly ``cut`` words. The cut takes at least the words that leave room for
    a delay of ``min_spoken_s``, and the delay is at least that; an answer too short for it is
    interrupted just before its next word ends.
    """
    least = min(n_words - 1, max(1, math.floor(min_spoken_s * words_per_second + 1e-9)))
    cut = min(max(least, round(rng.uniform(0.3, 0.7) * n_words)), n_words - 1)
    next_word_s = (cut + 1) / words_per_second
    return cut, max(cut / words_per_second, min(min_spoken_s, next_word_s - 1e-3))


def _phrasing(kind: str, cfg: OviTrainBuild, tally: _Tally) -> str:
    """The bank that phrases the next instance of ``kind``: a training build's own; in an evaluation
    build the paraphrased bank for ``paraphrased_share`` of each type's instances, the rest eval."""
    if cfg.phrase_bank == PhraseBank.train:
        return "train"
    # Counted per type, so every type gets its share (a share of all instances would follow the
    # periodic order in which the mix picks types, and could fall on one type only).
    n = sum(tally.phrasings[kind, bank] for bank in ("eval", "paraphrased")) + 1
    due = math.floor(cfg.paraphrased_share * n + 0.5)
    return "paraphrased" if tally.phrasings[kind, "paraphrased"] < due else "eval"


def visual_evidence(video: CaptionedVideo, t_i: float) -> str:
    """What the video has shown by ``t_i``: the captions that start before it, in time order, as one text."""
    seen = sorted((c for c in video.captions if c.start < t_i), key=lambda c: (c.start, c.end, c.index))
    return " ".join(as_sentence(c.sentence) for c in seen)


def _instance(
    scene: _Scene, cfg: OviTrainBuild, shares: dict, tally: _Tally, rng: np.random.Generator
) -> dict | None:
    """Cut the answer, choose the interruption type and its phrasing, and build the reference reaction.

    Returns:
        The instance's row fields, or None when no type of the mix fits (a mix of only
        Correction on a scene with nothing else seen by the interruption).
    """
    words = scene.qa.answer.split()
    cut, delay = _interruption_point(len(words), cfg.words_per_second, cfg.min_spoken_s, rng)
    t_q = round(scene.qa.end, 3)
    t_i = round(t_q + delay, 3)  # may pass the video's end: the user interrupts after the last frame
    corrected = _corrected_qa(scene, t_i, rng)
    possible = [t for t in INTERRUPTION_TYPES if t != InterruptionType.correction or corrected]
    kind = _choose_type(possible, shares, tally.types, rng)
    if kind is None:
        return None
    phrasing = _phrasing(kind, cfg, tally)
    tally.types[kind] += 1
    tally.phrasings[kind, phrasing] += 1
    phrases, rest = BANKS[phrasing], " ".join(words[cut:])
    if kind == "Cancellation":
        utterance, reaction = _pick(phrases.cancellations, rng), _pick(phrases.acknowledgements, rng)
    elif kind == "False Trigger":
        utterance, reaction = _pick(phrases.false_triggers, rng), rest
    else:
        utterance, reaction = _correction(corrected, phrases, rng), corrected.answer
    corrected = corrected if kind == "Correction" else None  # the distractors avoid only a real switch
    return {
        "question_time": t_q,
        "question": scene.qa.question,
        "answer": scene.qa.answer,
        "interruption_time": t_i,
        "partial_answer": " ".join(words[:cut]),
        "interruption_type": kind,
        "interruption": utterance,
        "reference_reaction": reaction,
        "visual_evidence": visual_evidence(scene.video, t_i),
        "phrasing": phrasing,
        "_distractors": _distractors(scene, kind, reaction, rest, corrected, phrases, rng),
    }


def _distractors(
    scene: _Scene,
    kind: str,
    right: str,
    rest: str,
    corrected: QA | None,
    phrases: Phrasings,
    rng: np.random.Generator,
) -> list[str]:
    """Three wrong continuations: what the other types would have said, and a restart from scratch.

    The "answer to something else" option never shares evidence with the asked or corrected question
    and never names the corrected object, so exactly one option is right. Stock options come from the
    instance's own bank.
    """
    used = scene.qa.captions | (corrected.captions if corrected else frozenset())
    avoid = corrected.names if corrected else frozenset()
    unrelated = [qa.answer for qa in scene.video_qas if not qa.captions & used and not qa.names & avoid]
    fallbacks = [phrases.fallbacks[i] for i in rng.permutation(len(phrases.fallbacks))]
    elsewhere = _pick(unrelated, rng) if unrelated else fallbacks[0]
    # Another stop acknowledgement would also be right for a Cancellation: offer one only otherwise.
    ack = [] if kind == "Cancellation" else [_pick(phrases.acknowledgements, rng)]
    candidates = [rest, *ack, elsewhere, scene.qa.answer, *fallbacks]
    chosen: list[str] = []
    for text in candidates:
        if text != right and text not in chosen and len(chosen) < 3:
            chosen.append(text)
    return chosen


def _mcq_fields(instance: dict, letters: Counter, rng: np.random.Generator) -> dict[str, Any]:
    """Options with the right continuation at the least-used letter (ties at random)."""
    others = [instance["_distractors"][i] for i in rng.permutation(3)]
    fewest = min(letters[x] for x in LETTERS)
    letter = _pick([x for x in LETTERS if letters[x] == fewest], rng)
    letters[letter] += 1
    others.insert(LETTERS.index(letter), instance["reference_reaction"])
    return {"options": others, "answer_letter": letter}


def build_ovi_items(
    cfg: OviTrainBuild, questions: QuestionGenerator | None = None
) -> tuple[list[dict[str, Any]], list[str]]:
    """Build OVIBench-format rows from ``cfg.captions`` and the videos under ``cfg.videos``.

    Rows store ``videos/<video file>``, where the video file is its path under ``cfg.videos``
    (``<key>.mp4`` unless the reader found it elsewhere).

    Args:
        cfg: the build's settings (``out`` is read only for a model's default question cache).
        questions: the question generator; ``None``: the one ``cfg.questions`` names.

    Returns:
        ``(rows, quarantined)``: quarantine reasons for bad segments, missing videos, segments that
        got no question, and answers too short to interrupt (fewer than two words).

    Raises:
        ConfigError: a bad ``mix``, ``forms``, ``format``, ``source_options``, timing, phrasing or
            question setting.
        DataError: an unreadable or malformed annotation file (every bad entry listed).
        TextModelError: a model backend failed on the first 3 segments it was asked about.
    """
    shares = mix_shares(cfg.mix)
    rows, quarantined, _ = _items(cfg, shares, questions or make_question_generator(cfg.questions, cfg.out))
    return rows, quarantined


def _items(
    cfg: OviTrainBuild, shares: dict[str, float], questions: QuestionGenerator
) -> tuple[list[dict[str, Any]], list[str], int]:
    """:func:`build_ovi_items` with the mix already normalised; also how many segment ends were moved onto
    their video's end (past its duration by no more than the annotation's rounding)."""
    _check_settings(cfg)
    rng, videos_dir = np.random.default_rng(cfg.seed), Path(cfg.videos)
    source = str(cfg.source or cfg.format)
    videos, quarantined = read_source(cfg.format, cfg.captions, videos_dir, **cfg.source_options)
    moved_to_end = sum(caption.moved_to_end for video in videos for caption in video.captions)
    present = []
    for video in videos:
        if not (videos_dir / video.file).is_file():
            quarantined.append(f"{video.key}: video not found in {videos_dir} (as {video.file})")
            continue
        present.append((video, QuestionContext(videos_dir / video.file)))
    questions.prefetch(present)  # concurrent model requests, when the generator is set up for them
    scenes, asked = [], Counter()
    for video, context in present:
        scenes += _scenes(video, video_questions(questions, video, context, quarantined), asked, rng)
    tally, letters, rows = _Tally(), Counter(), []
    for i in rng.permutation(len(scenes)):
        scene = scenes[i]
        if len(scene.qa.answer.split()) < 2:  # no word boundary inside it to interrupt at
            quarantined.append(f"{scene.video.key}[{scene.caption.index}]: answer too short to interrupt")
            continue
        instance = _instance(scene, cfg, shares, tally, rng)
        if instance is None:
            quarantined.append(
                f"{scene.video.key}[{scene.caption.index}]: no interruption type of the mix fits"
            )
            continue
        base = {
            "video_path": f"videos/{scene.video.file}",
            "duration": scene.video.duration,
            "source": source,
            "source_id": scene.video.key,
            "source_annotations": _annotations(scene),
            "segment": [round(t, 3) for t in scene.qa.segment],  # as question_time: float noise gone
            "question_kind": scene.qa.kind,
            **{k: v for k, v in instance.items() if not k.startswith("_")},
        }
        for form in map(str, cfg.forms):
            extra = _mcq_fields(instance, letters, rng) if form == "mcq" else {}
            row_id = f"{source}-{scene.video.key}-{scene.caption.index:03d}-{form}"
            rows.append({"id": row_id, **base, "format": form, **extra})
    rows.sort(key=lambda r: r["id"])
    return rows, quarantined, moved_to_end


def _annotations(scene: _Scene) -> list[dict[str, Any]]:
    """The source's own ids of the annotations the question rests on (``Caption.ref``), in caption order."""
    by_index = {cap.index: cap for cap in scene.video.captions}
    return [dict(by_index[i].ref) for i in sorted(scene.qa.captions)]


def _check_settings(cfg: OviTrainBuild) -> None:
    if not set(cfg.forms) <= set(ITEM_FORMS) or not cfg.forms:
        raise ConfigError(f"forms must be a non-empty subset of {ITEM_FORMS}, got {[*map(str, cfg.forms)]}")
    if cfg.words_per_second <= 0 or cfg.min_spoken_s < 0:
        raise ConfigError(
            f"words_per_second must be positive and min_spoken_s not negative, got {cfg.words_per_second}, "
            f"{cfg.min_spoken_s}"
        )
    if not 0 <= cfg.paraphrased_share <= 1:
        raise ConfigError(f"paraphrased_share must be in [0, 1], got {cfg.paraphrased_share}")
    if cfg.phrase_bank not in tuple(PhraseBank):
        raise ConfigError(f"phrase_bank must be one of {', '.join(PhraseBank)}, got {cfg.phrase_bank!r}")


def build_ovi_train(cfg: OviTrainBuild) -> Path:
    """Write ``ovibench.jsonl``, ``videos/``, ``hf/``, ``stats.md`` and ``build_info.json`` to ``cfg.out``.

    Serves both OVI-Train and, on held-out videos, the synthetic OVIBench. Rows as in
    :func:`build_ovi_items`; a model's question cache defaults to ``<out>/question_cache.jsonl``. The HF
    dataset holds what the benchmark loader makes of the written files
    (:func:`~core.formats.ovi.release_ovibench`), so training sees exactly what it produces.

    Returns:
        ``cfg.out`` as a path.
    """
    out_dir = Path(cfg.out)
    shares = mix_shares(cfg.mix)
    generator = make_question_generator(cfg.questions, out_dir)
    rows, quarantined, moved_to_end = _items(cfg, shares, generator)
    if not rows:
        raise DataError(str(cfg.captions), f"no usable caption segments ({len(quarantined)} quarantined)")
    for file in sorted({r["video_path"].removeprefix("videos/") for r in rows}):
        link_or_copy(Path(cfg.videos) / file, out_dir / "videos" / file)
    samples = release_ovibench(rows, out_dir)
    settings = {
        "mix": shares,
        "forms": [str(form) for form in cfg.forms],
        "words_per_second": cfg.words_per_second,
        "min_spoken_s": cfg.min_spoken_s,
        "phrasings": _phrasing_settings(cfg),
        "source": str(cfg.source or cfg.format),
        "source_format": str(cfg.format),
        "source_options": dict(cfg.source_options),
        "questions": generator.summary(),
    }
    report = _report(
        rows,
        quarantined,
        seed=cfg.seed,
        captions=str(cfg.captions),
        settings=settings,
        segment_ends_moved_to_video_end=moved_to_end,
    )
    return save_build(out_dir, samples, report)


def _phrasing_settings(cfg: OviTrainBuild) -> dict[str, Any]:
    evaluation = cfg.phrase_bank == PhraseBank.eval
    return {
        "version": PHRASINGS_VERSION,
        "bank": str(cfg.phrase_bank),
        "paraphrased_share": cfg.paraphrased_share if evaluation else 0.0,
    }


def _kind_shares(rows: list[dict]) -> str:
    """Each question kind's share of the rows, largest first: "window 24.1%, after 19.0%, ..."."""
    kinds = Counter(r["question_kind"] for r in rows)
    return ", ".join(f"{kind} {n / len(rows):.1%}" for kind, n in kinds.most_common())


def _report(rows: list[dict], quarantined: list[str], **info: Any) -> BuildReport:
    by_source = crosstab_markdown(((r["source"], r["interruption_type"]) for r in rows), "source")
    by_form = crosstab_markdown(((r["format"], r["interruption_type"]) for r in rows), "format")
    by_phrasing = crosstab_markdown(((r["phrasing"], r["interruption_type"]) for r in rows), "phrasing")
    by_kind = crosstab_markdown(((r["question_kind"], r["interruption_type"]) for r in rows), "question kind")
    phrasings = info["settings"]["phrasings"]
    stats = f"# OVI items\n\nInstances by source x type.\n\n{by_source}\n"
    stats += f"Instances by form x type.\n\n{by_form}\n"
    stats += f"Rows by phrasing x type (bank {phrasings['bank']}, phrasings v{phrasings['version']}).\n\n"
    stats += f"{by_phrasing}\nRows by question kind x type ({_kind_shares(rows)}).\n\n{by_kind}\n"
    stats += f"Quarantined: {len(quarantined)}\n"
    moved = info["segment_ends_moved_to_video_end"]
    stats += (
        f"Segment ends moved onto the video's end: {moved} (past the stated duration by no more than the "
        "annotation's own rounding)\n"
    )
    questions = info["settings"].get("questions", {})
    if questions.get("backend", "template") != "template":
        counts = ", ".join(f"{k} {questions[k]}" for k in ("generated", "from_cache", "failed", "errors"))
        stats += f"Questions: {questions['backend']} ({counts})\n"
    else:  # the paper's are VLM-generated (OVIBench Fig. 3a)
        stats += f"Questions: {NOT_THE_PAPERS} (questions.backend=endpoint)\n"
    summary = {
        **info,
        "rows": len(rows),
        "videos": len({r["source_id"] for r in rows}),
        "by_type": dict(Counter(r["interruption_type"] for r in rows)),
        "by_form": dict(Counter(r["format"] for r in rows)),
        "by_phrasing": dict(Counter(r["phrasing"] for r in rows)),
        "by_question_kind": dict(Counter(r["question_kind"] for r in rows)),
        "quarantined": len(quarantined),
        "quarantine_reasons": quarantined,
    }
    return BuildReport(stats, summary)
