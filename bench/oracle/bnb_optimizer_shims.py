"""bitsandbytes' optimizers (AdamW8bit, PagedAdamW, PagedAdamW8bit) on the meta device.

What decides which tensor gets which state is the release's own Python, run as it is:
`Optimizer8bit.step` and `check_overrides`, the `GlobalOptimManager` (the Trainer's
32-bit override of every `nn.Embedding` weight), `Optimizer2State.init_state` (uint8
codes beside one fp32 absmax per 256-element block, fp32 states under
`min_8bit_size`, the two 256-value quantization maps moved to the device) and
`get_state_buffer` (paged from 1e5 elements). Replaced, while `bnb_optimizers_on_meta`
is active (bitsandbytes 0.50.2 `functional.py`, `optim/optimizer.py`):
- the update kernels: nothing. `optimizer_update_8bit_blockwise` and
  `optimizer_update_32bit` are torch ops with registered fake kernels (`_ops.py`); on meta
  they check their arguments and allocate nothing, as the CUDA kernels do (in place);
- `get_paged`: `cget_managed_ptr` (cudaMallocManaged) and the numpy view over it become a
  meta tensor of the same shape and dtype, marked `is_paged` as the release marks it,
  made outside the recorder's dispatch mode and disowned: unified memory is not the
  caching allocator's, so it is not in the peak. Its bytes are summed in
  `Recorder.paged_optimizer_states` (the result's `paged_optimizer_states_bytes`), as
  headroom's `paged_optimizer_states_bytes` is beside its breakdown;
- the ctypes kernels the paged path calls (`cfill_fp32`/`cfill_uint8` from `F.fill`,
  `cprefetch` from `prefetch_tensor`): they return at once (`bnb_shims._NoKernels`), with
  `get_ptr` answering None for a meta tensor, which has no address.
Each run starts with fresh `GlobalOptimManager` and `GlobalPageManager` singletons, as a
new process does: the oracle runs several runs per process, and the manager keeps the
modules it was given (their ids decide the overrides).
"""

from __future__ import annotations

import contextlib
import math
from typing import Iterator

import torch
from torch.utils._python_dispatch import _disable_current_modes

from bnb_shims import _NoKernels
from meta_recorder import Recorder
from patching import patched

# transformers' `optim` names that build a bitsandbytes optimizer (trainer_optimizer.py
# `_get_bitsandbytes_optimizer`, the ones the grid runs)
BNB_OPTIMS = ("adamw_bnb_8bit", "adamw_8bit", "paged_adamw_8bit", "paged_adamw_32bit")


def _paged_on_meta(recorder: Recorder):
    def get_paged(*shape, dtype=torch.float32, device=None):
        with _disable_current_modes():
            out = torch.empty(shape, dtype=dtype, device="meta")
        recorder.disown([out])
        recorder.paged_optimizer_states += out.dtype.itemsize * math.prod(shape)
        out.is_paged = True
        # the CUDA index the release reads back (prefetch_tensor's ct.c_int32); meta has none
        out.page_deviceid = getattr(device, "index", None) or 0
        return out
    return get_paged


@contextlib.contextmanager
def bnb_optimizers_on_meta(recorder: Recorder) -> Iterator[None]:
    """The replacements above (module docstring)."""
    import bitsandbytes.functional as F
    import bitsandbytes.optim.optimizer as optimizer

    for manager in (optimizer.GlobalOptimManager, F.GlobalPageManager):
        manager._instance = None
    with patched(F, "get_paged", _paged_on_meta(recorder)), patched(F, "lib", _NoKernels(F.lib)), \
            patched(F, "get_ptr", lambda A: None):
        yield
    for manager in (optimizer.GlobalOptimManager, F.GlobalPageManager):
        manager._instance = None
