"""Evaluation throughput: items per second batched (16 at a time) against one at a time.

The evaluation's own ``generate`` (render, left-padded processor batch, greedy decoding of up to
``eval.max_new_tokens`` tokens) on the first 32 items of the synthetic V2P-Bench twin, tiny model.

    python bench/bench_eval_batching.py
"""

from __future__ import annotations

from dataclasses import replace

import torch
from common import median, print_table, quickstart_config, timed

from core.media import FrameCache, check_media
from data_builders.build import with_synthetic_data
from eval.benchmarks.v2p import load as load_v2p
from eval.generation import generate
from models.chat import make_adapter
from models.loading import load_model

ITEMS = 32
BATCH = 16
REPEATS = 3  # timed passes over all items, per setting, alternating; the fastest counts (see below)


def main() -> None:
    cfg = quickstart_config()
    cfg = with_synthetic_data(cfg)
    cache = FrameCache(cfg.data.frame_cache)
    eval_cfg = replace(cfg.eval, benchmarks=["v2p"], limit=ITEMS, batch_size=BATCH)
    items, _ = check_media(load_v2p(eval_cfg)[:ITEMS], cfg.media, cache, desc="v2p")  # warms the cache
    assert len(items) == ITEMS, f"the synthetic V2P twin has {len(items)} items, {ITEMS} wanted"
    model, processor = load_model(cfg.model)
    model.eval()
    adapter = make_adapter(cfg.model.family, processor, cfg.media, cache, cfg.model.chat_format)
    new_tokens = count_new_tokens(model)

    def run(size: int) -> None:
        with torch.no_grad():
            for start in range(0, len(items), size):
                generate(model, adapter, items[start : start + size], eval_cfg.max_new_tokens)

    run(BATCH)  # warm-up: first-call allocations
    times: dict[int, list[float]] = {1: [], BATCH: []}
    steps: dict[int, list[int]] = {1: [], BATCH: []}
    for _ in range(REPEATS):
        for size in times:
            new_tokens.clear()
            times[size].append(timed(lambda size=size: run(size)))
            steps[size] += new_tokens
    # Other work on a shared machine only ever adds time, so the fastest pass is the least disturbed.
    rate = {size: ITEMS / min(values) for size, values in times.items()}
    rows = [
        [f"batch {size}", f"{rate[size]:.1f}", f"{rate[size] / rate[1]:.2f}", f"{median(steps[size]):.0f}"]
        for size in times
    ]
    print_table(
        f"Evaluation batching: {ITEMS} V2P items, tiny Qwen2.5-VL, greedy, up to "
        f"{eval_cfg.max_new_tokens} new tokens, fastest of {REPEATS} passes",
        ["setting", "items/s", "x one at a time", "decoding steps per call (median)"],
        rows,
        notes=["a batch decodes until its longest answer ends (or max_new_tokens); one item, until its own"],
    )


def count_new_tokens(model) -> list[int]:
    """Wrap ``model.generate`` to record how many tokens each call added; returns the record."""
    record: list[int] = []
    generate = model.generate

    def counted(**kwargs):
        out = generate(**kwargs)
        record.append(out.shape[1] - kwargs["input_ids"].shape[1])
        return out

    model.generate = counted
    return record


if __name__ == "__main__":
    main()
