"""litgpt's single-device fine-tuning step (`finetune/full.py`, `finetune/lora.py`, 0.5.13).

litgpt's own code, as its `main` and `fit` call it: Lightning Fabric with the run's
precision plugin (`bf16-true`: HalfPrecision; `bf16-mixed`: MixedPrecision, torch.autocast),
`GPT(config)` under `fabric.init_module()`, `mark_only_lora_as_trainable`,
`fabric.setup_module` (the `_FabricModule` whose forward converts the inputs, enters the
precision's context and converts the outputs to the default dtype, fp32),
`instantiate_torch_optimizer("AdamW", model.parameters())` with `fabric.setup_optimizers`,
the finetune module's own `get_lr_scheduler`, the model's forward (LoRA: `lm_head_chunk_size=128`),
`chunked_cross_entropy`, `fabric.no_backward_sync`, `fabric.backward`, the optimizer's
`step` and `zero_grad`, `scheduler.step()`.

The mirror (`_fit`): the statements of `fit`'s `while` loop, in their order and with their
variables, because `fit` itself cannot run on meta: it reads values every iteration
(`batch["token_counts"]["raw"].sum().item()`, `running_loss.compute().item()` for its log
line) and needs a data module, a tokenizer and `validate` over a validation set. Left out:
those reads, `running_loss.update(loss.detach())` (a scalar), the throughput monitor, and the
evaluation every `eval.interval` steps (100 or 600: after the steps recorded here). Kept:
`logits` lives from one iteration to the next (rebound by the next forward), `loss` until the
log line rebinds it to a float (`log_interval` 1, the finetune defaults).

What the oracle replaces (besides cuda_shims.py / cuda_autocast.py):
- placement: `fabric.setup_module(..., move_to_device=False)`: the model is made on meta;
- Fabric's refusal of an optimizer over meta parameters (`_has_meta_device_parameters_or_buffers`
  in `fabric.py` `_validate_setup_optimizers`): on the oracle meta is the device;
- the accelerator is the CPU (Fabric's `accelerator="cpu"`), so bf16-mixed enters
  `torch.autocast("cpu")`, which the oracle gives CUDA's policy (cuda_autocast.py).
Checkpointing `block` wraps each Block as litgpt's multi-GPU paths do (lora.py `parallelize_fn`:
`checkpoint_wrapper(el, preserve_rng_state=False)`; full.py: FSDPStrategy
`activation_checkpointing_policy={Block}`); litgpt's single-device finetune never checkpoints.
QLoRA (`method` qlora, lora.py `--quantize bnb.nf4`): stacks/litgpt_qlora.py.
"""

from __future__ import annotations

import contextlib

import torch

from meta_recorder import Recorder, optimizer_state_tensors
from patching import patched
from stacks.litgpt_model import build_model
from stacks.litgpt_qlora import QUANTIZE, bnb_on_meta, optimizer_and_embedding, precision_plugin

# headroom's --precision -> Fabric's precision plugin (lightning/fabric/plugins/precision)
_FABRIC_PRECISION = {"bf16": "bf16-true", "bf16-amp": "bf16-mixed"}
LM_HEAD_CHUNK_SIZE = 128  # finetune/lora.py fit: `model(input_ids, lm_head_chunk_size=128)`
WARMUP_STEPS = 100  # finetune/lora.py and full.py setup: TrainArgs(lr_warmup_steps=100)


def run(spec: dict, recorder: Recorder) -> dict:
    import lightning.fabric.fabric as fabric_module

    qlora = spec["method"] == "qlora"
    with bnb_on_meta() if qlora else contextlib.nullcontext(), \
            patched(fabric_module, "_has_meta_device_parameters_or_buffers", lambda *a, **k: False):
        fabric = _fabric(spec)
        model, optimizer, scheduler = _setup(spec, fabric)
    _fit(spec, recorder, fabric, model, optimizer, scheduler)
    return {"fabric_precision": "bnb." + QUANTIZE[4:] if qlora else _FABRIC_PRECISION[spec["precision"]],
            "optimizer": type(optimizer.optimizer).__name__}


def _fabric(spec: dict):
    """lora.py / full.py setup: `L.Fabric(devices=1, precision=..., plugins=...)`; QLoRA
    takes bf16-true's dtype into BitsandbytesPrecision (mixed precision is refused there)."""
    import lightning as L

    if spec["precision"] not in _FABRIC_PRECISION or (spec["method"] == "qlora" and spec["precision"] != "bf16"):
        raise ValueError(f"litgpt: precision '{spec['precision']}': expected bf16 or bf16-amp (QLoRA: bf16)")
    if spec["method"] == "qlora":
        return L.Fabric(accelerator="cpu", devices=1, plugins=precision_plugin())
    return L.Fabric(accelerator="cpu", devices=1, precision=_FABRIC_PRECISION[spec["precision"]])


def _setup(spec: dict, fabric):
    """`main` of finetune/lora.py (full.py alike) up to `fit`, less the checkpoint load."""
    from litgpt.utils import instantiate_torch_optimizer

    if spec["method"] in ("lora", "qlora"):
        from litgpt.finetune.lora import get_lr_scheduler
    else:
        from litgpt.finetune.full import get_lr_scheduler
    model = build_model(spec, fabric)
    if spec.get("checkpointing", "none") == "block":
        _checkpoint_blocks(model)
    model = fabric.setup_module(model, move_to_device=False)
    if spec["method"] == "qlora":
        optimizer = fabric.setup_optimizers(optimizer_and_embedding(model))
    else:
        optimizer = fabric.setup_optimizers(instantiate_torch_optimizer("AdamW", model.parameters()))
    scheduler = get_lr_scheduler(optimizer, warmup_steps=WARMUP_STEPS, max_steps=1000)
    # fit: `model.max_seq_length = min(longest_seq_length, ...)` rebuilds the RoPE cache
    # (model.py max_seq_length setter) at the longest sample: every sample here is `seq` long
    model.max_seq_length = spec["seq"]
    return model, optimizer, scheduler


def _checkpoint_blocks(model) -> None:
    """finetune/lora.py `parallelize_fn`'s wrapping (its FSDP2 sharding left out)."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    model.transformer.h = torch.nn.ModuleList(
        [checkpoint_wrapper(el, preserve_rng_state=False) for el in model.transformer.h])


def accumulation_iters(spec: dict) -> int:
    """TrainArgs.gradient_accumulation_iters: global_batch_size // micro_batch_size."""
    from litgpt.args import TrainArgs

    micro = spec["batch"]
    train = TrainArgs(global_batch_size=micro * spec.get("grad_accum", 1), micro_batch_size=micro)
    return train.gradient_accumulation_iters(devices=1)


def _batch(spec: dict) -> dict:
    """What litgpt's SFT collate gives for full-length samples: input_ids and labels."""
    ids = torch.empty(spec["batch"], spec["seq"], dtype=torch.long, device="meta")
    return {"input_ids": ids, "labels": ids.clone()}


def _fit(spec, recorder: Recorder, fabric, model, optimizer, scheduler) -> None:
    """fit's `while` loop for `steps` optimizer steps (module docstring: what is left out)."""
    from litgpt.utils import chunked_cross_entropy

    lora = spec["method"] in ("lora", "qlora")
    params = list(model.parameters())
    # QLoRA: the optimizer still holds the embedding lora.py swapped out (litgpt_qlora.py)
    known = {id(p) for p in params}
    params += [p for group in optimizer.param_groups for p in group["params"] if id(p) not in known]
    recorder.adopt_model(params, model.buffers())
    for p in params:
        if p.requires_grad:
            p.register_post_accumulate_grad_hook(lambda q: recorder.mark("gradients", [q.grad]))
    recorder.begin("step0.start")
    accumulation = accumulation_iters(spec)
    logits = loss = None  # noqa: F841 - their lifetimes are fit's
    for iter_num in range(1, spec.get("steps", 2) * accumulation + 1):
        step = (iter_num - 1) // accumulation
        batch = _batch(spec)
        recorder.adopt_batch(batch)
        input_ids, targets = batch["input_ids"], batch["labels"]
        is_accumulating = iter_num % accumulation != 0
        recorder.phase = f"step{step}.forward_backward"
        # inline, as in fit: the previous logits die when the new forward's are bound
        with fabric.no_backward_sync(model, enabled=is_accumulating):
            if lora:  # lora.py
                logits = model(input_ids, lm_head_chunk_size=LM_HEAD_CHUNK_SIZE)
                # shift the targets such that output n predicts token n+1
                logits[-1] = logits[-1][..., :-1, :]
                loss = chunked_cross_entropy(logits, targets[..., 1:])
            else:  # full.py
                logits = model(input_ids)
                loss = chunked_cross_entropy(logits[..., :-1, :], targets[..., 1:])
            fabric.backward(loss / accumulation)
        recorder.mark("gradients", [p.grad for p in params if p.requires_grad])
        if not is_accumulating:
            recorder.phase = f"step{step}.optimizer"
            optimizer.step()
            recorder.mark("optimizer_states", optimizer_state_tensors(optimizer.optimizer))
            recorder.phase = f"step{step}.zero_grad"
            optimizer.zero_grad()
            scheduler.step()
        loss = None  # the log line: `loss = running_loss.compute().item()`
    del logits, batch, input_ids, targets
    recorder.settle()
