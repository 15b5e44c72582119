"""Training data: samples from HF datasets on disk, rendered by the chat adapter, batched, and ordered so
every rank's batch holds the same kinds of media.

Before training, the recipe decodes every sample's media once into the frame cache
(``data_builders.media.check_media``); a sample whose media cannot be decoded is quarantined: left out,
counted by reason and listed in ``quarantine_train.json`` in the run directory, never dropped silently.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from data_builders.errors import DataError
from data_builders.sample import Sample
from models.chat import VideoChatAdapter


def load_samples(dataset_dirs: list[str]) -> list[Sample]:
    """Read samples from HF datasets saved with ``save_to_disk`` (rows made by ``Sample.to_row``)."""
    import datasets

    samples = []
    for directory in dataset_dirs:
        if not Path(directory).exists():
            raise DataError(directory, "training dataset directory not found (build it with data_builders)")
        try:
            dataset = datasets.load_from_disk(directory)
        except FileNotFoundError as exc:  # a directory, but not a dataset save_to_disk finished
            raise DataError(
                directory, "not a complete HF dataset as data_builders saves one (a build's hf/ directory)"
            ) from exc
        for row_number, row in enumerate(dataset, start=1):
            try:
                samples.append(Sample.from_row(row))
            except (KeyError, TypeError, ValueError) as exc:
                raise DataError(directory, f"malformed sample: {exc}", row=row_number) from exc
    return samples


class SampleDataset(torch.utils.data.Dataset):
    """Samples rendered for training (frames come from the cache, or are decoded here in dataloader
    workers when the cache is off)."""

    def __init__(self, samples: list[Sample], adapter: VideoChatAdapter):
        self.samples = samples
        self.adapter = adapter

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int):
        return self.adapter.render(self.samples[index], for_generation=False)


class Collator:
    """Batches rendered samples through the processor and masks labels to trained assistant turns."""

    def __init__(self, adapter: VideoChatAdapter):
        self.adapter = adapter

    def __call__(self, rendered: list) -> dict:
        return dict(self.adapter.training_batch(rendered))


def media_kinds(sample: Sample) -> tuple[str, ...]:
    """The kinds of media a sample holds, e.g. ``("image", "video")``."""
    kinds = {part.type for turn in sample.turns for part in turn.parts}
    return tuple(sorted(kinds & {"image", "video"}))


class MediaKindSampler(torch.utils.data.Sampler[int]):
    """A shuffled sample order in which, at every step, every rank's batch holds the same kinds of media.

    Under DeepSpeed ZeRO-3 each rank gathers a module's weights from all ranks whenever it runs the module.
    A batch with an image runs the vision tower once more than a batch with only videos, so ranks whose
    batches differed would wait on different collectives and the run would hang. Samples are grouped by
    :func:`media_kinds`, shuffled within their group, cut into blocks of ``batch_size x world_size`` (one
    step of all ranks: the Trainer hands consecutive batches to ranks in turn), and the blocks shuffled. A
    group's last block is filled up with the group's first samples, as ``DistributedSampler`` pads.
    The order depends only on ``seed`` and the epoch, so a resumed run sees the same one.
    """

    def __init__(self, samples: list[Sample], batch_size: int, world_size: int, seed: int = 0):
        self.block = batch_size * world_size
        self.seed, self.epoch = seed, 0
        groups: dict[tuple[str, ...], list[int]] = {}
        for index, sample in enumerate(samples):
            groups.setdefault(media_kinds(sample), []).append(index)
        self.groups = [groups[kinds] for kinds in sorted(groups)]

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return sum(-(-len(group) // self.block) * self.block for group in self.groups)

    def __iter__(self):
        rng = np.random.default_rng([self.seed, self.epoch])
        blocks = []
        for group in self.groups:
            order = [group[i] for i in rng.permutation(len(group))]
            order += order[: -len(order) % self.block]  # fill the last block (at most one block short)
            blocks += [order[i : i + self.block] for i in range(0, len(order), self.block)]
        for b in rng.permutation(len(blocks)):
            yield from blocks[b]
