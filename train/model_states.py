"""What a run's weights, gradients and optimizer state take on each GPU, by formula, for the plan.

DeepSpeed's own estimators (``estimate_zero{2,3}_model_states_mem_needs_all_live``) cannot serve: they count
parameters by ``data_ptr()``, which is 0 for every tensor on the meta device (an 8.3B model counts as its
largest tensor), and they take every parameter to be trained, so a LoRA run is priced as full fine-tuning.
The per-parameter bytes below are theirs (DeepSpeed 0.19's ``estimate_zero*_model_states_mem_needs``: 2 for a
16-bit weight, 18 for a trained one: 16-bit gradient, fp32 gradient, fp32 master weight, Adam's two fp32
moments), applied to the frozen and the trained parameters apart, plus what those estimators leave out: the
communication buckets (``train/deepspeed.py`` sizes them) and the 16-bit weights ZeRO-3 gathers.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.config import PeftMethod, TrainerConfig

HALF = 2  # bytes of a bf16 / fp16 value
TRAINED_ZERO = 18  # DeepSpeed's bytes per trained parameter, partitioned across ranks (see the docstring)
TRAINED_PLAIN_LORA = 16  # no DeepSpeed, LoRA: peft's fp32 adapters: weight, gradient, Adam's two moments
TRAINED_PLAIN_FULL = 8  # no DeepSpeed, full: bf16 weight, gradient and AdamW's two moments


@dataclass(frozen=True)
class ParameterCounts:
    """A model's parameters as the run trains them (after LoRA / freezing)."""

    total: int
    trainable: int
    largest_module: int  # the most parameters one module holds directly (ZeRO-3 gathers a module whole)

    @property
    def frozen(self) -> int:
        return self.total - self.trainable


@dataclass(frozen=True)
class ModelStates:
    """Bytes per GPU. ``buffers``: communication buckets and ZeRO-3's gathered weights."""

    weights: int
    gradients_and_optimizer: int
    buffers: int
    host: int  # bytes of host RAM per node the offloaded state takes (0 without offload)
    formula: str  # how it was computed, for the plan's report

    @property
    def total(self) -> int:
        return self.weights + self.gradients_and_optimizer + self.buffers


def model_states(
    params: ParameterCounts,
    trainer: TrainerConfig,
    method: PeftMethod,
    world_size: int,
    buckets: dict[str, float] | None = None,
) -> ModelStates:
    """Per-GPU bytes of weights, gradients, optimizer state and buffers for ``world_size`` ranks.

    Args:
        buckets: the DeepSpeed config's ``zero_optimization`` (its bucket sizes, in elements).
    """
    n = max(1, world_size)
    frozen, trained = params.frozen, params.trainable
    zero = buckets or {}
    if trainer.zero is None:
        per_trained = TRAINED_PLAIN_LORA if method is not PeftMethod.full else TRAINED_PLAIN_FULL
        return ModelStates(
            weights=HALF * frozen,
            gradients_and_optimizer=per_trained * trained,
            buffers=0,
            host=0,
            formula=f"no ZeRO: 2 B x frozen + {per_trained} B x trained, on every rank",
        )
    if trainer.zero == 2:
        bucket = HALF * int(zero.get("reduce_bucket_size", 5e8) + zero.get("allgather_bucket_size", 5e8))
        if trainer.offload:
            return ModelStates(
                weights=HALF * params.total,
                gradients_and_optimizer=0,
                buffers=bucket,
                host=int(16 * trained),
                formula="ZeRO-2, optimizer on the CPU: 2 B x all weights on every rank; buckets",
            )
        return ModelStates(
            weights=HALF * params.total,
            gradients_and_optimizer=TRAINED_ZERO * trained // n,
            buffers=bucket,
            host=0,
            formula=f"ZeRO-2: 2 B x all weights + 18 B x trained / {n} ranks; reduce + allgather buckets",
        )
    # DeepSpeed's "4 B x the largest layer" (a module's 16-bit weights gathered, and their gradient), and the
    # next modules' weights prefetched
    gathered = 2 * HALF * params.largest_module + HALF * int(zero.get("stage3_prefetch_bucket_size", 5e7))
    if trainer.offload:
        return ModelStates(
            weights=HALF * params.total // n,
            gradients_and_optimizer=0,
            buffers=gathered,
            host=int(16 * trained),
            formula=f"ZeRO-3, optimizer on the CPU: 2 B x all weights / {n} ranks; gathered modules",
        )
    return ModelStates(
        weights=HALF * frozen // n,
        gradients_and_optimizer=TRAINED_ZERO * trained // n,
        buffers=gathered,
        host=0,
        formula=f"ZeRO-3: (2 B x frozen + 18 B x trained) / {n} ranks; the largest module gathered, prefetch",
    )
