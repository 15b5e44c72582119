"""The private hooks of HF's Trainer and TRL's trainers that ``train.trainer.RecipeHooks`` overrides (no
public hook exists for them: its docstring says why), checked against the installed libraries: when a new
release renames one, changes its signature or stops calling it, these fail, naming it, instead of the
recipe silently falling back to the stock behaviour. Likewise the one private attribute of a transformers
model that ``models.loading`` corrects (the key conversions saving reverses)."""

from __future__ import annotations

import inspect

import pytest
from transformers import Trainer
from trl import DPOTrainer, KTOTrainer

from train.trainer import TRL_REFERENCE_ADAPTER, RecipeHooks


def _parameters(function) -> list[str]:
    return list(inspect.signature(function).parameters)


def test_the_trainer_still_draws_its_training_sampler_from_get_train_sampler():
    assert _parameters(Trainer._get_train_sampler) == ["self", "train_dataset"]
    assert "sampler_fn=self._get_train_sampler" in inspect.getsource(Trainer.get_train_dataloader)


def test_the_trainer_still_clips_through_clip_grad_norm():
    assert _parameters(Trainer._clip_grad_norm) == ["self", "model"]
    assert "self._clip_grad_norm(" in inspect.getsource(Trainer._run_epoch)  # every optimizer step


@pytest.mark.parametrize("trainer", [DPOTrainer, KTOTrainer])
def test_trl_still_prepares_datasets_through_prepare_dataset(trainer):
    assert _parameters(trainer._prepare_dataset)[:5] == [
        "self",
        "dataset",
        "processing_class",
        "args",
        "dataset_name",
    ]
    assert "self._prepare_dataset(" in inspect.getsource(trainer.__init__)


def test_trl_still_names_its_copy_of_a_peft_adapter_ref():
    source = inspect.getsource(DPOTrainer.__init__)
    assert f'add_adapter("{TRL_REFERENCE_ADAPTER}"' in source


def test_every_override_of_the_mixin_is_a_public_hook_or_named_here():
    """A new private override must come with a test above."""
    checked = {"_get_train_sampler", "_clip_grad_norm", "_prepare_dataset"}
    private = {
        name
        for name, member in vars(RecipeHooks).items()
        if name.startswith("_") and not name.startswith("__") and callable(member)
        and any(hasattr(base, name) for base in (Trainer, DPOTrainer, KTOTrainer))
    }  # fmt: skip
    assert private == checked


def test_saving_still_reverses_the_key_conversions_a_model_keeps_from_its_load():
    from transformers import core_model_loading
    from transformers.integrations import deepspeed

    assert '"_weight_conversions"' in inspect.getsource(core_model_loading.revert_weight_conversion)
    # Under ZeRO-3 the load keeps them all, used or not (what models.loading._save_as_loaded undoes).
    zero3_load = inspect.getsource(deepspeed._load_state_dict_into_zero3_model)
    assert "._weight_conversions = weight_mapping" in zero3_load
