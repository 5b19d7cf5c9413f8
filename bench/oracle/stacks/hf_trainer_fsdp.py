"""The Trainer sharded by accelerate's FSDP plugin, rank 0 of `world_size` (spec key
`sharding`: `fsdp2` or `fsdp1`).

What runs is the Trainer's own `_prepare_for_training` (FSDP2: the optimizer made
first, then `accelerator.prepare(model, optimizer)`; FSDP1: the model wrapped first)
and accelerate's `fsdp2_prepare_model` / FSDP1 wrapping: its wrap policy (the
classes `_no_split_modules` names), its groups, its upcast of trainable parameters
to fp32 under mixed precision, its MixedPrecisionPolicy, its activation
checkpointing (`fsdp_config["activation_checkpointing"]`). What the oracle changes,
besides fake_pg.py's process group and device:

- **accelerate's device and backend**: accelerate turns FSDP on only for GPU-like
  distributed types (`AcceleratorState.__init__`: MULTI_GPU ... not MULTI_CPU), and
  its device would be a GPU. `PartialState._prepare_backend` answers ("fake",
  MULTI_GPU), and `ACCELERATE_TORCH_DEVICE=cpu` keeps the device the CPU, so that
  autocast is entered for "cpu" as in the unsharded Trainer runs (cuda_autocast.py
  gives it CUDA's policy), while FSDP itself runs on the meta mesh.
- **addresses**: accelerate maps each parameter to its sharded successor through
  `data_ptr()` (`Accelerator._prepare_fsdp2`, `fsdp2_switch_optimizer_parameters`);
  a meta tensor's `data_ptr()` is 0 for every parameter, so each is given a distinct
  one for the duration of `prepare`.
- **FSDP1's upcast**: under mixed precision accelerate upcasts each trainable
  FlatParameter to fp32 (`Accelerator.prepare_model`), except on meta, where it
  expects a deferred initialisation to follow (`param.device != torch.device("meta")`).
  On the GPU the parameter is on the GPU; `upcast_flat_params` runs the same statements
  after `prepare`, before FSDP's lazy init, as they run there.
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator

import torch

from patching import patched

SHARDINGS = {"fsdp2": 2, "fsdp1": 1}


def fsdp_arguments(spec: dict) -> dict:
    """TrainingArguments' `fsdp` and `fsdp_config` as a user sets them for the run."""
    sharding = spec["sharding"]
    if sharding not in SHARDINGS:
        raise ValueError(f"hf-trainer: sharding '{sharding}': expected one of {', '.join(SHARDINGS)}")
    # checkpointing "fsdp": the plugin's own (accelerate's checkpoint_wrapper, non-reentrant,
    # on the wrapped layers); "reentrant"/"non-reentrant" stay the Trainer's argument,
    # as PEFT's FSDP QLoRA recipe runs it (--gradient_checkpointing --use_reentrant True)
    config = {"version": SHARDINGS[sharding],
              "activation_checkpointing": spec.get("checkpointing", "none") == "fsdp"}
    if sharding == "fsdp2":
        config["reshard_after_forward"] = spec.get("reshard_after_forward", True)
    else:
        config["reshard_after_forward"] = "FULL_SHARD" if spec.get("reshard_after_forward", True) \
            else "SHARD_GRAD_OP"
        config["use_orig_params"] = spec.get("use_orig_params", True)
        # broadcasts rank 0's weights once at wrapping, before the step; its plugin
        # looks for a GPU to materialize them on (FullyShardedDataParallelPlugin)
        config["sync_module_states"] = False
    return {"fsdp": True, "fsdp_config": config}


@contextlib.contextmanager
def _environ(**values: str) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _reset_accelerate() -> None:
    from accelerate.state import AcceleratorState, GradientState, PartialState

    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    PartialState._reset_state()


@contextlib.contextmanager
def accelerate_on_fake_group() -> Iterator[None]:
    """accelerate's state as FSDP on the fake process group (module docstring)."""
    from accelerate.state import PartialState
    from accelerate.utils import DistributedType

    _reset_accelerate()
    backend = lambda self, *args, **kwargs: ("fake", DistributedType.MULTI_GPU)  # noqa: E731
    try:
        with patched(PartialState, "_prepare_backend", backend), \
                _environ(ACCELERATE_TORCH_DEVICE="cpu", LOCAL_RANK="0", RANK="0"):
            yield
    finally:
        _reset_accelerate()


@contextlib.contextmanager
def distinct_addresses(model) -> Iterator[None]:
    """A distinct `data_ptr()` per meta parameter while accelerate maps them (docstring)."""
    params = [p for p in model.parameters() if p.device.type == "meta"]
    for address, p in enumerate(params, start=1):
        p.data_ptr = (lambda address=address: address)
    try:
        yield
    finally:
        for p in params:
            p.__dict__.pop("data_ptr", None)


def upcast_flat_params(accelerator, model) -> None:
    """accelerate's FSDP1 upcast of trainable FlatParameters under mixed precision,
    without its meta exception (module docstring)."""
    if accelerator.mixed_precision == "no" or accelerator.state.fsdp_plugin.fsdp_version != 1:
        return
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    for module in FSDP.fsdp_modules(model):
        if not module._has_params:
            continue
        param = module._flat_param
        if param.dtype != torch.float32 and param.requires_grad:
            param.data = param.data.to(torch.float32)
            module._handle._orig_param_dtype = torch.float32


def flat_parameters(model) -> list:
    """FSDP1's FlatParameters that `model.parameters()` does not list (use_orig_params
    lists the original parameters, views into them): what the optimizer's shards are."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    listed = {id(p) for p in model.parameters()}
    return [m._flat_param for m in FSDP.fsdp_modules(model)
            if m._has_params and id(m._flat_param) not in listed]
