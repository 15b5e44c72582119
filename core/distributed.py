"""Rank helpers that work the same in one process and under torchrun / the deepspeed launcher.

Before the HF Trainer sets up the process group (it does so lazily), the launcher's environment
variables tell each process who it is; afterwards ``torch.distributed`` does. Every helper is a no-op
(rank 0 of 1) in a plain single-process run.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist


def _initialized() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    """This process's global rank (0 when not distributed)."""
    return dist.get_rank() if _initialized() else int(os.environ.get("RANK", 0))


def world_size() -> int:
    """The number of processes in the run (1 when not distributed)."""
    return dist.get_world_size() if _initialized() else int(os.environ.get("WORLD_SIZE", 1))


def is_main() -> bool:
    """Whether this process writes the run's shared files (summary, report, W&B): rank 0 only."""
    return rank() == 0


def barrier() -> None:
    """Wait for every rank (nothing to wait for without a process group)."""
    if _initialized() and dist.get_world_size() > 1:
        dist.barrier()


def all_true(flag: bool) -> bool:
    """Whether ``flag`` holds on every rank (each rank passes its own; a collective, so all must call)."""
    if not _initialized() or dist.get_world_size() == 1:
        return flag
    on_gpu = dist.get_backend() == "nccl"  # NCCL reduces CUDA tensors only
    device = torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")
    value = torch.tensor([int(flag)], device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MIN)
    return bool(value.item())


def zero3_enabled() -> bool:
    """Whether DeepSpeed ZeRO-3 partitions the weights (every forward pass then gathers them from all ranks,
    so all ranks must run the same modules in the same order)."""
    from transformers.integrations import is_deepspeed_zero3_enabled

    return is_deepspeed_zero3_enabled()


def broadcast(value: Any) -> Any:
    """Rank 0's ``value`` on every rank (a picklable object)."""
    if not _initialized() or dist.get_world_size() == 1:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def gather(value: Any) -> list[Any]:
    """Every rank's ``value``, in rank order, on every rank (a picklable object)."""
    if not _initialized() or dist.get_world_size() == 1:
        return [value]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def shard(items: list) -> tuple[list, list[bool]]:
    """This rank's share of ``items`` (every world_size-th, from its rank) and which of them are real: every
    rank gets the same count, a rank short of items padding with repeats of the first (``False``), so that
    all ranks run the same forward passes (under ZeRO-3 each one gathers weights from all ranks)."""
    r, n = rank(), world_size()
    mine = items[r::n]
    per_rank = -(-len(items) // n)
    padding = per_rank - len(mine)
    return mine + items[:1] * padding, [True] * len(mine) + [False] * padding


def share_cpu_process_group(args) -> None:
    """Tell accelerate, and so the HF Trainer, about a CPU process group it did not set up itself.

    Under DeepSpeed on a machine without a GPU, accelerate finds no device backend and records one process,
    although DeepSpeed has started a gloo group of several: the Trainer would then feed every rank the same
    batches (no sharding) and every rank would write the checkpoint's rank-0 files. On GPUs accelerate sets
    the group up itself and this changes nothing.

    Args:
        args: the run's ``TrainingArguments``; reading their device builds accelerate's state (and, under
            DeepSpeed, starts the process group).
    """
    from accelerate.state import PartialState

    _ = args.device
    if not _initialized() or dist.get_world_size() == 1:
        return
    state = PartialState()
    if state.backend is None and state.num_processes == 1:
        state.backend = dist.get_backend()
        state.num_processes = dist.get_world_size()
        state.process_index = dist.get_rank()
        state.local_process_index = int(os.environ.get("LOCAL_RANK", dist.get_rank()))


def shutdown() -> None:
    """Destroy the process group, if any.

    Without this, a multi-process run that finished its work is now and then aborted at interpreter exit
    (the process group's threads torn down in an arbitrary order); the last rank to leave then fails the
    launch although every result is on disk.
    """
    if _initialized():
        dist.destroy_process_group()
