"""Held-out preference metrics: how often each model prefers the right reaction to an interruption over a
wrong one (open form), or the right answer letter over a wrong one (MCQ form), on pairs made from the
OVIBench of ``eval.ovi_root`` (never trained on). A preference training (``stage.method`` dpo or kto)
always scores them; any other run, or ``python -m eval``, when ``eval.preference_pairs`` is set.

For every model the run evaluates (the baseline, i.e. the starting model, then each checkpoint), each
pair's chosen and rejected completion log-probabilities are stored in ``eval/<model>/ovi_pairs.jsonl``.
From them, overall, per interruption type and per form:

- ``accuracy``: share of pairs whose chosen reaction is more likely than the rejected one;
- ``delta``: a checkpoint's accuracy minus the baseline's with a paired bootstrap 95% interval (pairs
  resampled jointly for both models);
- ``reward_accuracy`` and ``margin`` (checkpoints of a preference training): the implicit reward, beta x
  the log-ratio to the reference; the reference is the starting model, whose log-probabilities are the
  baseline's, so the margin is ``beta x ((chosen - chosen_ref) - (rejected - rejected_ref))`` and reward
  accuracy the share of pairs where it is positive.

Pairs need each completion's log-probability from the model itself, so a model served through an
OpenAI-compatible API (``eval.server``) is not scored; the summary says so.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from core import distributed
from core.config import RunConfig, StageMethod, TrainConfig
from core.errors import ConfigError
from core.files import JsonlStore
from core.media import FrameCache, check_media
from core.rundir import RunDir
from core.vocab import INTERRUPTION_TYPES, ITEM_FORMS
from data_builders.ovi_format import load_ovibench
from data_builders.preferences import PreferencePair, pairs_from_samples
from eval.stats import paired_bootstrap
from models.chat import VideoChatAdapter
from models.pairs import completion_logps, pair_batch

PAIRS_RESULTS = "ovi_pairs"  # eval/<model>/ovi_pairs.jsonl


NOT_SERVED = (
    "held-out preference pairs are not scored through a model server (eval.server): they need each "
    "completion's log-probability from the model itself; evaluate in process to score them"
)


def preference_beta(cfg: RunConfig) -> float | None:
    """The beta of the implicit reward when ``cfg`` is a preference training (its stage's), else None."""
    if isinstance(cfg, TrainConfig) and cfg.stage.method is not StageMethod.sft:
        return cfg.stage.beta
    return None


def scores_pairs(cfg: RunConfig) -> bool:
    """Whether a run scores held-out pairs: a preference training always, any run when asked."""
    return cfg.eval.preference_pairs or preference_beta(cfg) is not None


class PreferenceScoring:
    """The held-out pairs of a run, scored on each model; the summary's ``preference`` entry.

    Args:
        beta: the implicit reward's beta (a preference training's); None: accuracy and its delta only.

    Raises:
        ConfigError: ``eval.ovi_root`` is unset.
    """

    def __init__(
        self, cfg: RunConfig, run_dir: RunDir, cache: FrameCache, beta: float | None, follow_on: bool
    ):
        if not cfg.eval.ovi_root:
            raise ConfigError("held-out preference pairs are made from eval.ovi_root: set it")
        samples, _ = check_media(  # what does not decode is in the ovi benchmark's quarantine already
            load_ovibench(cfg.eval.ovi_root), cfg.media, cache, desc="ovi pairs", follow_on=follow_on
        )
        # Every item's pairs, whatever eval.limit (which bounds generation): scoring a pair is two forwards.
        self.pairs = pairs_from_samples(samples, cfg.eval.ovi_root).pairs
        self.run_dir, self.beta = run_dir, beta
        self.batch_size = max(1, cfg.eval.batch_size // 2)  # each pair is two rows
        self.n_resamples = cfg.eval.bootstrap_resamples

    def score(self, model, chat: VideoChatAdapter, name: str, main: bool) -> None:
        """Score the pairs not yet stored for ``name``, sharded over ranks as generation is (every rank runs
        the same number of forwards: ZeRO-3 gathers weights collectively); ``main`` alone reads and writes."""
        store = JsonlStore(self.run_dir.results_file(name, PAIRS_RESULTS)) if main else None
        done = store.read() if main else {}
        by_id = {pair.id: pair for pair in self.pairs}
        # Rank 0 alone reads the file and tells the others what is missing, so all shard the same list.
        missing = [pair.id for pair in self.pairs if pair.id not in done] if main else None
        mine, real = distributed.shard([by_id[i] for i in distributed.broadcast(missing)])
        for start in range(0, len(mine), self.batch_size):
            chunk, keep = mine[start : start + self.batch_size], real[start : start + self.batch_size]
            chosen, rejected = completion_logps(model, pair_batch(chat, chunk)).chunk(2)
            scored = zip(chunk, chosen, rejected, keep, strict=True)
            records = [_record(pair, c, r) for pair, c, r, kept in scored if kept]
            gathered = [record for shard in distributed.gather(records) for record in shard]
            if main:
                store.append(gathered)

    def summary(self, names: list[str]) -> dict[str, Any]:
        """Metrics of every model in ``names`` (the baseline first) on the pairs all of them have scored."""
        stored = {name: JsonlStore(self.run_dir.results_file(name, PAIRS_RESULTS)).read() for name in names}
        ids = [p.id for p in self.pairs if all(p.id in records for records in stored.values())]
        base, *checkpoints = names
        summary: dict[str, Any] = {"beta": self.beta, "n_pairs": len(ids), "models": {}}
        for name in names:
            summary["models"][name] = preference_metrics(
                [stored[name][i] for i in ids],
                [stored[base][i] for i in ids],
                self.beta,
                self.n_resamples,
                is_baseline=name == base,
            )
        summary["baseline"], summary["checkpoints"] = base, checkpoints
        return summary


def _record(pair: PreferencePair, chosen, rejected) -> dict[str, Any]:
    return {
        "id": pair.id,
        "type": pair.interruption_type,
        "form": pair.sample.meta["format"],
        "error": pair.error,
        "chosen_logp": float(chosen),
        "rejected_logp": float(rejected),
    }


def preference_metrics(
    records: list[dict], reference: list[dict], beta: float | None, n_resamples: int, *, is_baseline: bool
) -> dict[str, Any]:
    """Accuracy (and, against ``reference``, the accuracy delta with its paired 95% interval, and with a
    ``beta`` reward accuracy and margin) overall, per interruption type and per form; ``records`` and
    ``reference`` in the same pair order."""
    groups = {"overall": list(range(len(records)))}
    for kind in INTERRUPTION_TYPES:
        groups[kind] = [i for i, r in enumerate(records) if r["type"] == kind]
    for form in ITEM_FORMS:  # open: the reaction itself; mcq: the answer letter and type
        groups[f"{form} form"] = [i for i, r in enumerate(records) if r.get("form") == form]
    metrics = {}
    for group, index in groups.items():
        if not index:
            continue
        mine = [records[i] for i in index]
        entry: dict[str, Any] = {"n": len(index), "accuracy": float(np.mean(_correct(mine)))}
        if is_baseline:
            metrics[group] = entry
            continue
        ref = [reference[i] for i in index]
        entry["delta"] = paired_bootstrap(_correct(ref), _correct(mine), n_resamples=n_resamples)
        if beta is not None:
            margins = [
                beta * ((m["chosen_logp"] - r["chosen_logp"]) - (m["rejected_logp"] - r["rejected_logp"]))
                for m, r in zip(mine, ref, strict=True)
            ]
            entry["reward_accuracy"] = float(np.mean([m > 0 for m in margins]))
            entry["margin"] = float(np.mean(margins))
        metrics[group] = entry
    return metrics


def _correct(records: list[dict]) -> list[float]:
    return [float(r["chosen_logp"] > r["rejected_logp"]) for r in records]


def preference_values(summary: dict[str, Any], name: str) -> dict[str, float]:
    """One model's preference metrics as flat scalars for the metric logger (``ovi_pairs/...``)."""
    values = {}
    for group, entry in summary["models"].get(name, {}).items():
        prefix = f"{PAIRS_RESULTS}/{group.lower().replace(' ', '_')}"
        values[f"{prefix}/accuracy"] = entry["accuracy"]
        for key in ("reward_accuracy", "margin"):
            if key in entry:
                values[f"{prefix}/{key}"] = entry[key]
        if "delta" in entry:
            values[f"{prefix}/accuracy/delta"] = entry["delta"]["delta"]
    return values


def preference_section(summary: dict[str, Any]) -> list[str]:
    """The report's lines on held-out preference pairs (none when the run has no such entry)."""
    entry = summary.get("preference")
    if entry and "not_scored" in entry:
        return ["## Held-out preference pairs (OVIBench)", "", f"Not scored: {entry['not_scored']}.", ""]
    if not entry or not entry["models"]:
        return []
    reward = (
        f"reward accuracy and margin: the implicit reward (beta {entry['beta']}) against the baseline, the "
        "starting model"
        if entry["beta"] is not None
        else "reward accuracy and margin: only for a preference training's checkpoints"
    )
    lines = [
        "## Held-out preference pairs (OVIBench)",
        "",
        f"{entry['n_pairs']} pairs (right reaction vs a wrong one) from the evaluation OVIBench; accuracy: "
        f"chosen more likely than rejected; {reward}; delta: accuracy vs the baseline, paired bootstrap 95% "
        "interval.",
        "",
        "| model | group | n | accuracy | reward acc. | margin | delta [95% CI] |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, groups in entry["models"].items():
        for group, m in groups.items():
            reward = f"{m['reward_accuracy']:.1%}" if "reward_accuracy" in m else "–"
            margin = f"{m['margin']:+.3f}" if "margin" in m else "–"
            ci = delta_points(m["delta"]) if "delta" in m else "–"
            lines.append(
                f"| {name} | {group} | {m['n']} | {m['accuracy']:.1%} | {reward} | {margin} | {ci} |"
            )
    return [*lines, ""]


def delta_points(delta: dict[str, float]) -> str:
    """An accuracy delta and its 95% interval in points: ``+5.1 [+1.5, +8.9]``."""
    return f"{100 * delta['delta']:+.1f} [{100 * delta['ci_low']:+.1f}, {100 * delta['ci_high']:+.1f}]"
