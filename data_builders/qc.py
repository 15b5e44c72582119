"""Quality control of multiple-choice rows in the V2P release format, as V2P-Bench built its data.

Steps, in the order :func:`run_qc` applies them; each returns a :class:`QcStep` saying what it kept
and what it removed, by id and with a reason, for ``stats.md`` and ``build_info.json``:

1. ``option_length`` — drop a question whose options differ too much in length (a long right answer
   is a give-away). Lengths are counted in characters, each at least ``option_length_floor``, so
   short words ("up", "3", "red") never trip it; the question goes when the longest is more than
   ``option_length_ratio`` times the shortest. ``None`` turns it off.
2. ``blind`` — text-only models answer each question ``rounds`` times without the video or the
   frame; a question every model gets right in every round is answerable from the words alone and is
   dropped. V2P-Bench asked two models (GPT-4o and Gemini-1.5-Pro, two low-temperature rounds each):
   ``builder.qc.blind.first`` and ``builder.qc.blind.second`` are each a text model (``backend``:
   ``none``, ``local`` — a Hugging Face model directory, causal LM or a VLM used text-only — or
   ``endpoint`` — an OpenAI-compatible ``/chat/completions`` server, each on its own server if need
   be). The filter is on whenever at least one of them is configured, and off (and reported so) when
   neither is. Round ``r`` shows the options rotated by ``r`` places, so greedy decoding still asks two
   different questions and a model that always says "A" cannot pass. A reply with no option letter
   counts as wrong.
3. ``shuffle`` — option order shuffled.
4. ``letters`` — answer letters balanced (each row takes the least used letter it can; rows with
   fewer options go first), which puts every letter within 3 points of uniform whenever the mix
   of option counts allows it; the report gives the shares and the largest deviation.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.errors import ConfigError
from core.formats.v2p import parse_options, render_question
from core.text_models import TextModel, TextModelConfig, TextModelError, make_text_model

_IDS_IN_STATS = 20  # removed ids listed in stats.md per step; build_info.json has them all


@dataclass
class BlindModelConfig(TextModelConfig):
    """One blind-filter model (``builder.qc.blind.first.*``, ``builder.qc.blind.second.*``): the keys of
    a text model, :mod:`core.text_models`; ``backend: none`` leaves it out."""

    max_tokens: int = 16  # a letter, perhaps with a few words


@dataclass
class BlindFilterConfig:
    """The blind filter's models and how they are asked (``builder.qc.blind.*``); no model: no filter."""

    first: BlindModelConfig = field(default_factory=BlindModelConfig)  # V2P-Bench: GPT-4o
    second: BlindModelConfig = field(default_factory=BlindModelConfig)  # V2P-Bench: Gemini-1.5-Pro
    rounds: int = 2  # a question every model answers right in every round is dropped
    rotate_options: bool = True  # round r shows the options rotated by r places


@dataclass
class QcConfig:
    """Quality-control settings (``builder.qc.*`` on the command line)."""

    blind: BlindFilterConfig = field(default_factory=BlindFilterConfig)  # on when a model is configured
    option_length_ratio: float | None = 2.5  # drop if longest option > ratio x shortest; None: no such rule
    option_length_floor: int = 8  # option lengths count as at least this many characters
    shuffle_options: bool = True  # shuffle each question's options
    balance_letters: bool = True  # answer letters within 3 points of uniform where the option counts allow


@dataclass
class QcStep:
    """What one step did: the rows it kept and ``(id, reason)`` for each row it removed."""

    name: str
    kept: list[dict[str, Any]]
    removed: list[tuple[str, str]] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    def report(self) -> dict[str, Any]:
        """The machine-readable record for ``build_info.json`` (all removed ids and reasons)."""
        removed = [{"id": i, "reason": r} for i, r in self.removed]
        return {"step": self.name, "kept": len(self.kept), "removed": removed, **self.info}


# --- the steps --------------------------------------------------------------------------------


def option_length_filter(rows: list[dict[str, Any]], max_ratio: float | None, floor: int) -> QcStep:
    """Drop rows whose longest option is more than ``max_ratio`` times the shortest (lengths >= ``floor``)."""
    if max_ratio is None:
        return QcStep("option_length", list(rows), info={"skipped": True})
    kept, removed = [], []
    for row in rows:
        lengths = [max(floor, len(o)) for o in parse_options(row["question"])[1]]
        ratio = max(lengths) / min(lengths)
        if ratio > max_ratio:
            removed.append((str(row["id"]), f"option lengths ratio {ratio:.2f} > {max_ratio}"))
        else:
            kept.append(row)
    return QcStep("option_length", kept, removed, {"max_ratio": max_ratio, "floor": floor})


def first_letter(reply: str, n_options: int) -> int | None:
    """The index of the first standalone option letter (A, B, ...) in a reply, or None."""
    letters = "".join(chr(ord("A") + i) for i in range(n_options))
    match = re.search(rf"(?<![A-Za-z])([{letters}])(?![A-Za-z])", reply.strip())
    return ord(match.group(1)) - ord("A") if match else None


def make_blind_models(cfg: BlindFilterConfig) -> list[TextModel]:
    """The configured blind-filter models, first then second; an empty list when neither is.

    Raises:
        ConfigError: a model's settings are incomplete or malformed (naming its key).
    """
    slots = {"first": cfg.first, "second": cfg.second}
    models = [make_text_model(model, f"builder.qc.blind.{slot}") for slot, model in slots.items()]
    return [model for model in models if model is not None]


@dataclass
class _BlindModel:
    """One model of the blind filter and a tally of what it answered."""

    model: TextModel
    asked: int = 0
    failed: int = 0
    right_rounds: Counter = field(default_factory=Counter)

    def answers(self, row: dict[str, Any], rounds: int, rotate: bool) -> list[tuple[str, bool]] | None:
        """Per round the letter given and whether it is right; None when the model could not be asked.

        Raises:
            TextModelError: the model failed on the first three rows it was asked about.
        """
        self.asked += 1
        try:
            results = _blind_answers(row, self.model, rounds, rotate)
        except TextModelError as err:
            self.failed += 1
            if self.failed == self.asked == 3:
                message = f"blind filter: {self.model.identity}: the first 3 questions failed; last: {err}"
                raise TextModelError(message) from err
            return None
        self.right_rounds[sum(ok for _, ok in results)] += 1
        return results

    def report(self) -> dict[str, Any]:
        rounds = {str(k): v for k, v in sorted(self.right_rounds.items())}
        return {
            "model": self.model.identity,
            "asked": self.asked,
            "unjudged": self.failed,
            "right_rounds": rounds,
        }


def blind_filter(
    rows: list[dict[str, Any]], models: Sequence[TextModel], *, rounds: int, rotate: bool
) -> QcStep:
    """Drop rows every model answers right in every round (see the module docstring).

    Models are asked in order, and a later one only about rows no earlier one got wrong in a round
    (those are kept whatever it says). A row a model could not be asked about (:class:`TextModelError`)
    is kept, unless another model got it wrong, and listed as unjudged.

    Raises:
        ConfigError: ``rounds`` below 1.
        TextModelError: a model failed on the first three rows it was asked about.
    """
    if not models:
        return QcStep(
            "blind", list(rows), info={"models": [], "skipped": True, "reason": "no model configured"}
        )
    if rounds < 1:
        raise ConfigError(f"builder.qc.blind.rounds must be at least 1, got {rounds}")
    tallies = [_BlindModel(model) for model in models]
    kept, removed, unjudged = [], [], []
    for row in rows:
        verdict, shown = _blind_verdict(row, tallies, rounds, rotate)
        if verdict == "right":
            removed.append((str(row["id"]), f"answered without video in {rounds}/{rounds} rounds ({shown})"))
            continue
        kept.append(row)
        if verdict == "unjudged":
            unjudged.append(str(row["id"]))
    info = {
        "models": [tally.report() for tally in tallies],
        "rounds": rounds,
        "rotate_options": rotate,
        "unjudged": unjudged,
    }
    return QcStep("blind", kept, removed, info)


def _blind_verdict(
    row: dict[str, Any], tallies: list[_BlindModel], rounds: int, rotate: bool
) -> tuple[str, str]:
    """``("wrong" | "unjudged" | "right", the letters each model gave)`` for one row."""
    shown, unjudged = [], False
    for tally in tallies:
        answers = tally.answers(row, rounds, rotate)
        if answers is None:
            unjudged = True
            continue
        if not all(ok for _, ok in answers):
            return "wrong", ""
        shown.append(f"{tally.model.identity}: {', '.join(letter for letter, _ in answers)}")
    return ("unjudged" if unjudged else "right"), "; ".join(shown)


def _blind_answers(
    row: dict[str, Any], model: TextModel, rounds: int, rotate: bool
) -> list[tuple[str, bool]]:
    """Per round: the letter the model gave (``?`` for none) and whether it is right."""
    stem, options = parse_options(row["question"])
    correct = options[ord(row["answer"]) - ord("A")]
    results = []
    for r in range(rounds):
        shift = r % len(options) if rotate else 0
        shown = options[shift:] + options[:shift]
        index = first_letter(model.answer(render_question(stem, shown), seed=r), len(shown))
        letter = "?" if index is None else chr(ord("A") + index)
        results.append((letter, index is not None and shown[index] == correct))
    return results


def shuffle_options(rows: list[dict[str, Any]], rng: np.random.Generator) -> QcStep:
    """Shuffle each row's options (in place); the answer letter follows the right option."""
    for row in rows:
        stem, options = parse_options(row["question"])
        correct = options[ord(row["answer"]) - ord("A")]
        options = [options[i] for i in rng.permutation(len(options))]
        row["question"], row["answer"] = (
            render_question(stem, options),
            chr(ord("A") + options.index(correct)),
        )
    return QcStep("shuffle", rows)


def balance_answer_letters(rows: list[dict[str, Any]], rng: np.random.Generator) -> None:
    """Move each row's answer so letters are used about equally (in place).

    Rows with fewer options go first (they cannot use the late letters); each then takes the least
    used letter it can, ties broken at random, keeping the order of its other options.
    """
    counts: Counter[str] = Counter()
    parsed = [parse_options(row["question"]) for row in rows]
    order = sorted(range(len(rows)), key=lambda i: (len(parsed[i][1]), rng.random()))
    for i in order:
        stem, options = parsed[i]
        correct = options.pop(ord(rows[i]["answer"]) - ord("A"))
        letters = [chr(ord("A") + j) for j in range(len(options) + 1)]
        fewest = min(counts[letter] for letter in letters)
        letter = str(rng.choice([x for x in letters if counts[x] == fewest]))
        options.insert(ord(letter) - ord("A"), correct)
        rows[i]["question"], rows[i]["answer"] = render_question(stem, options), letter
        counts[letter] += 1


def letter_shares(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Share of rows per answer letter, over the letters the rows' options allow."""
    most = max((len(parse_options(r["question"])[1]) for r in rows), default=0)
    counts = Counter(r["answer"] for r in rows)
    return {chr(ord("A") + i): counts[chr(ord("A") + i)] / max(1, len(rows)) for i in range(most)}


def balance_step(rows: list[dict[str, Any]], rng: np.random.Generator) -> QcStep:
    """:func:`balance_answer_letters`, reporting the shares before and after."""
    before = letter_shares(rows)
    balance_answer_letters(rows, rng)
    after = letter_shares(rows)
    deviation = max((abs(s - 1 / len(after)) for s in after.values()), default=0.0)
    info = {
        "shares_before": _rounded(before),
        "shares": _rounded(after),
        "max_deviation_points": round(100 * deviation, 2),
        "within_3_points": deviation <= 0.03,
    }
    return QcStep("letters", rows, info=info)


def _rounded(shares: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 4) for k, v in shares.items()}


def run_qc(
    rows: list[dict[str, Any]],
    config: QcConfig,
    rng: np.random.Generator,
    models: Sequence[TextModel] | None = None,
) -> tuple[list[dict[str, Any]], list[QcStep]]:
    """Every step in order; ``models`` override those ``config.blind`` names (tests pass fakes).

    Returns:
        The kept rows (options shuffled and letters balanced as configured) and each step's record.
    """
    if models is None:
        models = make_blind_models(config.blind)
    steps = [option_length_filter(rows, config.option_length_ratio, config.option_length_floor)]
    blind = config.blind
    steps.append(blind_filter(steps[-1].kept, models, rounds=blind.rounds, rotate=blind.rotate_options))
    kept = steps[-1].kept
    if config.shuffle_options:
        steps.append(shuffle_options(kept, rng))
    if config.balance_letters:
        steps.append(balance_step(kept, rng))
    return kept, steps


def qc_markdown(steps: Sequence[QcStep]) -> str:
    """The ``stats.md`` section: one line per step with its counts, then up to 20 removed ids each."""
    lines = ["## Quality control", "", "| step | kept | removed | notes |", "|---|---|---|---|"]
    for step in steps:
        lines.append(f"| {step.name} | {len(step.kept)} | {len(step.removed)} | {_notes(step)} |")
    for step in steps:
        if step.removed:
            shown = ", ".join(f"{i} ({reason})" for i, reason in step.removed[:_IDS_IN_STATS])
            more = len(step.removed) - _IDS_IN_STATS
            tail = f" … and {more} more (all in build_info.json)" if more > 0 else ""
            lines.append(f"\nRemoved by {step.name}: {shown}{tail}")
    return "\n".join(lines) + "\n"


def _notes(step: QcStep) -> str:
    info = step.info
    if info.get("skipped"):
        return f"off: {info['reason']}" if "reason" in info else "skipped"
    if step.name == "blind":
        models = " + ".join(model["model"] for model in info["models"])
        return f"{models}; {info['rounds']} rounds each; {len(info['unjudged'])} unjudged"
    if step.name == "option_length":
        return f"max ratio {info['max_ratio']}, floor {info['floor']} chars"
    if step.name == "letters":
        shares = ", ".join(f"{k} {100 * v:.1f}%" for k, v in info["shares"].items())
        flag = "" if info["within_3_points"] else " (NOT within ±3 points: too few rows with 4 options)"
        return f"{shares}; max deviation {info['max_deviation_points']} points{flag}"
    return ""
