"""V2P-Bench hack diagnostics: benchmarks derived from the V2P items.

The V2P-Bench paper probes whether a model answers from the evidence or guesses; its authors released no
code for it, so each transform here is *our reconstruction* of the paper's description. Every diagnostic is
a copy of the (media-checked) V2P items, same ids, evaluated as one more benchmark, so per-item results,
resume, ``summary.json``, deltas against the baseline and W&B logging apply unchanged:

===================  ===================  ===========================================================
benchmark            module               the copy
===================  ===================  ===========================================================
``v2p_blind``        ``text_only``        text only: no video, no visual-prompt (VP) frame
``v2p_z``            ``z_option``         an option ``Z: the video does not provide enough information``
                                          appended
``v2p_shuffled``     ``shuffled_pairs``   the video and VP frame of another item in the same duration
                                          bucket, with the Z option: the refusal rate and the hack ratio
``v2p_text_prompt``  ``text_prompts``     the target named in words ("the red circle"), VP frame removed
===================  ===================  ===========================================================

Each module holds one diagnostic: its transform (a pure function ``Sample -> Sample``), how its items are
derived from the V2P items, its scores and its report line; ``derived`` what they share.
"""

from __future__ import annotations

from eval.benchmarks.diagnostics.derived import Description
from eval.benchmarks.diagnostics.shuffled_pairs import DESCRIPTION as SHUFFLED_DESCRIPTION
from eval.benchmarks.diagnostics.shuffled_pairs import (
    V2P_SHUFFLED,
    score_shuffled,
    shuffle_pairs,
    with_visual_input_of,
)
from eval.benchmarks.diagnostics.text_only import DESCRIPTION as BLIND_DESCRIPTION
from eval.benchmarks.diagnostics.text_only import V2P_BLIND, blind
from eval.benchmarks.diagnostics.text_prompts import DESCRIPTION as TEXT_PROMPT_DESCRIPTION
from eval.benchmarks.diagnostics.text_prompts import V2P_TEXT_PROMPT, text_prompt, text_vs_visual
from eval.benchmarks.diagnostics.z_option import DESCRIPTION as Z_DESCRIPTION
from eval.benchmarks.diagnostics.z_option import V2P_Z, Z_LETTERS, Z_OPTION, score_with_z, with_z_option

# Benchmark -> (title, what its numbers mean), for report.md.
DESCRIPTIONS: dict[str, Description] = {
    V2P_BLIND.name: BLIND_DESCRIPTION,
    V2P_Z.name: Z_DESCRIPTION,
    V2P_SHUFFLED.name: SHUFFLED_DESCRIPTION,
    V2P_TEXT_PROMPT.name: TEXT_PROMPT_DESCRIPTION,
}

__all__ = [
    "DESCRIPTIONS",
    "V2P_BLIND",
    "V2P_SHUFFLED",
    "V2P_TEXT_PROMPT",
    "V2P_Z",
    "Z_LETTERS",
    "Z_OPTION",
    "blind",
    "score_shuffled",
    "score_with_z",
    "shuffle_pairs",
    "text_prompt",
    "text_vs_visual",
    "with_visual_input_of",
    "with_z_option",
]
