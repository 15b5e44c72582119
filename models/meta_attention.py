"""An attention that saves for backward what the GPU's fused kernels save, for measuring memory off the GPU.

On the meta device (and on a CPU) ``F.scaled_dot_product_attention`` takes the math path: it upcasts to fp32
and keeps the N x N attention weights for backward, which at video lengths overcounts attention's memory by
an order of magnitude (17x at N=4096 with 28 heads). On a GPU, training runs the flash or the memory-efficient
kernel, which save only q, k and v (unrepeated under grouped-query attention), the output, the fp32
log-sum-exp of each query row (B x H x N) and the mask if there is one, and allocate only their outputs.

``fused_kernel_attention`` is one custom op that does exactly that: its meta kernel allocates the output and
the log-sum-exp, its CPU kernel computes them (through SDPA, whose temporaries stay inside the op, as a fused
kernel's registers would), and its backward saves and returns what the fused kernels' do. Inside
``fused_kernel_sdpa()`` every ``F.scaled_dot_product_attention`` call goes through it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F

_SDPA = F.scaled_dot_product_attention


def _attention(q, k, v, mask, is_causal: bool, scale: float, enable_gqa: bool) -> torch.Tensor:
    return _SDPA(q, k, v, attn_mask=mask, is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)


def _scores(q, k, mask, is_causal: bool, scale: float) -> torch.Tensor:
    """Attention's scores, B x H x Nq x Nk, masked with -inf where a query may not look (k as many heads
    as q)."""
    scores = (q @ k.transpose(-2, -1)) * scale
    if is_causal:
        scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), -math.inf)
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else scores + mask.float()
    return scores


def _log_sum_exp(q, k, mask, is_causal: bool, scale: float) -> torch.Tensor:
    """The fp32 log-sum-exp of each query row's scores, B x H x Nq, as the fused kernels keep it."""
    k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)  # grouped-query: a key head per query group
    return _scores(q.float(), k.float(), mask, is_causal, scale).logsumexp(dim=-1)


@torch.library.custom_op("vlm_interact::fused_kernel_attention", mutates_args=())
def fused_kernel_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    is_causal: bool,
    scale: float,
    enable_gqa: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention's output (q's shape with v's head size) and its fp32 log-sum-exp (B x H x Nq)."""
    out = _empty_output(q, v)
    out.copy_(_attention(q, k, v, mask, is_causal, scale, enable_gqa))
    return out, _log_sum_exp(q, k, mask, is_causal, scale)


@fused_kernel_attention.register_fake
def _(q, k, v, mask, is_causal, scale, enable_gqa):
    return _empty_output(q, v), q.new_empty(q.shape[:-1], dtype=torch.float32)


def _empty_output(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The output laid out as the flash kernel lays it: (B, N, H, d) in memory when q is (the usual
    ``proj(x).view(B, N, H, d).transpose(1, 2)``), so the models' ``transpose(1, 2).contiguous()`` after
    attention copies nothing, as on the GPU; (B, H, N, d) otherwise."""
    batch, heads, tokens, _ = q.shape
    if q.stride(1) < q.stride(2):
        return q.new_empty(batch, tokens, heads, v.shape[-1]).transpose(1, 2)
    return q.new_empty(batch, heads, tokens, v.shape[-1])


@torch.library.custom_op("vlm_interact::fused_kernel_attention_backward", mutates_args=())
def fused_kernel_attention_backward(
    grad_out: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    is_causal: bool,
    scale: float,
    enable_gqa: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients of q, k and v (each its input's shape), by attention's backward formulas in fp32
    (autograd is off inside an op's kernel)."""
    groups = q.shape[1] // k.shape[1]
    k32, v32 = (t.float().repeat_interleave(groups, dim=1) for t in (k, v))
    q32, grad32 = q.float(), grad_out.float()
    probs = (_scores(q32, k32, mask, is_causal, scale)).softmax(dim=-1)
    grad_v = probs.transpose(-2, -1) @ grad32
    grad_probs = grad32 @ v32.transpose(-2, -1)
    grad_scores = probs * (grad_probs - (grad_probs * probs).sum(dim=-1, keepdim=True)) * scale
    grad_q, grad_k = grad_scores @ k32, grad_scores.transpose(-2, -1) @ q32
    grad_k, grad_v = (g.unflatten(1, (k.shape[1], groups)).sum(dim=2) for g in (grad_k, grad_v))
    return grad_q.to(q.dtype), grad_k.to(k.dtype), grad_v.to(v.dtype)


@fused_kernel_attention_backward.register_fake
def _(grad_out, q, k, v, mask, is_causal, scale, enable_gqa):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup_context(ctx, inputs, output) -> None:
    q, k, v, mask, is_causal, scale, enable_gqa = inputs
    out, lse = output
    # Exactly the fused kernels' saved set; lse and out are not needed by the CPU backward, but they are
    # what the GPU keeps (rng seeds for dropout aside: 24 bytes, and dropout is never on here).
    ctx.save_for_backward(q, k, v, out, lse, mask)
    ctx.is_causal, ctx.scale, ctx.enable_gqa = is_causal, scale, enable_gqa


def _backward(ctx, grad_out, _grad_lse):
    q, k, v, _out, _lse, mask = ctx.saved_tensors
    grads = fused_kernel_attention_backward(grad_out, q, k, v, mask, ctx.is_causal, ctx.scale, ctx.enable_gqa)
    return *grads, None, None, None, None


fused_kernel_attention.register_autograd(_backward, setup_context=_setup_context)


def kernel_faithful_sdpa(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> torch.Tensor:
    """``F.scaled_dot_product_attention``'s signature, through ``fused_kernel_attention``.

    Raises:
        ValueError: attention dropout is on (the fused kernels' dropout state is not modelled).
    """
    if dropout_p:
        raise ValueError(f"attention dropout {dropout_p} is not modelled by the fused-kernel stand-in")
    scale = scale if scale is not None else query.shape[-1] ** -0.5
    return fused_kernel_attention(query, key, value, attn_mask, is_causal, scale, enable_gqa)[0]


@contextmanager
def fused_kernel_sdpa() -> Iterator[None]:
    """Route every ``F.scaled_dot_product_attention`` call (transformers looks it up at call time) through
    ``kernel_faithful_sdpa`` while the context is open."""
    F.scaled_dot_product_attention = kernel_faithful_sdpa
    try:
        yield
    finally:
        F.scaled_dot_product_attention = _SDPA
