"""A DeepSpeed accelerator whose device is `meta`: DeepSpeed's ZeRO on the oracle.

DeepSpeed asks its accelerator (`deepspeed.accelerator.get_accelerator()`) for the
device every buffer goes to: the engine moves the module to `device_name(local_rank)`,
ZeRO-1/2 copies its fp32 partitions to `current_device_name()`, ZeRO-3 places each
parameter on `local_device`. With the CPU accelerator those are host tensors, and a
meta module cannot be copied there ("Cannot copy out of meta tensor"). This one
answers `meta` for the device and what a GPU answers for the ordering questions, and
nothing else: every buffer ZeRO makes, keeps and frees, and when, stays DeepSpeed's
own code (stage_1_and_2.py, stage3.py, partition_parameters.py).

It is the CPU accelerator (deepspeed/accelerator/cpu_accelerator.py) with these
overrides; each says why in one line.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch

from fake_pg import _DEFAULT_STREAM, _Event, _Stream
from patching import patched


def _meta_accelerator_class():
    from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator

    class MetaAccelerator(CPU_Accelerator):
        def __init__(self) -> None:
            super().__init__()
            self._name = "meta"  # DeepSpeed names devices after the accelerator

        # CUDA's answers (cuda_accelerator.py): ZeRO takes the GPU's paths (side streams,
        # events, overlap_comm's reduction stream), not the CPU's synchronous ones
        def is_synchronized_device(self) -> bool:
            return False

        def device_name(self, device_index=None) -> str:
            return "meta"  # the engine's and ZeRO's `.to(device)` land on meta

        def current_device_name(self) -> str:
            return "meta"  # ZeRO-1/2's fp32 partition and its gradient buffers

        def device(self, device_index=None) -> torch.device:
            return torch.device("meta")

        def current_device(self) -> int:
            return 0  # rank 0 of the fake group; the CPU's reads LOCAL_RANK as a string

        def device_count(self) -> int:
            return 1  # one process plays rank 0; the CPU's counts NUMA nodes

        def on_accelerator(self, tensor) -> bool:
            return tensor.device.type == "meta"  # DeepSpeed checks inputs are on the device

        # streams and events order kernels on a GPU; on meta ops run in program order
        # (fake_pg.py's no-op Stream and Event, as FSDP gets them)
        @property
        def Stream(self):
            return _Stream

        @property
        def Event(self):
            return _Event

        def current_stream(self, device_index=None):
            return _DEFAULT_STREAM

        def default_stream(self, device_index=None):
            return _DEFAULT_STREAM

        # memory statistics: DeepSpeed logs them (see_memory_usage); the recorder counts
        # the bytes, host RSS would be wrong and slow
        def memory_allocated(self, device_index=None) -> int:
            return 0

        def max_memory_allocated(self, device_index=None) -> int:
            return 0

        def memory_reserved(self, device_index=None) -> int:
            return 0

        def max_memory_reserved(self, device_index=None) -> int:
            return 0

        def memory_stats(self, device_index=None) -> dict:
            return {"allocated_bytes.all.current": 0, "allocated_bytes.all.peak": 0}

        def total_memory(self, device_index=None) -> int:
            return 141 * 2**30  # an H200's, for DeepSpeed's memory-based heuristics

        def available_memory(self, device_index=None) -> int:
            return self.total_memory()

        # no DeepSpeed kernel is built or run on meta (the CPU's would JIT-build its
        # shared-memory collectives when deepspeed.comm starts)
        def create_op_builder(self, op_name):
            return None

        def get_op_builder(self, class_name):
            return None

        # pinning pages host memory; a meta tensor has none (the CPU's is the identity too)
        def pin_memory(self, tensor, make_copy=True, match_shape=True):
            return tensor

        def is_pinned(self, tensor) -> bool:
            return False

    return MetaAccelerator


def _record_stream_of_meta(original):
    """`Tensor.record_stream` on a meta tensor does nothing: on a GPU it only delays the
    caching allocator's reuse of the block (reserved memory); allocated bytes drop
    when the tensor is freed, which the recorder sees."""
    def record_stream(self, stream):
        if self.device.type == "meta":
            return None
        return original(self, stream)
    return record_stream


class _TorchWithHostOnMeta:
    """`torch` as ZeRO-3's `defragment` (runtime/zero/utils.py) sees it: its host staging
    buffer (`torch.empty(..., device="cpu")`, a copy of the 16-bit partitions while the
    device ones are freed and made again as one flat buffer) is made on meta, as a meta
    tensor cannot be copied to the host. `.to(device)` of it then returns the same tensor,
    so the flat buffer exists from the start of the copy: the setup's peak, which the
    recorder forgets when the step begins (Recorder.begin), holds the 16-bit partitions
    twice; the step's is unchanged."""

    def __getattr__(self, name):
        return getattr(torch, name)

    @staticmethod
    def empty(*args, device=None, **kwargs):
        return torch.empty(*args, device="meta" if str(device) == "cpu" else device, **kwargs)


def _autocast_of_meta(original):
    """ZeRO-3's linear (runtime/zero/linear.py) asks autocast's state for the accelerator's
    device type; the stacks enter autocast for "cpu", whose policy is CUDA's on meta
    tensors (cuda_autocast.py), so "meta" is answered with the CPU's state."""
    def of_device(device_type):
        return original("cpu" if device_type == "meta" else device_type)
    return of_device


@contextlib.contextmanager
def meta_accelerator() -> Iterator[object]:
    """DeepSpeed's accelerator set to the meta one for the duration; yields it."""
    from deepspeed.accelerator import real_accelerator
    from deepspeed.runtime.zero import linear as zero_linear
    from deepspeed.runtime.zero import utils as zero_utils

    accelerator = _meta_accelerator_class()()
    saved = real_accelerator.ds_accelerator
    real_accelerator.set_accelerator(accelerator)
    try:
        with patched(torch.Tensor, "record_stream", _record_stream_of_meta(torch.Tensor.record_stream)), \
                patched(zero_utils, "torch", _TorchWithHostOnMeta()), \
                patched(zero_linear, "_get_autocast_dtype", _autocast_of_meta(zero_linear._get_autocast_dtype)), \
                patched(zero_linear, "_is_autocast_enabled", _autocast_of_meta(zero_linear._is_autocast_enabled)):
            yield accelerator
    finally:
        real_accelerator.ds_accelerator = saved
