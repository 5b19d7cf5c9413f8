"""torchtune's activation offloading on the meta device.

`OffloadActivations` (torchtune/training/_activation_offloading.py) is a
saved_tensors_hooks pair: pack copies every saved tensor of at least 1024 bytes
to pinned host memory on a side stream and keeps the GPU tensor in a forward
stash until `max_fwd_stash_size` later tensors are packed; unpack brings it back
on the side stream and frees it after the node that used it. Its bookkeeping,
which decides when each GPU tensor dies, runs as it is. What meta lacks is
replaced inside that module only (its `torch` name is a proxy):
- CUDA streams and events (`torch.cuda.default_stream`, `Stream`, `stream`,
  `record_event`, `wait_event`, `wait_stream`, `Tensor.record_stream`): meta has
  no concurrency, so every copy is complete when it is waited for;
- the pinned host copy (`torch.empty_like(..., device="cpu", pin_memory=True)`
  and its `copy_`): host memory, which the oracle does not count; a stand-in keeps
  the activation's layout;
- the copy back (`cpu_tensor.to("cuda")`): a new meta tensor of that layout,
  which the recorder counts like any allocation.
The recipe refuses offloading off CUDA in `__init__`; stacks/torchtune.py turns it
on after that check. Tensors torchtune's hooks pack (and its `NoOpManager` around
the output head passes through) are marked as saved activations, as the
recorder's own hooks, which they replace, would have done.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from torch.utils._python_dispatch import _disable_current_modes

from meta_recorder import Recorder
from patching import patched


class _Event:
    pass


class _Stream:
    """A CUDA stream on meta: nothing runs concurrently, so no wait ever waits."""

    def wait_stream(self, other) -> None:
        pass

    def wait_event(self, event) -> None:
        pass

    def record_event(self) -> _Event:
        return _Event()


class _HostCopy:
    """The pinned host copy of an offloaded activation: not device memory, so no
    tensor the recorder sees; it keeps the layout `empty_like` would give it."""

    def __init__(self, activation: torch.Tensor) -> None:
        with _disable_current_modes():  # made outside the recorder: host memory
            self.layout = torch.empty_like(activation)

    def copy_(self, src, non_blocking: bool = False) -> "_HostCopy":
        return self  # the device-to-host copy: no device bytes

    def to(self, device, non_blocking: bool = False) -> torch.Tensor:
        return torch.empty_like(self.layout)  # the host-to-device copy: a new device tensor


class _CudaOnMeta:
    def __getattr__(self, name: str):
        return getattr(torch.cuda, name)

    @staticmethod
    def default_stream(device=None) -> _Stream:
        return _Stream()

    @staticmethod
    def Stream(*args, **kwargs) -> _Stream:  # noqa: N802 - torch.cuda's name
        return _Stream()

    @staticmethod
    def stream(stream) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()


class _TorchOnMeta:
    """`torch` as the offloading module sees it: the real one, but for the above."""

    cuda = _CudaOnMeta()

    def __getattr__(self, name: str):
        return getattr(torch, name)

    @staticmethod
    def empty_like(t, *args, device=None, pin_memory: bool = False, **kwargs):
        if str(device) == "cpu" and t.device.type == "meta":
            return _HostCopy(t)
        return torch.empty_like(t, *args, device=device, pin_memory=pin_memory, **kwargs)


def _record_stream(original):
    def record_stream(self, stream):
        if isinstance(stream, _Stream):
            return None  # the caching allocator's cross-stream hold: no streams on meta
        return original(self, stream)
    return record_stream


def _marking(recorder: Recorder, pack):
    def marked(t: torch.Tensor):
        recorder.mark("saved_activations", [t])
        return pack(t)
    return marked


@contextlib.contextmanager
def offloading_on_meta(recorder: Recorder, enabled: bool) -> Iterator[None]:
    if not enabled:
        yield
        return
    from torchtune.training import _activation_offloading as module

    class MarkedOffload(module.OffloadActivations):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.pack_hook = _marking(recorder, self.pack_hook)

    class MarkedNoOp(module.NoOpManager):
        def __init__(self) -> None:
            super().__init__()
            self.pack_hook = _marking(recorder, self.pack_hook)

    with patched(module, "torch", _TorchOnMeta()), patched(module, "OffloadActivations", MarkedOffload), \
            patched(module, "NoOpManager", MarkedNoOp), \
            patched(torch.Tensor, "record_stream", _record_stream(torch.Tensor.record_stream)):
        yield
