"""Liger's Triton kernels on the meta device (env `liger`, liger-kernel 0.8.5).

Liger's autograd Functions (LigerFusedLinearCrossEntropyFunction, LigerRMSNormFunction,
LigerSiLUMulFunction, LigerRopeFunction, ...) and the Python around each launch stay
Liger's own: they allocate the outputs, the fp32 rstd, the chunk buffers and the
gradients, and decide what `save_for_backward` keeps. What the oracle replaces:
- every Triton kernel of `liger_kernel.ops` (a module attribute that is a
  `triton.JITFunction`, or an autotuned / heuristics wrapper of one): `kernel[grid](...)`
  launches nothing. A launch only writes into buffers its caller allocated, so the
  allocations are the same; meta tensors have no values to write;
- the CUDA device checks that choose an allocation (`X.device.type == "cuda"`): on
  meta they would take the CPU's path. `ops/fused_linear_cross_entropy.py`
  `_can_use_mm_out` (one persistent [chunk, V] logits buffer written by `torch.mm(out=)`,
  and `grad_input` written in place, instead of a new chunk and a [chunk, H] product per
  chunk) and `fused_linear_cross_entropy_forward` (grad_weight accumulated by
  `addmm(out=grad_weight)` instead of `grad_weight += mm(...).float()`, a weight-sized
  temporary per chunk), `ops/rms_norm.py` `rms_norm_backward` (the fp32 [SMs, H] partial
  dW): recompiled with "meta" beside "cuda", and `torch.cuda.get_device_capability` /
  `get_device_properties` answer an H100/H200's (sm_90, 132 SMs) for a meta device;
- the number `fused_linear_cross_entropy_forward` reads (`target_mask.sum().item()`, the
  tokens not ignored) reads as 0 (meta_recorder.logged_values): it only scales the loss and
  the gradients the kernel writes; nothing allocated depends on it;
- `torch.equal` of meta tensors (no meta kernel) answers False: backward's "is the
  incoming gradient 1.0" (`fused_linear_cross_entropy_backward`), which decides only
  whether `element_mul_kernel` scales the kept gradients in place. Under the Trainer it is
  not 1 (the summed loss divided by the batch's token count).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
import types
from typing import Iterator

import torch

from meta_recorder import Recorder, logged_values
from patching import patched

# H100 SXM / H200: compute capability 9.0, 132 SMs (NVIDIA's Hopper tuning guide)
_HOPPER_CAPABILITY = (9, 0)
_HOPPER_SMS = 132

# (module, function) whose "cuda" device checks decide an allocation (module docstring)
_DEVICE_CHECKED = (("liger_kernel.ops.fused_linear_cross_entropy", "_can_use_mm_out"),
                   ("liger_kernel.ops.fused_linear_cross_entropy", "fused_linear_cross_entropy_forward"),
                   ("liger_kernel.ops.rms_norm", "rms_norm_backward"))
# the kernels' modules the Trainer's default patches reach (apply_liger_kernel_to_*)
_OPS = ("rms_norm", "swiglu", "geglu", "rope", "cross_entropy", "fused_linear_cross_entropy", "layer_norm",
        "utils", "llama4_rope", "qwen2vl_mrope")


class _NoLaunch:
    """A Triton kernel whose launch does nothing: `kernel[grid](*args, **meta)`."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None

    def __call__(self, *args, **kwargs):  # a kernel called as a function (none in 0.8.5)
        return None


def _is_kernel(value) -> bool:
    from triton.runtime.autotuner import Autotuner, Heuristics
    from triton.runtime.jit import JITFunction
    return isinstance(value, (JITFunction, Autotuner, Heuristics))


def _recompiled_for_meta(module: types.ModuleType, name: str):
    """`module.name` compiled again from its source with meta taken for CUDA."""
    import inspect
    import textwrap
    source = textwrap.dedent(inspect.getsource(getattr(module, name)))
    changed = source.replace('.device.type == "cuda"', '.device.type in ("cuda", "meta")')
    changed = changed.replace('.device.type != "cuda"', '.device.type not in ("cuda", "meta")')
    if changed == source:
        raise RuntimeError(f"liger_shims: {module.__name__}.{name}: no CUDA device check to extend")
    namespace = dict(vars(module))
    exec(compile(changed, inspect.getsourcefile(module), "exec"), namespace)  # noqa: S102
    return namespace[name]


def _count_read_as_logged(forward, recorder: Recorder):
    def counted(*args, **kwargs):
        with logged_values(recorder):
            return forward(*args, **kwargs)
    return counted


def _hopper_answers(stack: contextlib.ExitStack) -> None:
    capability, properties = torch.cuda.get_device_capability, torch.cuda.get_device_properties

    def get_device_capability(device=None):
        return _HOPPER_CAPABILITY if torch.device(device).type == "meta" else capability(device)

    def get_device_properties(device=None):
        if torch.device(device).type == "meta":
            return types.SimpleNamespace(multi_processor_count=_HOPPER_SMS, major=9, minor=0)
        return properties(device)

    stack.enter_context(patched(torch.cuda, "get_device_capability", get_device_capability))
    stack.enter_context(patched(torch.cuda, "get_device_properties", get_device_properties))


@contextlib.contextmanager
def liger_kernels_on_meta(recorder: Recorder) -> Iterator[None]:
    """The replacements above where liger-kernel is installed; nothing otherwise."""
    if importlib.util.find_spec("liger_kernel") is None:
        yield
        return
    with contextlib.ExitStack() as stack:
        for op in _OPS:
            module = importlib.import_module(f"liger_kernel.ops.{op}")
            for name, value in list(vars(module).items()):
                if _is_kernel(value):
                    stack.enter_context(patched(module, name, _NoLaunch(name)))
        for module_name, name in _DEVICE_CHECKED:
            module = sys.modules[module_name]
            stack.enter_context(patched(module, name, _recompiled_for_meta(module, name)))
        flce = sys.modules["liger_kernel.ops.fused_linear_cross_entropy"]
        stack.enter_context(patched(flce, "fused_linear_cross_entropy_forward",
                                    _count_read_as_logged(flce.fused_linear_cross_entropy_forward, recorder)))
        _hopper_answers(stack)
        equal = torch.equal
        stack.enter_context(patched(torch, "equal", lambda a, b, _equal=equal: False
                                    if a.device.type == "meta" else _equal(a, b)))
        yield
