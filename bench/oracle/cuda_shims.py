"""What the oracle changes so that CUDA-only code paths run on the meta device.

Each shim replaces a device check or a kernel, never the code around it that
decides what is allocated and kept:
- scaled_dot_product_attention: the CUDA kernel choice (below);
- dropout: CUDA's fused kernel (below);
- a boolean-mask index (`x[mask]`): its `nonzero` needs the mask's values, which
  meta has none of (BooleanMaskIndex, below);
- transformers 4.x's MoE loops: each expert's routed row count, a `nonzero`
  (BalancedExpertRouting) or DeepSeek-V2's counts read in Python
  (BalancedExpertCounts), answered as balanced routing;
- fused and foreach optimizers: torch/utils/_foreach_utils.py lists the devices
  with fused (`_get_fused_kernels_supported_devices`) and foreach
  (`_get_foreach_kernels_supported_devices`) kernels, and torch/optim/optimizer.py
  `_default_to_fused_or_foreach` picks foreach only on those: on meta every
  optimizer would run its for-loop, whose temporaries are one tensor at a time.
  meta is added to both lists, so the optimizer (and clip_grad_norm_'s
  `_foreach_norm`) take the implementation they take on CUDA, and torch's own meta
  kernels of `_fused_adamw_` and the `_foreach_*` ops run.
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Iterator

import torch
import torch.optim.optimizer as _optimizer
import torch.utils._foreach_utils as _foreach_utils
from torch.utils._python_dispatch import TorchDispatchMode


_DEVICE_LISTS = ("_get_fused_kernels_supported_devices", "_get_foreach_kernels_supported_devices")


@contextlib.contextmanager
def fused_optimizers_on_meta() -> Iterator[None]:
    """The optimizers' fused and foreach kernels, as on CUDA (module docstring)."""
    saved = []
    for module in (_optimizer, _foreach_utils):
        for name in _DEVICE_LISTS:
            original = getattr(module, name)
            saved.append((module, name, original))
            setattr(module, name, lambda original=original: list(original()) + ["meta"])
    try:
        yield
    finally:
        for module, name, original in saved:
            setattr(module, name, original)


# -- scaled_dot_product_attention ---------------------------------------------
# On CUDA, F.scaled_dot_product_attention picks a fused kernel
# (aten/src/ATen/native/transformers/cuda/sdp_utils.cpp `select_sdp_backend`,
# default order flash, memory-efficient, math); on meta it always runs the math
# composite, which keeps the [Sq, Sk] probabilities a GPU run never makes. The
# shim makes the CUDA choice and calls torch's own flash / memory-efficient ops,
# whose meta kernels and autograd formulas (tools/autograd/derivatives.yaml)
# decide what is allocated and saved. Constraints taken from sdp_utils.cpp:
# flash needs fp16/bf16, no attn_mask, head_dim a multiple of 8 and at most 256,
# the same in q, k and v (`check_head_dim_size_flash`: MLA's v is narrower than
# q and k, so DeepSeek runs memory-efficient); memory-efficient also takes a
# mask and fp32, but not grouped kv heads.

def _sdpa_backend(q, k, v, attn_mask, enable_gqa) -> str:
    head_dim = q.shape[-1]
    half = q.dtype in (torch.float16, torch.bfloat16)
    dims_ok = head_dim % 8 == 0 and v.shape[-1] % 8 == 0
    grouped = enable_gqa and k.shape[-3] != q.shape[-3]
    if q.dim() != 4:
        return "math"
    same_dims = k.shape[-1] == head_dim and v.shape[-1] == head_dim
    if half and attn_mask is None and dims_ok and same_dims and head_dim <= 256:
        return "flash"
    if dims_ok and not grouped:
        return "efficient"
    return "math"


def _sdpa_on_meta(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                  scale=None, enable_gqa=False):
    backend = _sdpa_backend(query, key, value, attn_mask, enable_gqa)
    if backend == "flash":
        return torch.ops.aten._scaled_dot_product_flash_attention(
            query, key, value, dropout_p, is_causal, False, scale=scale)[0]
    if backend == "efficient":
        bias = attn_mask
        if bias is not None and bias.dtype == torch.bool:
            # attention.cpp `convert_boolean_attn_mask`: a new additive mask in q's dtype
            bias = torch.zeros_like(bias, dtype=query.dtype).masked_fill(~bias, float("-inf"))
        if bias is not None:
            bias = bias.expand(query.shape[0], query.shape[1], query.shape[2], key.shape[2])
        return torch.ops.aten._scaled_dot_product_efficient_attention(
            query, key, value, bias, True, dropout_p, is_causal, scale=scale)[0]
    return torch.ops.aten._scaled_dot_product_attention_math(
        query, key, value, attn_mask, dropout_p, is_causal, None, scale=scale,
        enable_gqa=enable_gqa)[0]


@contextlib.contextmanager
def _autograd_meta_kernel(op: str, kernel) -> Iterator[None]:
    """`kernel` in place of a composite op for meta tensors, above autograd, while active."""
    lib = torch.library.Library("aten", "IMPL")
    lib.impl(op, kernel, "AutogradMeta")
    try:
        yield
    finally:
        lib._destroy()


def cuda_sdpa_on_meta():
    return _autograd_meta_kernel("scaled_dot_product_attention", _sdpa_on_meta)


# -- dropout --------------------------------------------------------------------
# aten/src/ATen/native/Dropout.cpp: `dropout` takes the fused `native_dropout`
# when `is_fused_kernel_acceptable` (a CUDA input, 0 < p < 1, not empty), which
# keeps a bool mask (one byte per element) for backward; elsewhere, meta
# included, it builds the mask with `empty_like(input).bernoulli_()` in the
# input's dtype (four bytes per element for an fp32 input).

def _dropout_on_meta(input, p, train):
    if train and 0.0 < p < 1.0 and input.numel() > 0:
        return torch.ops.aten.native_dropout(input, p, train)[0]
    if not train or p == 0.0 or input.numel() == 0:
        return input  # _dropout_impl returns its input unchanged
    return input * 0  # p == 1


def cuda_dropout_on_meta():
    return _autograd_meta_kernel("dropout", _dropout_on_meta)


class BooleanMaskIndex(TorchDispatchMode):
    """`x[mask]` with a boolean mask on meta, as CUDA runs it: `nonzero` gives one int64
    index row per mask dimension, then `index` gathers. How many positions are true the
    stack says: every one (`valid_per_row` None: labels without -100), or the last
    `valid_per_row` of each row of a 2-D mask (a completion's labels after its prompt's)."""

    def __init__(self, valid_per_row: int | None = None):
        super().__init__()
        self.valid_per_row = valid_per_row

    def _true_positions(self, mask: torch.Tensor) -> int:
        if self.valid_per_row is None or mask.dim() < 2:
            return mask.numel()
        return mask.shape[0] * min(self.valid_per_row, mask.shape[-1])

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.index.Tensor and any(_is_meta_mask(i) for i in args[1]):
            indices = []
            for index in args[1]:
                if _is_meta_mask(index):
                    rows = torch.empty(self._true_positions(index), dtype=torch.long, device="meta")
                    indices += [rows] * index.dim()
                else:
                    indices.append(index)
            return func(args[0], indices)
        return func(*args, **(kwargs or {}))


def _is_meta_mask(index) -> bool:
    return isinstance(index, torch.Tensor) and index.dtype == torch.bool and index.device.type == "meta"


class BalancedExpertRouting(TorchDispatchMode):
    """transformers 4.x's mixture-of-experts loop (MixtralSparseMoeBlock.forward,
    Qwen2MoeSparseMoeBlock.forward, 4.44.2) asks `torch.where(expert_mask[j])` of
    each expert j: a `nonzero` whose row count is how many (token, slot) pairs the
    router sent to j, which meta cannot know. Answered as balanced routing: the
    k*T pairs of a layer's mask shared out over its `experts` calls in turn (floor
    or ceil of k*T/E each, k*T in all), so a layer's E calls, and a checkpointed
    layer's recomputed ones, see the same counts. Only `nonzero` on meta changes."""

    def __init__(self, experts: int):
        super().__init__()
        self.experts = experts
        self.calls = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.nonzero.default and args[0].device.type == "meta":
            mask = args[0]
            j = self.calls % self.experts
            self.calls += 1
            pairs = mask.numel()
            rows = (j + 1) * pairs // self.experts - j * pairs // self.experts
            return torch.empty((rows, mask.dim()), dtype=torch.long, device="meta")
        return func(*args, **(kwargs or {}))


class BalancedExpertCounts(TorchDispatchMode):
    """DeepseekV2MoE.moe (transformers 4.57.6, models/deepseek_v2/modeling_deepseek_v2.py)
    counts each expert's rows as `tokens_per_expert = cnts.sum(dim=0)` ([E] int64),
    then loops in Python over those counts: `if num_tokens == 0`, `end_idx =
    start_idx + num_tokens`, `sorted_tokens[start_idx:end_idx]`. Each of those asks
    a count's value (`_local_scalar_dense`), which meta has none of. Answered as
    balanced routing, as BalancedExpertRouting does: expert i of a layer holds floor
    or ceil of k*T/E of the k*T sorted rows. The counts are followed from the sum
    over an int64 [T, E] meta tensor through unbind, `+` and `== 0` (their values
    held by weak reference, so nothing is kept alive); only the value queries on
    meta are answered, every op still runs."""

    def __init__(self, experts: int, top_k: int):
        super().__init__()
        self.experts = experts
        self.top_k = top_k
        self.values: dict[int, tuple[object, int]] = {}

    def _value(self, t):
        if isinstance(t, (int, bool)):
            return int(t)
        if isinstance(t, torch.Tensor) and t.device.type != "meta" and t.numel() == 1 and not t.is_floating_point():
            return int(t.item())  # a Python int wrapped as a 0-d tensor (`start_idx + num_tokens`)
        entry = self.values.get(id(t)) if isinstance(t, torch.Tensor) else None
        return entry[1] if entry is not None and entry[0]() is t else None

    def _hold(self, t, value) -> None:
        self.values[id(t)] = (weakref.ref(t), value)

    def _is_counts_sum(self, func, args) -> bool:
        x = args[0]
        return (func is torch.ops.aten.sum.dim_IntList and x.device.type == "meta" and x.dtype == torch.long
                and x.dim() == 2 and x.shape[1] == self.experts and list(args[1]) == [0])

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        aten = torch.ops.aten
        if func is aten._local_scalar_dense.default and args[0].device.type == "meta":
            value = self._value(args[0])
            if value is not None:
                return value
        out = func(*args, **(kwargs or {}))
        if self._is_counts_sum(func, args):
            self._hold(out, args[0].shape[0] * self.top_k)  # the layer's k*T pairs
        elif func is aten.unbind.int and self._value(args[0]) is not None:
            pairs = self._value(args[0])
            for i, count in enumerate(out):
                self._hold(count, (i + 1) * pairs // self.experts - i * pairs // self.experts)
        elif func in (aten.add.Tensor, aten.add.Scalar) and len(args) == 2:
            a, b = self._value(args[0]), self._value(args[1])
            if a is not None and b is not None and (isinstance(args[0], torch.Tensor) or isinstance(args[1], torch.Tensor)):
                self._hold(out, a + b)
        elif func in (aten.eq.Scalar, aten.eq.Tensor) and self._value(args[0]) is not None:
            b = self._value(args[1])
            if b is not None:
                self._hold(out, int(self._value(args[0]) == b))
        return out


def _transformers_release() -> str:
    import transformers  # the stacks' environments have it; the recorder's tests need not

    return transformers.__version__


def expert_routing_for(model) -> contextlib.AbstractContextManager:
    """BalancedExpertRouting for a model whose config names its experts (Mixtral's
    num_local_experts, Qwen2-MoE's num_experts, DeepSeek-V3's n_routed_experts),
    and BalancedExpertCounts too for DeepSeek-V2's loop over counts; nothing for
    any other model."""
    config = getattr(model, "config", None)
    experts = getattr(config, "num_local_experts", None) or getattr(config, "num_experts", None)
    if _transformers_release().startswith("4."):  # 5.x runs DeepSeek's experts fused, with no loop
        experts = experts or getattr(config, "n_routed_experts", None)
    if not experts:
        return contextlib.nullcontext()
    stack = contextlib.ExitStack()
    stack.enter_context(BalancedExpertRouting(experts))
    if getattr(config, "model_type", "") == "deepseek_v2":
        stack.enter_context(BalancedExpertCounts(experts, config.num_experts_per_tok))
    return stack
