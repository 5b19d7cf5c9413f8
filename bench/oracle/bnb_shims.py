"""bitsandbytes releases without fake kernels (before 0.46) on the meta device.

bitsandbytes 0.46 registers its 4-bit ops with torch.library, fake kernels included, and
runs on meta as it is. Before, `bitsandbytes/functional.py` calls its CUDA library through
ctypes (`lib.cquantize_blockwise_bf16_nf4(get_ptr(A), ...)`). What is replaced, and only
while the oracle runs (`bnb_kernels_on_meta`):
- the C kernels: every `lib.c*` call returns without touching memory. The Python around
  each (`quantize_4bit`, `dequantize_4bit`, `quantize_blockwise`, `dequantize_blockwise`)
  is the release's own, so each output tensor is allocated by it, at its shape and dtype;
- the device glue around the kernels: `is_on_gpu`, `get_ptr` (a meta tensor has no
  pointer), `pre_call`/`post_call` and `_cuda_device_of` (cuda.set_device),
  `_get_tensor_stream`;
- two device checks, each one line of the release's function, recompiled with meta
  accepted (`_recompiled` checks the line is there): `quantize_4bit`'s
  `if A.device.type != "cuda"` and, up to 0.43.1, `Params4bit._quantize`'s `.cuda(device)`;
- transformers 4.x `is_bitsandbytes_available()` asks `torch.cuda.is_available()`: it
  answers whether bitsandbytes is installed, as it does on a GPU machine.
`MatMul4Bit`, `Params4bit`, `Linear4bit` and `QuantState` are the release's code.

Up to 0.43.1 bitsandbytes also imports `triton.ops.matmul_perf_model`
(`bitsandbytes/triton/int8_matmul_mixed_dequantize.py` and
`int8_matmul_rowwise_dequantize.py`, line 12), which triton 3 removed; the two functions
it imports only feed SwitchBackLinear's int8 autotuning (`stub_triton_ops`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import sys
import textwrap
import types
from typing import Iterator

from patching import patched


def _refuse(*_args, **_kwargs):
    raise RuntimeError("oracle: triton.ops stub called (SwitchBackLinear's int8 autotuning)")


def stub_triton_ops() -> None:
    """`triton.ops.matmul_perf_model` for a bitsandbytes that imports it, where triton has
    none; its functions refuse to run."""
    if importlib.util.find_spec("triton") is None or "triton.ops" in sys.modules:
        return
    try:
        import triton.ops  # noqa: F401
        return
    except ImportError:
        pass
    ops = types.ModuleType("triton.ops")
    model = types.ModuleType("triton.ops.matmul_perf_model")
    model.early_config_prune = model.estimate_matmul_time = _refuse
    ops.matmul_perf_model = model
    sys.modules["triton.ops"] = ops
    sys.modules["triton.ops.matmul_perf_model"] = model


def _bnb_release():
    """bitsandbytes' (major, minor), None where it is not installed (without `packaging`,
    which not every environment has)."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return tuple(int(part) for part in version("bitsandbytes").split(".")[:2])
    except PackageNotFoundError:
        return None


class _NoKernels:
    """The release's ctypes library, its `c*` kernels doing nothing."""

    def __init__(self, lib):
        self._lib = lib

    def __getattr__(self, name):
        if name.startswith("c"):
            return lambda *args: None
        return getattr(self._lib, name)


def _recompiled(func, old: str, new: str):
    """`func` (a module-level function or a method) with one line's `old` made `new`."""
    source = textwrap.dedent(inspect.getsource(func))
    if source.count(old) != 1:
        raise RuntimeError(f"oracle: {func.__qualname__}: expected one `{old}` in the release's code")
    namespace: dict = {}
    exec(compile(source.replace(old, new), inspect.getsourcefile(func), "exec"),  # noqa: S102
         func.__globals__, namespace)
    return namespace[func.__name__]


def _is_on_gpu(tensors):
    return all(t is None or t.device.type in ("cuda", "meta") or getattr(t, "is_paged", False)
               for t in tensors)


def _glue(F) -> dict:
    glue = {"lib": _NoKernels(F.lib), "is_on_gpu": _is_on_gpu,
            "get_ptr": lambda A: None, "pre_call": lambda device: None,
            "post_call": lambda device: None,
            "quantize_4bit": _recompiled(F.quantize_4bit, 'A.device.type != "cuda"',
                                         'A.device.type not in ("cuda", "meta")')}
    if hasattr(F, "_cuda_device_of"):
        glue["_cuda_device_of"] = lambda A: contextlib.nullcontext()
    if hasattr(F, "_get_tensor_stream"):
        glue["_get_tensor_stream"] = lambda A: None
    return glue


# transformers 4.44.2's modules that ask is_bitsandbytes_available() while a run is built
_ASKING_MODULES = ("transformers.utils.import_utils", "transformers.utils", "transformers.integrations.bitsandbytes",
                   "transformers.quantizers.quantizer_bnb_4bit", "transformers.modeling_utils",
                   "transformers.trainer")


def _transformers_sees_bnb(stack: contextlib.ExitStack) -> None:
    """transformers 4.x: `is_bitsandbytes_available` without its CUDA question."""
    try:
        import transformers.integrations.bitsandbytes as integration
        from transformers.utils import import_utils
    except ImportError:
        return
    import bitsandbytes

    installed = lambda: import_utils._bitsandbytes_available  # noqa: E731
    asks_cuda = "torch.cuda.is_available" in inspect.getsource(import_utils.is_bitsandbytes_available)
    for name in _ASKING_MODULES if asks_cuda else ():
        module = importlib.import_module(name)
        stack.enter_context(patched(module, "is_bitsandbytes_available", installed))
    if not hasattr(integration, "bnb"):
        # the names its `if is_bitsandbytes_available():` import block binds
        import torch
        from transformers.pytorch_utils import Conv1D
        for name, value in (("bnb", bitsandbytes), ("torch", torch), ("nn", torch.nn),
                            ("Conv1D", Conv1D)):
            stack.enter_context(patched(integration, name, value))


@contextlib.contextmanager
def bnb_kernels_on_meta() -> Iterator[None]:
    """The replacements above, for a bitsandbytes before 0.46; nothing otherwise."""
    release = _bnb_release()
    if release is None or release >= (0, 46):
        yield
        return
    stub_triton_ops()
    import bitsandbytes.functional as F
    from bitsandbytes.nn import Params4bit
    with contextlib.ExitStack() as stack:
        for name, value in _glue(F).items():
            stack.enter_context(patched(F, name, value))
        if ".cuda(device)" in inspect.getsource(Params4bit._quantize):
            quantize = _recompiled(Params4bit._quantize, ".cuda(device)", ".to(device)")
            stack.enter_context(patched(Params4bit, "_quantize", quantize))
        _transformers_sees_bnb(stack)
        yield


@contextlib.contextmanager
def params4bit_deepcopy_on_meta() -> Iterator[None]:
    """PEFT's DoRA deep-copies a Linear4bit before it dequantizes the weight
    (peft/tuners/lora/dora.py DoraLinearLayer.update_layer). Params4bit.__deepcopy__
    starts from `type(self).__new__(type(self))`, an empty CPU tensor, and sets its
    `.data` to the copied weight: on a GPU a CPU tensor takes CUDA data, but not meta
    data (set_data's compatible-type check). The copy is started on the weight's own
    device instead; the rest is the release's code."""
    from bitsandbytes.nn import Params4bit
    old = "type(self).__new__(type(self))"
    source = inspect.getsource(Params4bit.__deepcopy__)
    if old not in source:  # a release whose deepcopy starts otherwise: nothing to shim
        yield
        return
    copy_on_device = _recompiled(Params4bit.__deepcopy__, old,
                                 "type(self).__new__(type(self), torch.empty(0, device=self.device))")
    with patched(Params4bit, "__deepcopy__", copy_on_device):
        yield
