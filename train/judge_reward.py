"""The LLM judge as a GRPO reward (``stage.grpo.judge``; off by default): an open OVI reaction scored on the
metrics OVIBench's judge applies to its interruption type (``eval.rubrics``), each scaled to [0, 1], averaged.

The judge is the evaluation's own (``eval.judging.make_judge``: any text model of the project's protocol,
an OpenAI-compatible endpoint or a local model), so its judgements are cached and versioned as the
evaluation's are: keyed by the judge's identity, the rubric version, the metric and the prompt, kept in a
JSONL file (``stage.grpo.judge.cache``), so a resumed run or a repeated completion costs no call. The cut
answer the judge reads is the model's own (``meta["spoken"]``), as the rollout spoke it.
"""

from __future__ import annotations

from core.sample import Sample
from eval.benchmarks.ovi import is_open_item
from eval.judging import Judge, get_metric
from train.rewards import Reward, hacked


class JudgeReward:
    """``reward(completion, item) -> float | None``: None for anything but an open OVI item, or when no
    metric could be judged (a reply that never came is not a zero); a hack (``train.rewards.hacked``) earns
    0 without asking."""

    def __init__(self, judge: Judge, metrics: list[str] | None = None):
        self.judge, self.metrics = judge, metrics

    def __call__(self, completion: str, item: Sample) -> float | None:
        if not is_open_item(item):
            return None
        if hacked(completion, item):
            return 0.0
        meta = item.meta
        if "spoken" in meta:  # the judge is told the cut answer is the model's own, as under simulation
            meta = {**meta, "partial_answer": meta["spoken"], "own_answer": True}
        record = {"id": item.id, "task": "ovi", "prediction": completion, "meta": meta}
        scores = self.judge.judge_record(record, self.metrics).scores
        if not scores:
            return None
        return sum(_unit(name, score) for name, score in scores.items()) / len(scores)


def _unit(metric: str, score: float) -> float:
    low, high = get_metric(metric).scale
    return (score - low) / (high - low)


def judge_rewards(judge: Judge | None, metrics: list[str] | None) -> dict[str, Reward]:
    """The stage's optional rewards: ``{"ovi_judge": ...}`` when a judge is configured, else none."""
    return {} if judge is None else {"ovi_judge": JudgeReward(judge, metrics)}
