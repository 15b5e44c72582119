"""Training data: samples from HF datasets on disk, their frames warmed into the cache, batched.

Before training, every sample's video spans and images are decoded once into the frame cache
(with a progress bar). A sample whose media cannot be decoded is quarantined: left out, counted by
reason and listed in ``quarantine.json`` in the run directory, never dropped silently.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import torch
from tqdm import tqdm

from data_builders.errors import DataError, DecodeError
from data_builders.media import FrameCache, MediaSpec, load_image
from data_builders.sample import Sample
from train.adapter import QwenVLAdapter


def load_samples(dataset_dirs: list[str]) -> list[Sample]:
    """Read samples from HF datasets saved with ``save_to_disk`` (rows made by ``Sample.to_row``)."""
    import datasets

    samples = []
    for directory in dataset_dirs:
        if not Path(directory).exists():
            raise DataError(directory, "training dataset directory not found (build it with data_builders)")
        for row_number, row in enumerate(datasets.load_from_disk(directory), start=1):
            try:
                samples.append(Sample.from_row(row))
            except (KeyError, TypeError, ValueError) as exc:
                raise DataError(directory, f"malformed sample: {exc}", row=row_number) from exc
    return samples


def check_media(
    samples: list[Sample], media: MediaSpec, cache: FrameCache, desc: str
) -> tuple[list[Sample], list]:
    """Decode every sample's media once (warming the cache); split off those that fail.

    Returns:
        (usable samples, quarantined entries ``{"id", "file", "reason"}``).
    """
    usable, quarantined = [], []
    for sample in tqdm(samples, desc=f"decode {desc}", unit="sample"):
        try:
            for turn in sample.turns:
                for part in turn.parts:
                    if part.type == "video":
                        cache.clip(part.path, part.start, part.end, media)
                    elif part.type == "image":
                        load_image(part.path, media)
            usable.append(sample)
        except DecodeError as exc:
            quarantined.append({"id": sample.id, "file": exc.path, "reason": exc.reason})
    return usable, quarantined


def quarantine_counts(entries: list[dict]) -> dict[str, int]:
    """Quarantined items counted by the first words of their reason."""
    return dict(Counter(e["reason"].split(":")[0] for e in entries))


def write_quarantine(run_dir: str | Path, name: str, entries: list[dict]) -> None:
    path = Path(run_dir) / f"quarantine_{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(entries, indent=2))


class SampleDataset(torch.utils.data.Dataset):
    """Samples rendered for training (decoding happens here, in dataloader workers)."""

    def __init__(self, samples: list[Sample], adapter: QwenVLAdapter):
        self.samples = samples
        self.adapter = adapter

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int):
        return self.adapter.render(self.samples[index], for_generation=False)


class Collator:
    """Batches rendered samples through the processor and masks labels to trained assistant turns."""

    def __init__(self, adapter: QwenVLAdapter):
        self.adapter = adapter

    def __call__(self, rendered: list) -> dict:
        return dict(self.adapter.training_batch(rendered))
