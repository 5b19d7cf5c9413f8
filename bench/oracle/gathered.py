"""FSDP's gathered (unsharded) parameters as their own category, whatever else holds them.

`fully_shard` all-gathers a parameter into `FSDPParam.all_gather_outputs` (one flat
`torch.empty` of the shard's numel times the world size, `init_all_gather_outputs`), and
`init_unsharded_param` makes the unsharded parameter a view of it
(`torch/distributed/fsdp/_fully_shard/_fsdp_param.py`, torch 2.11). A linear that reads
the view saves it for backward, so saved_tensors_hooks see it; it is still a copy of a
parameter, sized by the model and not by the batch, freed or kept by the reshard policy.
It counts as `gathered` (meta_recorder.CATEGORIES, ahead of saved activations), the
same bytes headroom calls gathered parameters (its ZeRO buffers); the comparison puts
both with the transients (compare.py `oracle_categories`; docs/memory-model.md,
"Categories at the peak").

FSDP1 all-gathers a unit's flat parameter into its padded unsharded flat parameter,
allocated by `FlatParamHandle._alloc_padded_unsharded_flat_param`
(`torch/distributed/fsdp/_flat_param.py`, torch 2.11), whose views are the module's
parameters while the unit is unsharded: the same category.

DeepSpeed ZeRO-3 gathers a submodule's parameters before it runs
(`PartitionedParameterCoordinator.fetch_sub_module`,
`deepspeed/runtime/zero/partitioned_param_coordinator.py`, 0.19.8): each `param.data`
is then a view of the all-gather's flat buffer (`partition_parameters.py`
`all_gather_coalesced`), marked on its return.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

from patching import patched


def _marking(method, recorder, tensors_of_param):
    def method_and_mark(self, *args, **kwargs):
        out = method(self, *args, **kwargs)
        recorder.mark("gathered", tensors_of_param(self))
        return out
    return method_and_mark


def _all_gather_outputs(fsdp_param) -> list:
    return list(getattr(fsdp_param, "all_gather_outputs", None) or [])


def _unsharded(fsdp_param) -> list:
    param = getattr(fsdp_param, "_unsharded_param", None)
    inner = list(getattr(fsdp_param, "_unsharded_inner_tensors", None) or [])
    return ([param] if param is not None else []) + inner + _all_gather_outputs(fsdp_param)


def _fsdp1_unsharded(method, recorder):
    def allocate_and_mark(self, *args, **kwargs):
        out = method(self, *args, **kwargs)
        recorder.mark("gathered", [out])
        return out
    return allocate_and_mark


def _deepspeed_fetch(method, recorder):
    def fetch_and_mark(self, current_submodule, *args, **kwargs):
        out = method(self, current_submodule, *args, **kwargs)
        recorder.mark("gathered", [p.data for p in current_submodule.parameters(recurse=False)])
        return out
    return fetch_and_mark


def _deepspeed_marked(stack: contextlib.ExitStack, recorder) -> None:
    """ZeRO-3's fetch marked, where the environment has DeepSpeed."""
    try:
        from deepspeed.runtime.zero.partitioned_param_coordinator import PartitionedParameterCoordinator
    except ImportError:
        return
    stack.enter_context(patched(PartitionedParameterCoordinator, "fetch_sub_module",
                                _deepspeed_fetch(PartitionedParameterCoordinator.fetch_sub_module, recorder)))


@contextlib.contextmanager
def gathered_marked(recorder) -> Iterator[None]:
    """FSDP2's all-gather outputs and unsharded parameters, and FSDP1's padded unsharded
    flat parameters, marked `gathered` as they are made; nothing where torch has no FSDP."""
    try:
        from torch.distributed.fsdp._flat_param import FlatParamHandle
        from torch.distributed.fsdp._fully_shard._fsdp_param import FSDPParam
    except ImportError:
        yield
        return
    with patched(FSDPParam, "init_all_gather_outputs",
                 _marking(FSDPParam.init_all_gather_outputs, recorder, _all_gather_outputs)), \
            patched(FSDPParam, "init_unsharded_param",
                    _marking(FSDPParam.init_unsharded_param, recorder, _unsharded)), \
            patched(FlatParamHandle, "_alloc_padded_unsharded_flat_param",
                    _fsdp1_unsharded(FlatParamHandle._alloc_padded_unsharded_flat_param, recorder)), \
            contextlib.ExitStack() as stack:
        _deepspeed_marked(stack, recorder)
        yield
