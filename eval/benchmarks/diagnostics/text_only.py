"""``v2p_blind``: the V2P items as text only, no video and no visual-prompt (VP) frame."""

from __future__ import annotations

from core.sample import Sample
from eval.benchmarks.base import Derived
from eval.benchmarks.diagnostics.derived import Description, derived_sample, diagnostic
from eval.benchmarks.v2p import V2PSettings

DESCRIPTION: Description = (
    "Blind (text only)",
    "Accuracy with neither video nor VP frame, against its own chance level (one over the item's "
    "options: 25–33% on four-to-three options); near chance means the questions need the video. Not "
    "comparable with the paper's 1.4–9.6%, a rate on the questions its blind filter kept.",
)


def blind(sample: Sample) -> Sample:
    """Text only: the user turns lose their video and image parts."""
    return derived_sample(
        sample, "blind", "blind", parts=lambda parts: [p for p in parts if p.type == "text"]
    )


def _blind_items(samples: list[Sample], settings: V2PSettings) -> Derived:
    return Derived([blind(s) for s in samples])


V2P_BLIND = diagnostic("v2p_blind", DESCRIPTION, _blind_items)
