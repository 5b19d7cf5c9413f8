"""bitsandbytes' CUDA gemm_4bit dispatch on the meta device (0.50.2 in hf5, trl, lg, liger).

`MatMul4Bit.forward` (autograd/_functions.py) runs `torch.ops.bitsandbytes.gemm_4bit`. On
CUDA its kernel (backends/cuda/ops.py, `register_kernel("bitsandbytes::gemm_4bit", "cuda")`)
either runs the fused cgemm_4bit kernel (only the output is allocated) or, when
M > `_gemm_4bit_custom_max_m` (1536), K is not a multiple of the blocksize, or
`_gemm_4bit_use_custom_cuda(device_index, dtype, M, N, K)` says so for the GPU's arch,
`_dequant_linear_fallback`: a 16-bit [N, K] weight `B_dq` (and, for a nested quant state,
the float32 absmax and its offset sum), the dequantize into it, then F.linear. On meta the
op runs the fake from `_ops.py`, which makes only the output: the fallback's temporaries
would never exist.

While `bnb_gemm_dispatch_on_meta(gpu)` is active, gemm_4bit on meta tensors runs these
three checks as the CUDA kernel function runs them, with the release's own
`_gemm_4bit_use_custom_fn` deciding the third; `_gpu_dispatch_props` (multiprocessor count,
major, minor) answers for the GPU the run names. Where it falls back, the release's
`_dequant_linear_fallback` runs as it is, only its ctypes kernels doing nothing
(`lib`, `_cuda_device_of`, `_get_raw_stream`); otherwise the fake's output. Nothing
changes for a release without this dispatch (bitsandbytes before 0.50: hf4bnb43, hf4bnb45).
"""

from __future__ import annotations

import contextlib
import importlib
from typing import Iterator

import torch

from bnb_shims import _NoKernels
from patching import patched

# torch.cuda.get_device_properties' (multi_processor_count, major, minor) per --gpu name
# (the grid's GPUs; NVIDIA's spec sheets)
_DISPATCH_PROPS = {"h200": (132, 9, 0), "h100": (132, 9, 0), "a100-80g": (108, 8, 0),
                   "a6000": (84, 8, 6), "3090": (82, 8, 6), "4090": (128, 8, 9)}


def _props_of(gpu: str):
    """`_gpu_dispatch_props` for `gpu`, asked only when a gemm_4bit is dispatched."""
    def props(device_index):
        if gpu not in _DISPATCH_PROPS:
            raise RuntimeError(f"oracle: bnb_gemm_shims: spec field gpu {gpu!r}: expected one of "
                               f"{sorted(_DISPATCH_PROPS)} for bitsandbytes' gemm_4bit dispatch")
        return _DISPATCH_PROPS[gpu]
    return props


def _cuda_ops():
    """bitsandbytes' backends/cuda/ops.py where it has the gemm_4bit dispatch, else None."""
    try:
        module = importlib.import_module("bitsandbytes.backends.cuda.ops")
    except ImportError:
        return None
    needed = ("_gemm_4bit_use_custom_fn", "_gemm_4bit_custom_max_m", "_dequant_linear_fallback",
              "_gpu_dispatch_props")
    return module if all(hasattr(module, name) for name in needed) else None


def uses_fused_kernel(ops, A, shapeB, blocksize: int) -> bool:
    """The CUDA gemm_4bit kernel's choice (backends/cuda/ops.py): fused kernel or fallback."""
    K = A.shape[-1]
    M = A.numel() // K
    N = shapeB[0]
    if M > ops._gemm_4bit_custom_max_m or K % blocksize != 0:
        return False
    return bool(ops._gemm_4bit_use_custom_fn(A.device.index, A.dtype, M, N, K))


def _gemm_4bit_on_meta(ops):
    def kernel(A, B, shapeB, absmax, blocksize, quant_type, bias=None, absmax_8bit=None,
               absmax_code=None, absmax_offset=None):
        if not uses_fused_kernel(ops, A, shapeB, blocksize):
            with torch._C._AutoDispatchBelowAutograd():
                return ops._dequant_linear_fallback(
                    A, B, shapeB, absmax, blocksize, quant_type, bias, absmax_8bit=absmax_8bit,
                    absmax_code=absmax_code, absmax_offset=absmax_offset)
        with torch._C._AutoDispatchBelowAutograd():
            return torch.ops.bitsandbytes.gemm_4bit.default(
                A, B, shapeB, absmax, blocksize, quant_type, bias, absmax_8bit, absmax_code,
                absmax_offset)
    return kernel


@contextlib.contextmanager
def bnb_gemm_dispatch_on_meta(gpu: str) -> Iterator[None]:
    """gemm_4bit on meta as the CUDA kernel function dispatches it on `gpu`."""
    ops = _cuda_ops()
    if ops is None:
        yield
        return
    lib = torch.library.Library("bitsandbytes", "IMPL")
    lib.impl("gemm_4bit", _gemm_4bit_on_meta(ops), "AutogradMeta")
    with contextlib.ExitStack() as stack:
        stack.enter_context(patched(ops, "_gpu_dispatch_props", _props_of(gpu)))
        stack.enter_context(patched(ops, "lib", _NoKernels(ops.lib)))
        stack.enter_context(patched(ops, "_cuda_device_of", lambda A: contextlib.nullcontext()))
        stack.enter_context(patched(ops, "_get_raw_stream", lambda index: None))
        ops._gemm_4bit_use_custom_fn.cache_clear()  # answers cached for another GPU
        try:
            yield
        finally:
            ops._gemm_4bit_use_custom_fn.cache_clear()
            lib._destroy()
