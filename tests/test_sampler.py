"""The multi-rank sample order (train.data.MediaKindSampler): at every step all ranks' batches hold the
same kinds of media, which ZeRO-3 needs; every sample comes; the order follows the seed and epoch."""

from __future__ import annotations

from collections import Counter

import pytest

from core.sample import Part, Sample, Turn
from train.data import MediaKindSampler, media_kinds


def _sample(i: int, image: bool) -> Sample:
    parts = [Part.video("v.mp4", 0.0, 2.0)] + ([Part.image("f.png")] if image else []) + [Part.txt("q?")]
    turns = [Turn("user", parts), Turn("assistant", [Part.txt("a")])]
    return Sample(f"s{i}", "v2p" if image else "ovi", turns, "test", f"s{i}", (0.0, 2.0))


SAMPLES = [_sample(i, image=i % 3 == 0) for i in range(23)]  # 8 with an image, 15 videos only


@pytest.mark.parametrize(("batch", "world"), [(2, 2), (3, 2), (1, 4)])
def test_every_step_gives_all_ranks_the_same_kinds_and_every_sample_comes(batch, world):
    sampler = MediaKindSampler(SAMPLES, batch, world, seed=1)
    order = list(sampler)
    assert len(order) == len(sampler) and len(order) % (batch * world) == 0
    assert set(order) == set(range(len(SAMPLES)))
    # The Trainer hands consecutive batches to the ranks in turn: one step is batch x world indices.
    for start in range(0, len(order), batch * world):
        kinds = {media_kinds(SAMPLES[i]) for i in order[start : start + batch * world]}
        assert len(kinds) == 1, (start, kinds)
    # Only a group's last block is filled up, with samples of that group: at most one block short each.
    repeats = sum(n - 1 for n in Counter(order).values())
    assert repeats < 2 * batch * world


def test_the_order_follows_seed_and_epoch():
    sampler = MediaKindSampler(SAMPLES, 2, 2, seed=1)
    first = list(sampler)
    assert list(MediaKindSampler(SAMPLES, 2, 2, seed=1)) == first  # a resumed run sees the same order
    sampler.set_epoch(1)
    assert list(sampler) != first
    assert list(MediaKindSampler(SAMPLES, 2, 2, seed=2)) != first


def test_media_kinds():
    assert media_kinds(SAMPLES[0]) == ("image", "video") and media_kinds(SAMPLES[1]) == ("video",)
