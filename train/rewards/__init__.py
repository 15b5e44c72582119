"""The verifiable rewards of the GRPO stage: pure functions of a completion and its item, fixed by rule.

A reward is ``reward(completion, item) -> float | None``: None when it does not apply to the item, otherwise
a score in [0, 1]. :data:`REWARDS` names them all, :func:`applicable` says which apply to an item and
:func:`weighted` scores a completion on all of those at once, with the weighted total the stage trains on;
:func:`check_weights` refuses a weight that names no reward when the run's config resolves.

By what they score: ``train.rewards.v2p`` (V2P items, multiple choice or in open form) and
``train.rewards.ovi`` (OVI items, an open reaction to an interruption or multiple choice). A completion
that games the rules (``train.rewards.hacks.hacked``: empty, an echo of the options or the question, every
letter or every interruption type named) earns 0 on every reward. Words are compared normalised
(``train.rewards.text``).
"""

from __future__ import annotations

from collections.abc import Callable

from core.errors import ConfigError
from core.sample import Sample
from eval.benchmarks.ovi import is_open_item
from train.rewards.hacks import hacked
from train.rewards.ovi import ovi_ca, ovi_cancellation, ovi_correction, ovi_false_trigger, ovi_ma
from train.rewards.v2p import v2p_format, v2p_letter, v2p_words

__all__ = ["REWARDS", "Reward", "applicable", "check_weights", "default_weights", "hacked", "weighted"]

Reward = Callable[[str, Sample], "float | None"]

REWARDS: dict[str, Reward] = {
    "v2p_letter": v2p_letter,
    "v2p_format": v2p_format,
    "v2p_words": v2p_words,
    "ovi_cancellation": ovi_cancellation,
    "ovi_false_trigger": ovi_false_trigger,
    "ovi_correction": ovi_correction,
    "ovi_ma": ovi_ma,
    "ovi_ca": ovi_ca,
}

# Rewards the stage adds when configured (not pure functions): the LLM judge's (train/judge_reward.py).
OPTIONAL_REWARDS = ("ovi_judge",)

# Each reward weighs 1 in the total unless stage.grpo.rewards says otherwise; the format reward less (it
# only keeps a multiple-choice answer a lone letter).
LIGHTER = {"v2p_format": 0.2}


def default_weights() -> dict[str, float]:
    """``stage.grpo.rewards``' default: every reward, optional ones included, by name."""
    return {name: LIGHTER.get(name, 1.0) for name in [*REWARDS, *OPTIONAL_REWARDS]}


def check_weights(weights: dict[str, float]) -> None:
    """Refuse a weight that names no reward (a typo would weigh nothing, silently).

    Raises:
        ConfigError: naming the unknown weights and the rewards there are.
    """
    known = [*REWARDS, *OPTIONAL_REWARDS]
    unknown = sorted(set(weights) - set(known))
    if unknown:
        raise ConfigError(
            f"stage.grpo.rewards: {', '.join(unknown)} not among the rewards ({', '.join(known)})"
        )


def applicable(item: Sample, extra: dict[str, Reward] | None = None) -> list[str]:
    """The names of the rewards that apply to ``item``, in :data:`REWARDS`' order, then ``extra``'s (rewards
    that are not pure functions: the judge's, for open OVI items).

    Each rule reward is asked about an empty completion: one that applies scores it 0 (a hack), one that does
    not answers None, so this list and the rewards' own None never disagree.
    """
    rules = [name for name, reward in REWARDS.items() if reward("", item) is not None]
    return rules + [name for name in extra or {} if is_open_item(item)]


def weighted(
    completion: str, item: Sample, weights: dict[str, float], extra: dict[str, Reward] | None = None
) -> dict[str, float]:
    """Each applicable reward's value, and ``total``: their mean weighted by ``weights`` (name -> weight,
    checked by :func:`check_weights` when the run resolved).

    An applicable reward without a weight weighs 0, and one with no value (an ``extra`` reward that could not
    score) is left out; ``total`` is 0 when no applicable reward weighs anything.
    """
    rewards = {**REWARDS, **(extra or {})}
    values = {name: rewards[name](completion, item) for name in applicable(item, extra)}
    values = {name: value for name, value in values.items() if value is not None}
    mass = sum(weights.get(name, 0.0) for name in values)
    total = sum(weights.get(name, 0.0) * value for name, value in values.items()) / mass if mass else 0.0
    return {**values, "total": total}
