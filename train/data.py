"""Training data: samples from HF datasets on disk, rendered by the chat adapter, batched, and ordered so
every rank's batch holds the same kinds of media.

Before training, the recipe decodes every sample's media once into the frame cache
(``core.media.check_media``); a sample whose media cannot be decoded is quarantined: left out,
counted by reason and listed in ``quarantine_train.json`` in the run directory, never dropped silently.

Several datasets (``data.train``) are concatenated, or mixed by ``data.weights``: LLaMA-Factory's
``interleave_under`` strategy with exact counts. The weights, normalised, are each dataset's share of the
epoch; the epoch is the largest one that holds those shares without repeating a sample, so the dataset
that runs out first takes all of its samples and the others a seeded draw. ``N = min_i(n_i / p_i)``
samples (``n_i`` samples in dataset ``i``, ``p_i`` its share), ``round(p_i N)`` from each. The draw
depends only on the trainer's seed and the datasets, so every rank (and a resumed run) trains on the same
samples. What was drawn and used is written to ``data_mix.json`` in the run directory.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core.config import DataConfig
from core.decoding import MediaSpec
from core.errors import ConfigError, DataError
from core.media import FrameCache, check_media
from core.sample import Sample
from models.chat import VideoChatAdapter
from models.packing import pack_batch

MIX_STRATEGY = "interleave_under"  # LLaMA-Factory's name for it; see the module docstring


def load_samples(dataset_dirs: list[str]) -> list[Sample]:
    """Read samples from HF datasets saved with ``save_to_disk`` (rows made by ``Sample.to_row``),
    concatenated."""
    return [sample for directory in dataset_dirs for sample in load_dataset_samples(directory)]


def load_dataset_samples(directory: str) -> list[Sample]:
    """The samples of one HF dataset directory.

    Raises:
        DataError: the directory is missing, not a finished dataset, or holds a malformed row.
    """
    import datasets

    if not Path(directory).exists():
        raise DataError(directory, "training dataset directory not found (build it with data_builders)")
    try:
        dataset = datasets.load_from_disk(directory)
    except FileNotFoundError as exc:  # a directory, but not a dataset save_to_disk finished
        raise DataError(
            directory, "not a complete HF dataset as data_builders saves one (a build's hf/ directory)"
        ) from exc
    samples = []
    for row_number, row in enumerate(dataset, start=1):
        try:
            samples.append(Sample.from_row(row))
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(directory, f"malformed sample: {exc}", row=row_number) from exc
    return samples


def dataset_shares(train: list[str], weights: list[float]) -> list[float] | None:
    """Each dataset's share of the epoch (the weights normalised); None without weights (concatenation).

    Raises:
        ConfigError: not one weight per dataset, a negative weight, or none above 0.
    """
    if not weights:
        return None
    if len(weights) != len(train):
        raise ConfigError(
            f"data.weights has {len(weights)} weight(s) for {len(train)} dataset(s) in data.train: give one "
            f"per dataset, by position, or none (concatenation); weights {list(weights)}, train {list(train)}"
        )
    if min(weights) < 0 or not math.isfinite(sum(weights)) or sum(weights) <= 0:
        raise ConfigError(f"data.weights must be finite, non-negative and not all 0, got {list(weights)}")
    return [weight / sum(weights) for weight in weights]


def mixed_counts(sizes: list[int], shares: list[float]) -> list[int]:
    """How many samples each dataset gives to an ``interleave_under`` epoch: ``round(p_i N)``, ``N`` the
    largest epoch in which no dataset repeats a sample (``min_i n_i / p_i`` over the datasets with p_i > 0).

    Raises:
        ConfigError: a dataset with a share above 0 is empty.
    """
    empty = [i for i, (size, share) in enumerate(zip(sizes, shares, strict=True)) if share > 0 and not size]
    if empty:
        raise ConfigError(f"data.train[{empty[0]}] is empty but its data.weights entry is above 0")
    epoch = min(size / share for size, share in zip(sizes, shares, strict=True) if share > 0)
    return [min(size, math.floor(share * epoch + 0.5)) for size, share in zip(sizes, shares, strict=True)]


def mix_datasets(datasets: list[list[Sample]], shares: list[float] | None, seed: int) -> list[list[Sample]]:
    """The samples each dataset gives to the epoch: all of them without shares, else a draw of
    :func:`mixed_counts` samples, seeded by ``seed`` and the dataset's position, in the dataset's order."""
    if shares is None:
        return [list(samples) for samples in datasets]
    counts = mixed_counts([len(samples) for samples in datasets], shares)
    drawn = []
    for position, (samples, count) in enumerate(zip(datasets, counts, strict=True)):
        chosen = np.random.default_rng([seed, position]).permutation(len(samples))[:count]
        drawn.append([samples[i] for i in sorted(chosen)])
    return drawn


@dataclass
class TrainingSet:
    """The rows a run trains on (samples; for a post-SFT stage, pairs or labelled reactions), those
    quarantined, and the record of how the datasets were mixed."""

    rows: list
    quarantined: list[dict[str, str]]
    mix: dict[str, Any]  # what data_mix.json holds


def training_set(
    data: DataConfig, seed: int, spec: MediaSpec, cache: FrameCache, *, follow_on: bool = True
) -> TrainingSet:
    """Load ``data.train``, mix it by ``data.weights`` and decode every drawn sample's media once
    (:func:`core.media.check_media`), quarantining those that fail.

    Raises:
        ConfigError: bad weights (see :func:`dataset_shares`).
        DataError: a dataset that cannot be read, or no sample whose media decode.
    """
    shares = dataset_shares(data.train, data.weights)
    datasets = [load_dataset_samples(directory) for directory in data.train]
    samples, quarantined, entries = [], [], []
    for position, drawn in enumerate(mix_datasets(datasets, shares, seed)):
        usable, bad = check_media(
            drawn, spec, cache, desc=f"train {position + 1}/{len(datasets)}", follow_on=follow_on
        )
        samples += usable
        quarantined += bad
        entries.append(
            {
                "path": data.train[position],
                "weight": data.weights[position] if shares else None,
                "share": shares[position] if shares else None,
                "samples": len(datasets[position]),  # in the dataset
                "drawn": len(drawn),  # for the epoch
                "used": len(usable),  # drawn, less those quarantined
            }
        )
    if not samples:  # the trainer would fail deep inside torch's sampler instead
        first = quarantined[0] if quarantined else {"file": data.train[0], "reason": "the datasets are empty"}
        raise DataError(
            first["file"],
            f"{first['reason']}: no training sample is usable (all {len(quarantined)} quarantined)",
        )
    strategy = MIX_STRATEGY if shares else "concat"
    mix = {"strategy": strategy, "seed": seed, "samples": len(samples), "datasets": entries}
    return TrainingSet(samples, quarantined, mix)


def media_kinds(sample: Sample) -> tuple[str, ...]:
    """The kinds of media a sample holds, e.g. ``("image", "video")``."""
    kinds = {part.type for turn in sample.turns for part in turn.parts}
    return tuple(sorted(kinds & {"image", "video"}))


class SampleDataset(torch.utils.data.Dataset):
    """Samples rendered for training (frames come from the cache, or are decoded here in dataloader
    workers when the cache is off)."""

    step_key = staticmethod(media_kinds)  # what every rank's batch at one step must share (MediaKindSampler)

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


class PackingCollator:
    """A stage's collator with its batch packed (``data.packing=true``; models/packing.py): the same samples
    in the same order from the sampler, laid end to end in rows of at most ``budget`` tokens (None: the
    batch's longest sample). Packing only regroups the batch the sampler drew, so the multi-rank order
    (``MediaKindSampler``), a resumed run's batches and the loss's normalisation are the unpacked ones."""

    def __init__(self, collator: Collator, budget: int | None = None):
        self.collator = collator
        self.budget = budget

    def __call__(self, rendered: list) -> dict:
        batch = self.collator(rendered)
        media = [(len(r.images), len(r.videos)) for r in rendered]
        return pack_batch(batch, media, self.collator.adapter.pad_id, self.budget)


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

    def __init__(
        self,
        samples: list[Sample],
        batch_size: int,
        world_size: int,
        seed: int = 0,
        key: Callable[[Sample], tuple] = media_kinds,
    ):
        self.block = batch_size * world_size
        self.seed, self.epoch = seed, 0
        groups: dict[tuple[str, ...], list[int]] = {}
        for index, sample in enumerate(samples):
            groups.setdefault(key(sample), []).append(index)
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
