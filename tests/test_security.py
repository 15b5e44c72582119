"""Security basics: no pickled weights, no remote code unless asked, API keys never written out."""

from __future__ import annotations

import shutil

import pytest
import torch

from core.config import ModelConfig
from models.loading import CheckpointNotFound, load_model


def test_remote_code_is_off_unless_a_config_turns_it_on():
    assert ModelConfig().trust_remote_code is False


def test_pickled_weights_are_refused(tiny_checkpoint, tmp_path):
    """A checkpoint that ships only a pickle (pytorch_model.bin) is not loaded: unpickling runs code."""
    from transformers import AutoModelForImageTextToText

    pickled = tmp_path / "pickled"
    shutil.copytree(tiny_checkpoint, pickled)
    model = AutoModelForImageTextToText.from_pretrained(pickled)
    for weights in pickled.glob("*.safetensors"):
        weights.unlink()
    torch.save(model.state_dict(), pickled / "pytorch_model.bin")
    with pytest.raises(CheckpointNotFound, match="no loadable checkpoint"):
        load_model(ModelConfig(name_or_path=str(pickled), family="qwen2_5_vl"))
