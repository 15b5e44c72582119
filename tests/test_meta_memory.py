"""A training step's activation memory measured on the meta device (models/meta_memory.py) and the attention
stand-in it runs (models/meta_attention.py): what the stand-in saves against the GPU kernels' own meta
kernels, its gradients against SDPA, the meta measurement against real compute, and the released
Qwen2.5-VL-7B at the V2P input against the probe's numbers."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForImageTextToText, Qwen2_5_VLConfig

from core.config import PeftConfig
from models.meta_attention import fused_kernel_sdpa
from models.meta_memory import SampleShape, measure_step
from train.modes import apply_peft

GIB = 2**30


def _saved_bytes(run) -> dict[int, int]:
    """Bytes saved for backward by ``run()``, per storage."""
    saved: dict[int, int] = {}

    def pack(tensor):
        saved[tensor.untyped_storage()._cdata] = tensor.untyped_storage().nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        run()
    return saved


def _qkv(device: str, dtype: torch.dtype, tokens: int = 512, heads: int = 28, kv_heads: int = 4):
    """q, k and v as the models make them: ``proj(x).view(B, N, H, d).transpose(1, 2)``."""

    def make(h):
        return torch.randn(1, tokens, h, 128, device=device, dtype=dtype).transpose(1, 2).requires_grad_()

    return make(heads), make(kv_heads), make(kv_heads)


@pytest.mark.parametrize("kernel", ["flash", "efficient"])
def test_stand_in_saves_what_the_fused_kernels_save(kernel):
    """q, k and v unrepeated under grouped-query attention, the output and the fp32 log-sum-exp: the
    same bytes as the CUDA kernels' meta kernels save (their 16-24 bytes of dropout rng state aside), and the
    output laid out as theirs. Without the stand-in SDPA on meta keeps the N x N weights in fp32."""
    q, k, v = _qkv("meta", torch.bfloat16)
    groups = q.shape[1] // k.shape[1]
    k_full, v_full = (t.detach().repeat_interleave(groups, dim=1).requires_grad_() for t in (k, v))
    if kernel == "flash":  # the kernel takes k and v unrepeated (SDPA's enable_gqa)
        kernel_saved = _saved_bytes(
            lambda: torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True)
        )
        kernel_out = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True)[0]
        stand_in = lambda: _stand_in(q, k, v, enable_gqa=True)  # noqa: E731
    else:  # the efficient kernel gets them repeated (as transformers does when there is a mask)
        kernel_saved = _saved_bytes(
            lambda: torch.ops.aten._scaled_dot_product_efficient_attention(
                q, k_full, v_full, None, True, 0.0, True
            )
        )
        kernel_out = torch.ops.aten._scaled_dot_product_efficient_attention(q, k_full, v_full, None, True)[0]
        stand_in = lambda: _stand_in(q, k_full, v_full, enable_gqa=False)  # noqa: E731
    rng_state = {"flash": 16 + 8, "efficient": 8 + 8}[kernel]  # dropout's seed and offset
    assert sum(_saved_bytes(stand_in).values()) == sum(kernel_saved.values()) - rng_state
    assert stand_in().stride() == kernel_out.stride()
    math_path = sum(_saved_bytes(lambda: torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=True, enable_gqa=True)).values())  # fmt: skip
    assert math_path > 3 * sum(kernel_saved.values())


def _stand_in(q, k, v, enable_gqa: bool, mask=None):
    with fused_kernel_sdpa():
        causal = mask is None
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=enable_gqa
        )


@pytest.mark.parametrize("masked", [False, True])
def test_stand_in_gradients_equal_sdpa(masked):
    """Output and gradients of q, k and v as SDPA's, under grouped-query attention, causal or masked."""
    torch.manual_seed(0)
    q, k, v = _qkv("cpu", torch.float32, tokens=24, heads=4, kv_heads=2)
    mask = torch.rand(1, 1, 24, 24) > 0.3 if masked else None
    if masked:
        mask[..., 0] = True  # every query sees at least one key
    grad = torch.randn(1, 4, 24, 128)
    results = []
    for attention in (torch.nn.functional.scaled_dot_product_attention, None):
        for t in (q, k, v):
            t.grad = None
        if attention is None:
            out = _stand_in(q, k, v, enable_gqa=True, mask=mask)
        else:
            out = attention(q, k, v, attn_mask=mask, is_causal=not masked, enable_gqa=True)
        out.backward(grad)
        results.append([out.detach(), *(t.grad.clone() for t in (q, k, v))])
    for ours, sdpa in zip(results[1], results[0], strict=True):
        torch.testing.assert_close(ours, sdpa, rtol=1e-5, atol=1e-5)


def _real_width_qwen2_5_vl() -> Qwen2_5_VLConfig:
    """Qwen2.5-VL-7B's vision tower at its real width (2 of its 32 blocks: one windowed, one full) and a
    narrowed 2-layer language model with grouped-query attention and a reduced vocabulary."""
    return Qwen2_5_VLConfig(
        text_config={
            "hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 2, "num_attention_heads": 8,
            "num_key_value_heads": 2, "vocab_size": 8192, "max_position_embeddings": 4096,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]},
            "tie_word_embeddings": False,
        },
        vision_config={
            "depth": 2, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16,
            "out_hidden_size": 1024, "window_size": 112, "fullatt_block_indexes": [1], "hidden_act": "silu",
        },
        tie_word_embeddings=False,
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("gradient_checkpointing", [False, True])
def test_meta_measurement_equals_real_compute(gradient_checkpointing):
    """On the meta device, a step's bytes saved for backward, held at the loss and live at the peak are
    exactly those of the same step computed for real on the CPU (fp32: bf16 matmuls crawl on a CPU).

    What this proves, and what it does not: both runs go through the same attention stand-in (on the CPU
    its kernel computes attention for real, keeping its temporaries inside the op as a fused kernel
    does), so every other op of the model (LoRA with dropout, the window-attention vision tower, the
    placeholder scatter, rotary positions, the head and the loss, checkpointing's recomputation) is shown
    to be counted on meta as real compute holds it. That the stand-in saves what the GPU's kernels save is
    the test above, against their own meta kernels."""
    sample = SampleShape(
        tokens=400, labelled_tokens=60, video_grid_thw=((2, 8, 16),), image_grid_thw=((1, 8, 8),)
    )
    measured = []
    for device in ("meta", "cpu"):
        torch.manual_seed(0)
        with torch.device(device):
            model = AutoModelForImageTextToText.from_config(
                _real_width_qwen2_5_vl(), attn_implementation="sdpa"
            )
        model = apply_peft(model, PeftConfig(r=64, alpha=128, dropout=0.05))
        memory = measure_step(model, sample, batch_size=1, gradient_checkpointing=gradient_checkpointing)
        measured.append((memory.saved_bytes, memory.held_bytes, memory.peak_bytes, memory.saved_by_part))
    assert measured[0] == measured[1]
    assert measured[0][2] > measured[0][1] > 0


def _released_qwen2_5_vl_7b() -> Qwen2_5_VLConfig:
    """Qwen2.5-VL-7B-Instruct's shaping fields (shared spec/released-shapes.md)."""
    return Qwen2_5_VLConfig(
        text_config={
            "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
            "num_attention_heads": 28, "num_key_value_heads": 4, "rms_norm_eps": 1e-6, "hidden_act": "silu",
            "vocab_size": 152064, "max_position_embeddings": 128000, "tie_word_embeddings": False,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]},
        },
        vision_config={
            "depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16,
            "out_hidden_size": 3584, "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2,
            "window_size": 112, "fullatt_block_indexes": [7, 15, 23, 31], "tokens_per_second": 2,
            "hidden_act": "silu",
        },
        image_token_id=151655, video_token_id=151656, vision_start_token_id=151652,
        vision_end_token_id=151653, tie_word_embeddings=False,
    )  # fmt: skip


@pytest.mark.slow
def test_released_qwen2_5_vl_7b_at_the_v2p_input():
    """The probe's V2P sample (a 64-frame 720p video at <= 336^2, a 720p prompt frame, ~250 text tokens:
    N = 6054) on the released 7B with LoRA r64 in bf16: 61.0 GiB at the peak without checkpointing and
    11.6 GiB with it, as the probe measured; the language model saves 320,778 B per token and layer."""
    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(
            _released_qwen2_5_vl_7b(), dtype=torch.bfloat16, attn_implementation="sdpa"
        )
    assert sum(p.numel() for p in model.parameters()) == 8_292_166_656
    model = apply_peft(model, PeftConfig(r=64, alpha=128)).to(torch.bfloat16)  # DeepSpeed's bf16 cast
    sample = SampleShape(
        tokens=6054, labelled_tokens=250, video_grid_thw=((32, 18, 32),), image_grid_thw=((1, 52, 92),)
    )
    plain = measure_step(model, sample, batch_size=1, gradient_checkpointing=False)
    checkpointed = measure_step(model, sample, batch_size=1, gradient_checkpointing=True)
    assert plain.peak_bytes / GIB == pytest.approx(61.0, rel=0.02)
    assert checkpointed.peak_bytes / GIB == pytest.approx(11.6, rel=0.02)
    assert plain.saved_by_part["language_model"] == pytest.approx(320_778 * 6054 * 28, rel=1e-4)
