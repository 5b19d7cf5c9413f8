"""F.scaled_dot_product_attention as the GPU's flash kernel holds it for backward.

Why: which SDPA kernel runs depends on the device. On a GPU, training takes the
flash (or memory-efficient) kernel, which keeps q, k, v, the output and a float32
logsumexp [B, heads, Sq] and never materializes the [Sq, Sk] probabilities. On
the meta device and on CPUs, PyTorch may pick the math fallback (for example with
grouped key/value heads, dropout or a mask), which keeps the probabilities:
an S^2 term that a GPU run does not have. So by default the exporter replaces
the call with this function, whose forward allocates and saves exactly what the
flash kernel does (output laid out [B, Sq, heads, D], as flash writes it) and
computes the values with the math formula outside the recording. Dropout inside
attention keeps no mask under flash (it regenerates it from the RNG state), so
dropout_p only changes values and is ignored here.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Optional

import torch

if TYPE_CHECKING:
    from tracer import Recorder


def _math_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    mask: Optional[torch.Tensor], is_causal: bool, scale: Optional[float],
                    enable_gqa: bool) -> torch.Tensor:
    """Reference attention in plain ops: [B, H, Sq, Dv]."""
    if enable_gqa and k.shape[-3] != q.shape[-3]:
        repeat = q.shape[-3] // k.shape[-3]
        k = k.repeat_interleave(repeat, dim=-3)
        v = v.repeat_interleave(repeat, dim=-3)
    factor = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    scores = torch.matmul(q, k.transpose(-2, -1)) * factor
    if is_causal:
        sq, sk = q.shape[-2], k.shape[-2]
        keep = torch.ones(sq, sk, dtype=torch.bool, device=q.device).tril(sk - sq)
        scores = scores.masked_fill(~keep, float("-inf"))
    if mask is not None:
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        else:
            scores = scores + mask
    probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
    return torch.matmul(probs, v)


class _FlashLikeAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, recorder: "Recorder", q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                mask: Optional[torch.Tensor], is_causal: bool, scale: Optional[float],
                enable_gqa: bool) -> torch.Tensor:
        batch, heads, sq, head_dim = q.shape
        sk, dv = k.shape[-2], v.shape[-1]
        with recorder.suspended():
            reference = _math_attention(q, k, v, mask, is_causal, scale, enable_gqa)
        # The kernel's output follows q's layout (torch 2.11 attention.cu: empty_like of
        # query.transpose(1, 2); the meta kernel empty_like(query)): [B, S, H, D] memory for
        # q viewed from a projection, a contiguous [B, H, S, D] for a q made contiguous in
        # that shape (SD3's torch.cat). Followed for the specs that ask (ModelSpec
        # flash_follows_q_layout); the others get [B, S, H, D] (docs/exporter.md).
        if dv == head_dim and recorder.flash_follows_q_layout:
            out_bshd = torch.empty_like(q.transpose(1, 2))
        else:
            out_bshd = torch.empty((batch, sq, heads, dv), dtype=q.dtype, device=q.device)
        lse = torch.empty((batch, heads, sq), dtype=torch.float32, device=q.device)
        with recorder.suspended():
            out_bshd.copy_(reference.transpose(1, 2))
        out = out_bshd.transpose(1, 2)
        # FLOPs as the builders count them: QK^T and PV, halved when causal
        # (flash skips masked tiles); backward 2.5x (Dao 2023, FlashAttention-2).
        fwd = 4 * batch * heads * sq * sk * head_dim
        if is_causal:
            fwd //= 2
        recorder.add_flops(fwd, 5 * fwd // 2, 0, "flash_attention")
        ctx.is_causal, ctx.scale, ctx.enable_gqa = is_causal, scale, enable_gqa
        ctx.has_mask = mask is not None
        # The memory-efficient kernel, used when a mask is given, keeps the mask too.
        saved = (q, k, v, out, lse) + ((mask,) if mask is not None else ())
        ctx.save_for_backward(*saved)
        return out

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):  # type: ignore[override]
        q, k, v = ctx.saved_tensors[:3]
        mask = ctx.saved_tensors[5] if ctx.has_mask else None
        with torch.enable_grad():
            qd, kd, vd = (t.detach().requires_grad_() for t in (q, k, v))
            out = _math_attention(qd, kd, vd, mask, ctx.is_causal, ctx.scale, ctx.enable_gqa)
            gq, gk, gv = torch.autograd.grad(out, (qd, kd, vd), grad_out)
        return None, gq, gk, gv, None, None, None, None


def flash_like_sdpa(recorder: "Recorder", query: torch.Tensor, key: torch.Tensor,
                    value: torch.Tensor, attn_mask: Optional[torch.Tensor] = None,
                    dropout_p: float = 0.0, is_causal: bool = False,
                    scale: Optional[float] = None, enable_gqa: bool = False) -> torch.Tensor:
    """Drop-in for F.scaled_dot_product_attention on [B, H, S, D] inputs."""
    del dropout_p  # values only; flash keeps no dropout mask
    if query.dim() != 4:
        return _math_attention(query, key, value, attn_mask, is_causal, scale, enable_gqa)
    return _FlashLikeAttention.apply(recorder, query, key, value, attn_mask, is_causal, scale,
                                     enable_gqa)
