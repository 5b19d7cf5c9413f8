"""CUDA autocast for meta tensors: the one piece of PyTorch the oracle shims.

On a GPU, `torch.autocast("cuda")` routes every op through the AutocastCUDA
dispatch key, whose kernels cast the arguments by a per-op policy
(aten/src/ATen/autocast_mode.h, AT_FORALL_LOWER_PRECISION_FP, AT_FORALL_FP32,
AT_FORALL_FP32_SET_OPT_DTYPE, AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE,
AT_FORALL_PROMOTE; autocast_mode.cpp `cached_cast`). Meta tensors carry no
autocast key, so on the meta device autocast does nothing, and the stacks'
mixed precision would be priced as fp32.

The stacks run here on a CPU accelerator (nothing else exists on this machine),
so their own code enters `torch.autocast("cpu")` exactly where on a GPU it would
enter CUDA autocast. This module re-registers the AutocastCPU kernels so that,
for meta tensors, they apply the CUDA policy; a TLS include guard routes meta
tensors through that key whenever the stack has CPU autocast on. The casts then
happen above autograd, as on the GPU, so autograd saves what it saves there.
Which ops have a CUDA autocast kernel is read from the running torch binary;
an op there without a policy here stops the oracle (see `check_policy_table`).
"""

from __future__ import annotations

import contextlib
from typing import Callable, Dict, Iterator, List

import torch

_DK = torch._C.DispatchKey
_EXCLUDE = torch._C.DispatchKeySet(_DK.AutocastCPU)

_LOW = ("_convolution _convolution.deprecated conv1d conv2d conv3d conv_tbc conv_transpose1d "
        "conv_transpose2d.input conv_transpose3d.input convolution prelu addmm addmv addr matmul "
        "einsum mm mv linalg_vecdot linear addbmm baddbmm bmm chain_matmul linalg_multi_dot "
        "_thnn_fused_lstm_cell _thnn_fused_gru_cell lstm_cell gru_cell rnn_tanh_cell rnn_relu_cell "
        "_scaled_dot_product_flash_attention scaled_dot_product_attention cudnn_convolution "
        "cudnn_convolution_transpose _cudnn_rnn")
_FP32 = ("acos asin cosh erfinv exp expm1 log log10 log2 log1p reciprocal rsqrt sinh tan "
         "pow.Tensor_Scalar pow.Tensor_Tensor pow.Scalar softplus layer_norm native_layer_norm "
         "rms_norm group_norm frobenius_norm.dim nuclear_norm nuclear_norm.dim cosine_similarity "
         "poisson_nll_loss cosine_embedding_loss nll_loss nll_loss2d hinge_embedding_loss kl_div "
         "l1_loss smooth_l1_loss huber_loss mse_loss margin_ranking_loss multilabel_margin_loss "
         "soft_margin_loss triplet_margin_loss multi_margin_loss binary_cross_entropy_with_logits "
         "dist pdist cdist renorm logsumexp upsample_nearest1d _upsample_nearest_exact1d "
         "upsample_nearest2d _upsample_nearest_exact2d upsample_nearest3d _upsample_nearest_exact3d "
         "upsample_linear1d upsample_bilinear2d _upsample_bilinear2d_aa upsample_trilinear3d "
         "upsample_bicubic2d _upsample_bicubic2d_aa")
_FP32_SET_OPT_DTYPE = ("prod prod.dim_int prod.dim_Dimname softmax.int softmax.Dimname "
                       "log_softmax.int log_softmax.Dimname cumprod cumprod.dimname cumsum "
                       "cumsum.dimname linalg_vector_norm linalg_matrix_norm "
                       "linalg_matrix_norm.str_ord sum sum.dim_IntList sum.dim_DimnameList")
_FP32_APPEND_DTYPE = "norm.Scalar norm.ScalarOpt_dim norm.names_ScalarOpt_dim"
_PROMOTE = "addcdiv addcmul atan2 bilinear cross dot vdot grid_sampler index_put tensordot scatter_add"
# binary_cross_entropy is banned under CUDA autocast (it raises); not modelled.
_UNMODELLED = "binary_cross_entropy"

POLICY: Dict[str, str] = {}
for _names, _policy in ((_LOW, "low"), (_FP32, "fp32"), (_FP32_SET_OPT_DTYPE, "set_opt_dtype"),
                        (_FP32_APPEND_DTYPE, "append_dtype"), (_PROMOTE, "promote")):
    POLICY.update({n: _policy for n in _names.split()})


def _overload(name: str):
    """torch.ops.aten's OpOverload for 'name' or 'name.overload'."""
    base, _, overload = (name if "." in name else name + ".default").partition(".")
    return getattr(getattr(torch.ops.aten, base), overload)


def cuda_autocast_ops() -> List[str]:
    """The ops the running torch registers an AutocastCUDA kernel for, as 'name.overload'."""
    found = []
    for name in torch._C._dispatch_get_all_op_names():
        if name.startswith("aten::") and torch._C._dispatch_has_kernel_for_dispatch_key(
                name, "AutocastCUDA"):
            found.append(name[len("aten::"):])
    return sorted(found)


def check_policy_table() -> List[str]:
    """Ops with a CUDA autocast kernel in this torch and no policy here."""
    return [op for op in cuda_autocast_ops() if op not in POLICY and op not in _UNMODELLED.split()]


def _eligible(t: object) -> bool:
    return (isinstance(t, torch.Tensor) and t.device.type == "meta" and t.is_floating_point()
            and t.dtype != torch.float64)


class _CastCache:
    """autocast_mode.cpp `cached_cast`: a 16-bit cast of an fp32 leaf that requires grad
    (a weight) is made once per autocast region and reused; dropped at the region's end."""

    def __init__(self) -> None:
        self.casts: Dict[int, tuple] = {}

    def cast(self, t: torch.Tensor, dtype: torch.dtype, low: torch.dtype) -> torch.Tensor:
        if not _eligible(t) or t.dtype == dtype:
            return t
        cacheable = (dtype == low and t.dtype == torch.float32 and t.requires_grad and t.is_leaf
                     and not t._is_view() and torch.is_autocast_cache_enabled())
        if not cacheable:
            return t.to(dtype)
        hit = self.casts.get(id(t))
        if hit is None or hit[0] is not t:
            hit = (t, t.to(dtype))
            self.casts[id(t)] = hit
        return hit[1]


_CACHE = _CastCache()


def _map_tensors(args, kwargs, fn):
    def one(a):
        if isinstance(a, torch.Tensor):
            return fn(a)
        if isinstance(a, (list, tuple)) and any(isinstance(x, torch.Tensor) for x in a):
            return type(a)(one(x) for x in a)
        return a
    return [one(a) for a in args], {k: one(v) for k, v in kwargs.items()}


def _flat_tensors(args, kwargs) -> List[torch.Tensor]:
    out = []
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, torch.Tensor):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            out.extend(x for x in a if isinstance(x, torch.Tensor))
    return out


def _kernel(op, policy: str) -> Callable:
    schema_args = [a.name for a in op._schema.arguments]

    def run(*args, **kwargs):
        with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
            first = args[0] if args else None
            meta = any(_eligible(t) for t in _flat_tensors(args, kwargs))
            if not meta:
                return op(*args, **kwargs)
            low = torch.get_autocast_dtype("cpu")
            if policy == "low":
                args, kwargs = _map_tensors(args, kwargs, lambda t: _CACHE.cast(t, low, low))
            elif policy == "fp32":
                args, kwargs = _map_tensors(args, kwargs,
                                            lambda t: _CACHE.cast(t, torch.float32, low))
            elif policy == "promote":
                to = low
                for t in _flat_tensors(args, kwargs):
                    if _eligible(t) and t.dtype != to:
                        to = torch.promote_types(to, t.dtype)
                args, kwargs = _map_tensors(args, kwargs, lambda t: _CACHE.cast(t, to, low))
            elif policy == "set_opt_dtype" and _eligible(first) and "dtype" in schema_args:
                if kwargs.get("dtype") is None and len(args) <= schema_args.index("dtype"):
                    kwargs = dict(kwargs, dtype=torch.float32)
            elif policy == "append_dtype" and _eligible(first):
                return torch.norm(*args, **kwargs, dtype=torch.float32)
            return op(*args, **kwargs)

    return run


@contextlib.contextmanager
def cuda_autocast_on_meta() -> Iterator[None]:
    """While active, CPU autocast entered by the stack casts meta tensors as CUDA autocast would."""
    missing = check_policy_table()
    if missing:
        raise RuntimeError(f"cuda_autocast: torch {torch.__version__} has CUDA autocast kernels for "
                           f"ops without a policy here: {', '.join(missing)}")
    lib = torch.library.Library("aten", "IMPL")
    for name in cuda_autocast_ops():
        if name in POLICY:
            lib.impl(name, _kernel(_overload(name), POLICY[name]), "AutocastCPU")
    _passthrough_cpu_only_ops(lib)
    original_clear = torch.clear_autocast_cache

    def clear() -> None:
        _CACHE.casts.clear()
        original_clear()

    torch.clear_autocast_cache = clear
    autocast_class = torch.amp.autocast_mode.autocast
    original_init = autocast_class.__init__

    def init(self, device_type, *args, **kwargs):
        # Code that names the tensors' device (`torch.autocast(x.device.type, enabled=False)`,
        # transformers 4.x rotary embeddings) names "cuda" on a GPU, "meta" here: the
        # autocast standing in for CUDA's is the CPU's.
        original_init(self, "cpu" if device_type == "meta" else device_type, *args, **kwargs)

    autocast_class.__init__ = init
    # `torch.is_autocast_enabled()` with no device asks for CUDA's autocast, which is
    # on in the stack's forward on a GPU (PEFT's bnb LoRA layers skip their fp32 input
    # copy then, peft/tuners/lora/bnb.py `requires_conversion`): here the CPU's stands in.
    original_enabled = torch.is_autocast_enabled

    def enabled(device_type: str = "cuda") -> bool:
        return original_enabled("cpu" if device_type in ("cuda", "meta") else device_type)

    torch.is_autocast_enabled = enabled
    try:
        with torch._C._IncludeDispatchKeyGuard(_DK.AutocastCPU):
            yield
    finally:
        torch.is_autocast_enabled = original_enabled
        autocast_class.__init__ = original_init
        torch.clear_autocast_cache = original_clear
        _CACHE.casts.clear()
        lib._destroy()


def _passthrough_cpu_only_ops(lib) -> None:
    """Ops CPU autocast casts and CUDA autocast does not (cat, stack, ...): no cast on meta."""
    cuda = set(cuda_autocast_ops())
    for name in torch._C._dispatch_get_all_op_names():
        if not name.startswith("aten::"):
            continue
        short = name[len("aten::"):]
        if short in cuda or not torch._C._dispatch_has_kernel_for_dispatch_key(name, "AutocastCPU"):
            continue
        lib.impl(short, _kernel(_overload(short), "none"), "AutocastCPU")
