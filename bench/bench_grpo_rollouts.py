"""GRPO rollouts on video: the group's prompt encoded once and its key/value cache shared, against the
prompt encoded again for every completion.

One synthetic item of each rollout kind on the tiny Qwen2.5-VL, through ``train.rollouts.rollout``: a
question on a 20 s video (a V2P item in open form, sampled from its prompt), and an open OVI Correction item
rolled out through OVIBench's offline simulation (the model's own answer cut at t_i and the interruption
with its frames appended, then the reactions sampled). ``shared`` encodes the prompt once and samples the
group's G completions together, one forward per token for all of them; ``recomputed`` encodes the prompt
once per completion and samples each alone. Completions are sampled at temperature 1 up to 32 tokens (the
random weights almost never pick the end-of-turn token); the tokens generated are counted both ways.

    python bench/bench_grpo_rollouts.py
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from bench_kv_continuation import DURATION, ovi_item
from common import median, print_table, tiny_model_for_inference

from core.decoding import MediaSpec
from core.media import FrameCache
from core.sample import Part, Sample, Turn
from models.chat import VideoChatAdapter
from train.rollouts import rollout

REPEATS = 5  # timed rollouts per way and setting, alternating
COMPLETION_TOKENS = 32
GROUPS = (4, 8)
MEDIA = MediaSpec(num_frames=16, max_pixels=112 * 112)


def video_question(ovi: Sample) -> Sample:
    """A question on the whole video, without options (a V2P item in open form)."""
    video = next(p for p in ovi.turns[0].parts if p.type == "video")
    user = Turn(
        "user", [Part.video(video.path, 0.0, DURATION), Part.txt("What moves? Answer in a few words.")]
    )
    answer = Turn("assistant", [Part.txt("a red circle")], loss=True)
    meta = {"question": "What moves?", "answer": "a red circle", "format": "open"}
    return Sample("bench-v2p", "v2p", [user, answer], "bench", "v", (0.0, DURATION), meta)


def timed(model, adapter, item: Sample, generations: int, shared: bool) -> tuple[float, int]:
    """Seconds for one group's rollout, and the tokens it generated."""
    start = time.perf_counter()
    group = rollout(
        model, adapter, item, generations=generations, temperature=1.0, max_tokens=COMPLETION_TOKENS,
        shared=shared,
    )  # fmt: skip
    return time.perf_counter() - start, sum(map(len, group.group.tokens))


def measure(model, adapter, item: Sample, generations: int) -> list:
    """The table row of one item and group size."""
    for shared in (True, False):  # warm-up: first-call allocations, frame cache
        timed(model, adapter, item, generations, shared)
    runs = {True: [], False: []}
    for _ in range(REPEATS):
        for shared in runs:
            runs[shared].append(timed(model, adapter, item, generations, shared))
    rate = {shared: generations / median([s for s, _ in runs[shared]]) for shared in runs}
    tokens = {shared: sum(n for _, n in runs[shared]) / (REPEATS * generations) for shared in runs}
    return [
        generations,
        f"{tokens[True]:.1f} / {tokens[False]:.1f}",
        f"{rate[True]:.1f}",
        f"{rate[False]:.1f}",
        f"{rate[True] / rate[False]:.2f}",
    ]


def main() -> None:
    model, processor = tiny_model_for_inference()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        adapter = VideoChatAdapter(processor, MEDIA, FrameCache(Path(tmp) / "frames"))
        ovi = ovi_item(Path(tmp))
        items = {"video question (V2P, open form)": video_question(ovi), "interruption (OVI Correction)": ovi}
        for name, item in items.items():
            rows += [[name, *measure(model, adapter, item, generations)] for generations in GROUPS]
    print_table(
        f"GRPO rollouts, tiny Qwen2.5-VL: completions/s with the group's prompt cache shared vs the prompt "
        f"encoded per completion, median of {REPEATS} alternating rollouts",
        [
            "item",
            "G",
            "tokens per completion: shared / recomputed",
            "shared, completions/s",
            "recomputed, completions/s",
            "ratio",
        ],
        rows,
        notes=[
            f"up to {COMPLETION_TOKENS} tokens per completion, temperature 1; 16 frames of 112x112 per span",
            "the interruption rollout's greedy answer to the cut and the appended turn are in both timings",
            "ratio = shared / recomputed; the machine's cores may be shared: compare rows within this table",
        ],
    )


if __name__ == "__main__":
    main()
