"""The model in eval mode for a block (dropout off), its own mode put back after: an evaluation or a
rollout in the middle of a training leaves the model training."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def eval_mode(model: torch.nn.Module) -> Iterator[None]:
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)
