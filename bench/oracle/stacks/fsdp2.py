"""torch's FSDP2 (`fully_shard`) in a plain training loop, rank 0 of `world_size`.

As torchtitan's `apply_fsdp` and torchtune's `shard_model` do: activation
checkpointing first (torch's `checkpoint_wrapper`, non-reentrant, on each decoder
layer), then `fully_shard` on each decoder layer and on the whole model (the root:
embeddings, final norm, output projection), with one MixedPrecisionPolicy. The loop
is torchtitan's: forward with the labels (transformers' loss), backward,
`clip_grad_norm_`, `optimizer.step()`, `optimizer.zero_grad()`.

Spec keys beyond the shared ones: `world_size` (2-8), `reshard_after_forward`
(true: ZeRO-3's layout; false: each layer stays unsharded from its forward to its
backward), `precision` `bf16` (16-bit weights, no MixedPrecisionPolicy: gather and
reduce in bf16) or `bf16-mixed` (fp32 weights, MixedPrecisionPolicy(param_dtype=bf16,
reduce_dtype=fp32)), `optim` (`adamw_torch_fused`: torch.optim.AdamW(fused=True), as
torchtitan defaults; `adamw_torch`: foreach). What the process group and device
need is in fake_pg.py; the model and LoRA are hf_models.py's.
"""

from __future__ import annotations

import torch

from fake_pg import fake_process_group
from meta_recorder import Recorder, optimizer_state_tensors
from stacks.hf_models import add_lora, build_model
from stacks.hf_tasks import causal_lm_batch

PRECISIONS = ("bf16", "bf16-mixed")


def decoder_layers(model) -> list:
    """The transformer blocks, by the classes transformers names as never split
    (`_no_split_modules`), which is what accelerate's transformer wrap policy and
    torchtune's `shard_model` shard one by one."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    names = set(getattr(base, "_no_split_modules", None) or ())
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        raise ValueError(f"fsdp2: {type(base).__name__} names no decoder layer class (_no_split_modules)")
    return layers


def mixed_precision(precision: str):
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if precision == "bf16-mixed":
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    if precision == "bf16":
        return MixedPrecisionPolicy()
    raise ValueError(f"fsdp2: precision '{precision}': expected one of {', '.join(PRECISIONS)}")


def _checkpoint_layers(model, layers: list) -> list:
    """torch's checkpoint_wrapper (non-reentrant) around each layer, in its parent,
    as torchtitan's apply_ac (mode full) and torchtune's set_activation_checkpointing do."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    wrapped = []
    for parent in list(model.modules()):
        for name, child in parent.named_children():
            if any(child is layer for layer in layers):
                wrapper = checkpoint_wrapper(child)
                setattr(parent, name, wrapper)
                wrapped.append(wrapper)
    return wrapped


def shard(model, spec: dict, mesh) -> None:
    from torch.distributed.fsdp import fully_shard

    layers = decoder_layers(model)
    if spec.get("checkpointing", "none") != "none":
        layers = _checkpoint_layers(model, layers)
    kwargs = {"mesh": mesh, "mp_policy": mixed_precision(spec["precision"]),
              "reshard_after_forward": spec.get("reshard_after_forward", True)}
    for layer in layers:
        fully_shard(layer, **kwargs)
    fully_shard(model, **kwargs)


def optimizer_of(model, spec: dict):
    trainable = [p for p in model.parameters() if p.requires_grad]
    optim = spec.get("optim", "adamw_torch_fused")
    if optim not in ("adamw_torch_fused", "adamw_torch"):
        raise ValueError(f"fsdp2: optim '{optim}': expected adamw_torch_fused or adamw_torch")
    return torch.optim.AdamW(trainable, lr=1e-5, fused=optim == "adamw_torch_fused" or None)


def run(spec: dict, recorder: Recorder) -> dict:
    if spec.get("checkpointing", "none") not in ("none", "non-reentrant"):
        raise ValueError("fsdp2: checkpointing: expected none or non-reentrant (checkpoint_wrapper)")
    with fake_process_group(spec["world_size"]) as mesh:
        model = build_model(spec)
        if spec["method"] == "lora":
            model = add_lora(model, spec)
        elif spec["method"] != "full":
            raise ValueError(f"fsdp2: method '{spec['method']}': expected full or lora")
        model.train()
        model.config.use_cache = False  # training: no KV cache (as the Trainer sets it from args)
        shard(model, spec, mesh)
        optimizer = optimizer_of(model, spec)
        _record_steps(spec, recorder, model, optimizer)
    return {"optim": spec.get("optim", "adamw_torch_fused")}


def _record_steps(spec: dict, recorder: Recorder, model, optimizer) -> None:
    params = list(model.parameters())  # the sharded DTensors; the recorder counts their local shards
    recorder.adopt_model(params, model.buffers())
    trainable = [p for p in params if p.requires_grad]
    recorder.begin("step0.start")
    for step in range(spec.get("steps", 2)):
        batch = causal_lm_batch(spec)
        recorder.adopt_batch(batch)
        recorder.phase = f"step{step}.forward_backward"
        loss = model(**batch).loss
        loss.backward()
        # FSDP2 assigns each sharded gradient in its post-backward (foreach_reduce),
        # not through AccumulateGrad on the sharded parameter: marked once they exist.
        recorder.mark("gradients", [p.grad for p in trainable])
        recorder.phase = f"step{step}.optimizer"
        torch.nn.utils.clip_grad_norm_(trainable, spec.get("max_grad_norm", 1.0))
        optimizer.step()
        recorder.mark("optimizer_states", optimizer_state_tensors(optimizer))
        recorder.phase = f"step{step}.zero_grad"
        optimizer.zero_grad()
        del loss, batch
        recorder.settle()
