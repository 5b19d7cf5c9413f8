"""FSDP2's unsharded gradients labelled gradients, as autograd makes them.

Under `fully_shard` the parameter a module uses in forward and backward is
`FSDPParam._unsharded_param`, an `nn.Parameter` made once at the first all-gather
(`init_unsharded_param`) and set on the module by `to_unsharded` each time the group
is unsharded (`torch/distributed/fsdp/_fully_shard/_fsdp_param.py`, torch 2.11). It is
the leaf of the autograd graph, so `AccumulateGrad` sets *its* `.grad`, node by node
through the unit's backward; the group's `post_backward` takes those `.grad`s, clears
them and hands them to `foreach_reduce`, which copies them into the reduce-scatter
input and drops them (`_fsdp_param_group.py` `post_backward`, `_fsdp_collectives.py`
`foreach_reduce`). Only then is the sharded parameter's `.grad` set.

A stack's post-accumulate-grad hooks on the sharded parameters never see the unsharded
ones, so without this they stay transient. By docs/memory-model.md's rule ("Categories
at the peak": a gradient once it is a `.grad`) they are gradients, as headroom counts
them (`set_fsdp2_unit_grads`, planner/predict/step_builder.cc): a post-accumulate-grad
hook on each unsharded parameter that requires a gradient marks its `.grad`, hooked
once, at the first `to_unsharded` that finds it requiring one (`set_requires_grad_if_needed`
has just copied the sharded parameter's flag onto it).

FSDP1 needs nothing here: its leaf is the FlatParameter, which the stacks hook
(`stacks/hf_trainer_fsdp.py` `flat_parameters`).
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Iterator

from patching import patched


def _first_time(hooked: dict, param) -> bool:
    """Whether `param` is not hooked yet, and now counted as hooked (by identity: a
    tensor's `==` is elementwise, so no set of tensors will do)."""
    ref = hooked.get(id(param))
    if ref is not None and ref() is param:
        return False
    hooked[id(param)] = weakref.ref(param)
    return True


def _hooking(to_unsharded, recorder, hooked: dict):
    def to_unsharded_and_hook(self, *args, **kwargs):
        out = to_unsharded(self, *args, **kwargs)
        param = getattr(self, "_unsharded_param", None)
        if param is not None and param.requires_grad and _first_time(hooked, param):
            param.register_post_accumulate_grad_hook(lambda p: recorder.mark("gradients", [p.grad]))
        return out
    return to_unsharded_and_hook


@contextlib.contextmanager
def unsharded_grads_marked(recorder) -> Iterator[None]:
    """Every FSDP2 unsharded parameter's `.grad` marked `gradients` as AccumulateGrad sets
    it; nothing where torch has no FSDP2."""
    try:
        from torch.distributed.fsdp._fully_shard._fsdp_param import FSDPParam
    except ImportError:
        yield
        return
    hooked: dict = {}  # id of each unsharded parameter hooked so far: a weak reference to it
    with patched(FSDPParam, "to_unsharded", _hooking(FSDPParam.to_unsharded, recorder, hooked)):
        yield
