"""One process as rank 0 of N: what sharded training needs of a device and a network.

torch's FSDPs run their own code for what is gathered, kept and freed; what they
ask of the hardware is replaced here, and nothing else:

- **the process group**: torch's fake backend (`torch.testing._internal.distributed.
  fake_pg`, `FakeProcessGroup`): every collective returns at once without touching
  data. The buffers FSDP passes to it are FSDP's own, allocated by FSDP's code.
- **the device**: the DeviceMesh is on "meta" (`init_device_mesh("meta", (N,))`), and
  FSDP2's device is meta (`_get_device_from_mesh`, which would ask for a device index
  meta does not have), so every buffer it allocates (`torch.empty(..., device=
  self.device)`) is a meta tensor the recorder sees. A CPU mesh would put the
  all-gather buffers in host memory beside meta parameters. FSDP1 is given
  `device_id=meta` (its compute device) and a `param_init_fn` that leaves the
  module as it is: on meta it would otherwise "materialize" the module with
  `to_empty` and each module's `reset_parameters`, which transformers' modules lack
  (`_init_utils.py` `_materialize_meta_module`); on the oracle meta is the device.
- **streams and events**: the FSDPs ask the device's module (`getattr(torch,
  device.type)`, `_get_device_handle`) for them; `torch.meta` is given one whose
  streams and events do nothing. On the GPU
  they order kernels; FSDP2 holds every buffer by a Python reference until the event
  that frees it (no `record_stream`), so the order of frees, which the recorder
  counts, is the same. `torch.accelerator.current_stream()` (FSDP2's
  `finalize_backward` of a prefetched all-gather nobody waited for) gets the same
  stream.
- **the meta check**: FSDP2's `lazy_init` refuses parameters still on meta
  (`FSDPParamGroup._validate_no_meta_params`, "should be materialized"): a check for
  users who forgot `to_empty`; on the oracle meta is the device. It is skipped.
- **the default mesh**: a caller that passes no mesh (accelerate's
  `fsdp2_prepare_model` without a parallelism config) gets torch's default
  (`_init_default_mesh`: the accelerator's device type, here the CPU); it gets the
  meta mesh instead.
"""

from __future__ import annotations

import contextlib
import types
from typing import Iterator

import torch
import torch.distributed as dist

from patching import patched


class _Event:
    """A CUDA event's API; nothing to wait for on meta."""

    def __init__(self, *args, **kwargs) -> None:
        pass

    def record(self, stream=None) -> None:  # torch.cuda.Event.record returns None
        return None

    def wait(self, stream=None) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True


class _Stream:
    """A CUDA stream's API; ops on meta run in program order."""

    def __init__(self, *args, priority: int = 0, **kwargs) -> None:
        self.priority = priority

    def wait_stream(self, stream) -> None:
        pass

    def wait_event(self, event) -> None:
        pass

    def record_event(self, event=None) -> _Event:
        return event or _Event()

    def synchronize(self) -> None:
        pass


_DEFAULT_STREAM = _Stream()


def _meta_device_module() -> types.SimpleNamespace:
    return types.SimpleNamespace(
        Stream=_Stream, Event=_Event, current_stream=lambda device=None: _DEFAULT_STREAM,
        default_stream=lambda device=None: _DEFAULT_STREAM,
        stream=lambda stream: contextlib.nullcontext(), current_device=lambda: "meta",
        set_device=lambda device: None, device_count=lambda: 1, is_available=lambda: True,
        synchronize=lambda device=None: None)


def _fsdp1_init_on_meta(original_init):
    def init(self, module, *args, **kwargs):
        kwargs["device_id"] = torch.device("meta")
        kwargs["param_init_fn"] = lambda submodule: None
        original_init(self, module, *args, **kwargs)
    return init


@contextlib.contextmanager
def fake_process_group(world_size: int, rank: int = 0) -> Iterator[object]:
    """`rank` (0 unless given) of `world_size` on the fake backend; yields the 1-D meta DeviceMesh."""
    import torch.distributed.fsdp._fully_shard._fully_shard as fully_shard_module
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FullyShardedDataParallel
    from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if world_size < 1:
        raise ValueError(f"fake_process_group: world_size {world_size}: expected 1 or more")
    if not 0 <= rank < world_size:
        raise ValueError(f"fake_process_group: rank {rank}: expected 0 to world_size - 1 ({world_size - 1})")
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
    try:
        mesh = init_device_mesh("meta", (world_size,))
        with patched(torch, "meta", _meta_device_module()), \
                patched(torch.accelerator, "current_stream", lambda device=None: _DEFAULT_STREAM), \
                patched(FSDPParamGroup, "_validate_no_meta_params", lambda self: None), \
                patched(fully_shard_module, "_init_default_mesh", lambda *args, **kwargs: mesh), \
                patched(fully_shard_module, "_get_device_from_mesh", lambda mesh: torch.device("meta")), \
                patched(FullyShardedDataParallel, "__init__",
                         _fsdp1_init_on_meta(FullyShardedDataParallel.__init__)):
            yield mesh
    finally:
        dist.destroy_process_group()
