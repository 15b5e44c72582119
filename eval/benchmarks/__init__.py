"""The benchmarks evaluation knows, by name. A new benchmark is one new file here and one entry below."""

from eval.benchmarks.base import Benchmark
from eval.benchmarks.diagnostics import V2P_BLIND, V2P_SHUFFLED, V2P_TEXT_PROMPT, V2P_Z
from eval.benchmarks.ovi import OVI
from eval.benchmarks.v2p import V2P

BENCHMARKS: dict[str, Benchmark] = {
    "v2p": V2P,
    "ovi": OVI,
    # The V2P-Bench hack diagnostics, derived from the V2P items (each needs v2p evaluated too).
    "v2p_blind": V2P_BLIND,
    "v2p_z": V2P_Z,
    "v2p_shuffled": V2P_SHUFFLED,
    "v2p_text_prompt": V2P_TEXT_PROMPT,
}

# How each benchmark's overall values are taken, for eval.summary.build_summary.
WEIGHTING = {name: bench.weighting for name, bench in BENCHMARKS.items() if bench.weighting}
