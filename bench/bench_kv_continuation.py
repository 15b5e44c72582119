"""OVIBench's interruption simulation: continuing from the key/value cache against re-encoding everything.

One synthetic OVI item (a 20 s video, question at t_q = 16 s, interruption at t_i = 19 s, so 9 answer tokens
at 3 tokens/s) run through ``models.ovi_simulation.simulate_interruption`` both ways on the tiny Qwen2.5-VL.
Steps (a)+(b) (prompt and the model's own answer up to the cut) are the same in both; the table times
steps (c)+(d): appending the interruption turn with the frames of (t_q, t_i] and decoding the reaction.
The cached run encodes only the appended tokens; the re-run encodes the whole conversation again,
vision tower included. Both runs' reactions are checked to be the same token ids.

    python bench/bench_kv_continuation.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
from common import median, print_table, tiny_model_for_inference

from core.decoding import MediaSpec
from core.formats.ovi import ovi_row_to_sample
from core.media import FrameCache
from core.sample import Sample
from core.video_io import write_mp4
from models.chat import VideoChatAdapter
from models.ovi_simulation import SimulationResult, simulate_interruption

REPEATS = 7  # timed runs per implementation, alternating
REACTION_TOKENS = 32
DURATION, T_Q, T_I, FPS = 20.0, 16.0, 19.0, 8.0
SETTINGS = {
    # A long prefix and a short interruption span, as in a stream: 2 fps up to 32 frames per span.
    "2 fps (32 + 6 frames)": MediaSpec(num_frames=None, fps=2.0, max_frames=32, max_pixels=112 * 112),
    "16 frames per span": MediaSpec(num_frames=16, max_pixels=112 * 112),
    "32 frames per span": MediaSpec(num_frames=32, max_pixels=112 * 112),
}


def ovi_item(root: Path) -> Sample:
    """One open-ended Correction item over a noise video (the model's weights are random anyway)."""
    frames = np.random.default_rng(0).integers(0, 255, (int(DURATION * FPS), 112, 112, 3), dtype=np.uint8)
    write_mp4(root / "videos" / "v.mp4", frames, fps=FPS)
    row = {
        "id": "bench",
        "video_path": "videos/v.mp4",
        "duration": DURATION,
        "source": "bench",
        "source_id": "v",
        "segment": [0.0, DURATION],
        "question_time": T_Q,
        "question": "What happens in the video?",
        "answer": "a red circle appears and moves to the right.",
        "interruption_time": T_I,
        "partial_answer": "a red circle",
        "interruption_type": "Correction",
        "interruption": "Sorry, I meant the blue square.",
        "reference_reaction": "the blue square enters.",
        "format": "open",
    }
    return ovi_row_to_sample(row, root)


def measure(model, adapter: VideoChatAdapter, sample: Sample) -> list[str]:
    """The table row of one media setting: token counts, times, ratio, and whether the reactions agree."""
    runs: dict[bool, list[SimulationResult]] = {True: [], False: []}
    for kv in (True, False):  # warm-up: first-call allocations, frame cache
        simulate_interruption(model, adapter, sample, max_new_tokens=REACTION_TOKENS, continue_from_cache=kv)
    for _ in range(REPEATS):
        for kv in runs:
            runs[kv].append(
                simulate_interruption(
                    model, adapter, sample, max_new_tokens=REACTION_TOKENS, continue_from_cache=kv
                )
            )
    cached, full = runs[True][0], runs[False][0]
    same = all(r.reaction_ids == cached.reaction_ids for r in [*runs[True], *runs[False]])

    def ms(field: str, kv: bool) -> float:
        return 1000 * median([getattr(r, field) for r in runs[kv]])

    first = {kv: ms("first_reaction_seconds", kv) for kv in runs}
    whole = {kv: ms("continuation_seconds", kv) for kv in runs}
    row = [
        f"{cached.prompt_tokens} + {len(cached.answer_ids)} + {cached.appended_tokens}",
        f"{cached.encoded_tokens} / {full.encoded_tokens}",
        f"{first[True]:.0f} / {first[False]:.0f}",
        f"{first[False] / first[True]:.2f}",
        f"{whole[True]:.0f} / {whole[False]:.0f}",
        f"{whole[False] / whole[True]:.2f}",
        "yes" if same else "NO",
    ]
    return row


def main() -> None:
    model, processor = tiny_model_for_inference()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        sample = ovi_item(Path(tmp))
        for name, spec in SETTINGS.items():
            adapter = VideoChatAdapter(processor, spec, FrameCache(Path(tmp) / "frames"))
            rows.append([name, *measure(model, adapter, sample)])
    print_table(
        f"OVI interruption simulation, tiny Qwen2.5-VL: key/value-cache continuation against a full re-run, "
        f"median of {REPEATS} alternating runs",
        [
            "media",
            "prompt + answer + appended tokens",
            "encoded tokens: cache / re-run",
            "to 1st reaction token, ms",
            "ratio",
            f"whole continuation ({REACTION_TOKENS} tokens), ms",
            "ratio",
            "same reaction ids",
        ],
        rows,
        notes=[
            f"t_q = {T_Q:g} s, t_i = {T_I:g} s: the answer is cut after (t_i - t_q) x 3 tokens/s = 9 tokens "
            "(fewer if it ends first); the appended tokens carry the frames of (t_q, t_i]",
            "encoded: tokens run through the model after the cut, before the reaction's first token "
            "(the cached run also feeds the answer's last, sampled token); ratio = re-run time / cache time",
            "the whole continuation adds the reaction's decoding, the same work both ways",
            "the machine's cores may be shared with other work: compare rows within this table, not runs",
        ],
    )


if __name__ == "__main__":
    main()
