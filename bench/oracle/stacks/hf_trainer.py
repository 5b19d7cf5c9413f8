"""transformers' Trainer: one optimizer step as `_inner_training_loop` runs it.

What runs is the Trainer's own code: `get_batch_samples` (the loss normalizer),
`training_step` (compute_loss under accelerate's prepared forward, with its
autocast and fp32 output conversion, then `accelerator.backward`), the optimizer
Trainer.create_optimizer builds (through accelerate's AcceleratedOptimizer), and
`model.zero_grad()`. What the oracle replaces, and why:
- placement: the model is made on meta, so `TrainingArguments.place_model_on_device`
  is False and `_prepare_input` leaves meta tensors where they are;
- the accelerator is the CPU (`use_cpu`): the only one here. Its autocast is
  CUDA's policy on meta tensors (cuda_autocast.py).
The model and the batch are the spec's task's (stacks/hf_tasks.py: causal LM, BERT's
sequence classification, ViT's image classification); the step is the same.
With `sharding` (fsdp2, fsdp1) the Trainer runs under accelerate's FSDP plugin as
rank 0 of `world_size` on a fake process group (stacks/hf_trainer_fsdp.py, fake_pg.py).
"""

from __future__ import annotations

import tempfile

import torch

from cuda_shims import expert_routing_for
from fake_pg import fake_process_group
from meta_recorder import Recorder, optimizer_state_tensors
from stacks import hf_trainer_deepspeed, hf_trainer_fsdp
from stacks.hf_models import add_lora, build_model, transformers_at_least
from stacks.hf_tasks import task_of


def _trainer_classes():
    from transformers import Trainer, TrainingArguments

    class MetaArguments(TrainingArguments):
        @property
        def place_model_on_device(self) -> bool:
            return False

    class MetaTrainer(Trainer):
        def _prepare_input(self, data):
            if isinstance(data, torch.Tensor) and data.device.type == "meta":
                return data
            return super()._prepare_input(data)

    return MetaArguments, MetaTrainer


def _arguments(spec: dict, output_dir: str):
    arguments, _ = _trainer_classes()
    sharded = hf_trainer_fsdp.fsdp_arguments(spec) if spec.get("sharding") else {}
    if spec.get("zero_stage"):  # DeepSpeed ZeRO (stacks/hf_trainer_deepspeed.py)
        sharded = hf_trainer_deepspeed.deepspeed_arguments(spec)
    sharded.setdefault("use_cpu", True)
    # "fsdp": the FSDP plugin's checkpointing (fsdp_config), which the Trainer refuses
    # beside its own argument
    checkpointing = spec.get("checkpointing", "none") not in ("none", "fsdp")
    kwargs = {"use_reentrant": spec.get("checkpointing") == "reentrant"} if checkpointing else None
    # transformers 5 renamed gradient_checkpointing to activation_checkpointing
    prefix = "activation" if transformers_at_least("5.0") else "gradient"
    # `optim_args` ("momentum=0.9" for sgd) and accumulation only where the spec gives them
    extra = {"optim_args": spec["optim_args"]} if "optim_args" in spec else {}
    if spec.get("grad_accum", 1) > 1:
        extra["gradient_accumulation_steps"] = spec["grad_accum"]
    return arguments(**liger_arguments(spec), **extra,
        output_dir=output_dir, per_device_train_batch_size=spec["batch"], report_to=[],
        bf16=spec["precision"] in ("bf16", "bf16-amp"),
        fp16=spec["precision"] == "fp16-amp", optim=spec.get("optim", default_optim()),
        max_grad_norm=spec.get("max_grad_norm", 1.0), **sharded,
        **{f"{prefix}_checkpointing": checkpointing, f"{prefix}_checkpointing_kwargs": kwargs})


def liger_arguments(spec: dict) -> dict:
    """`liger`: true, or a liger_kernel_config object (the Trainer's use_liger_kernel)."""
    liger = spec.get("liger", False)
    if not liger:
        return {}
    return {"use_liger_kernel": True, "liger_kernel_config": liger if isinstance(liger, dict) else None}


def apply_liger(trainer) -> None:
    """As Trainer._inner_training_loop does before its loop (trainer.py 5.23: apply_liger_kernel
    of the model and liger_kernel_config, `_apply_liger_kernel_to_instance` under PEFT's wrapper)."""
    if getattr(trainer.args, "use_liger_kernel", False):
        from transformers.integrations.liger import apply_liger_kernel
        apply_liger_kernel(trainer.model, trainer.args.liger_kernel_config)


def default_optim() -> str:
    """TrainingArguments' default `optim` of the release (training_args.py)."""
    from transformers import TrainingArguments
    import dataclasses
    return next(f.default for f in dataclasses.fields(TrainingArguments) if f.name == "optim")


def run(spec: dict, recorder: Recorder) -> dict:
    """Builds the run and records `spec["steps"]` optimizer steps. Returns what the
    release chose where the spec left it open (the optimizer), for headroom's flags."""
    if spec.get("sharding"):
        return _run_sharded(spec, recorder)
    if spec.get("zero_stage"):
        return hf_trainer_deepspeed.run(spec, recorder, _trainer, record_steps)
    with tempfile.TemporaryDirectory() as output_dir:
        trainer = _trainer(spec, output_dir)
        trainer.create_optimizer()
        prepared, optimizer = trainer.accelerator.prepare(trainer.model, trainer.optimizer)
        record_steps(spec, recorder, trainer, prepared, optimizer)
        return _resolved(trainer)


def _run_sharded(spec: dict, recorder: Recorder) -> dict:
    """The Trainer's own _prepare_for_training under accelerate's FSDP plugin."""
    with fake_process_group(spec["world_size"]), hf_trainer_fsdp.accelerate_on_fake_group():
        with tempfile.TemporaryDirectory() as output_dir:
            trainer = _trainer(spec, output_dir)
            with hf_trainer_fsdp.distinct_addresses(trainer.model):
                prepared, _ = trainer._prepare_for_training(spec.get("steps", 2), None, None)
            hf_trainer_fsdp.upcast_flat_params(trainer.accelerator, prepared)
            record_steps(spec, recorder, trainer, prepared, trainer.optimizer)
            return _resolved(trainer)


def _trainer(spec: dict, output_dir: str):
    """The model (with PEFT's adapters) in the Trainer, checkpointing enabled, not moved."""
    model = build_model(spec)
    if spec["method"] in ("lora", "qlora"):
        model = add_lora(model, spec)
    _, trainer_class = _trainer_classes()
    trainer = trainer_class(model=model, args=_arguments(spec, output_dir))
    trainer.accelerator.device_placement = False
    enable_checkpointing(trainer)
    apply_liger(trainer)
    return trainer


def _resolved(trainer) -> dict:
    """What the release chose where the spec left it open, for headroom's flags."""
    return {"optim": str(getattr(trainer.args.optim, "value", trainer.args.optim))}


def enable_checkpointing(trainer) -> None:
    """As Trainer.train() does before its loop, in each release's names."""
    if transformers_at_least("5.0"):
        if trainer.args.activation_checkpointing:
            trainer.model.activation_checkpointing_enable(
                activation_checkpointing_kwargs=trainer.args.activation_checkpointing_kwargs)
    elif trainer.args.gradient_checkpointing:
        trainer.model.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs)


def _micro_step(trainer, model, batch):
    """One micro-batch as `_inner_training_loop` feeds it: from 4.46 the loss is
    normalised by the batch's token count (`get_batch_samples`), before by the mean."""
    if hasattr(trainer, "get_batch_samples"):
        samples, items = trainer.get_batch_samples(iter([batch]), 1, torch.device("meta"))
        trainer.current_gradient_accumulation_steps = len(samples)
        return trainer.training_step(model, samples[0], items)
    return trainer.training_step(model, batch)


def _clip_gradients(trainer, model) -> None:
    """Trainer._clip_grad_norm (5.x); inline in `_inner_training_loop` before."""
    if hasattr(trainer, "_clip_grad_norm"):
        trainer._clip_grad_norm(model)
    else:
        trainer.accelerator.clip_grad_norm_(model.parameters(), trainer.args.max_grad_norm)


def record_steps(spec, recorder, trainer, model, optimizer, batch_of=None, extra_params=()) -> None:
    """`steps` optimizer steps as the Trainer's loop runs them; `batch_of(spec)` makes each
    step's batch (the task's by default; TRL's collator for stacks/trl_sft.py); `extra_params`,
    what a wrapper keeps beside `model.parameters()` (DeepSpeed's partitions)."""
    batch_of = batch_of or task_of(spec).batch
    params = list(model.parameters()) + hf_trainer_fsdp.flat_parameters(model) + list(extra_params)
    recorder.adopt_model(params, model.buffers())
    for p in params:
        if p.requires_grad:
            p.register_post_accumulate_grad_hook(lambda q: recorder.mark("gradients", [q.grad]))
    recorder.begin("step0.start")
    for step in range(spec.get("steps", 2)):
        recorder.phase = f"step{step}.forward_backward"
        # `grad_accum` micro-batches per optimizer step, the gradients kept across them
        # (_inner_training_loop: the step after the last of `gradient_accumulation_steps`)
        for _ in range(spec.get("grad_accum", 1)):
            batch = batch_of(spec)
            recorder.adopt_batch(batch)
            # transformers 4.x's MoE loop asks nonzero of each expert's mask (cuda_shims.py)
            with expert_routing_for(trainer.model):
                loss = _micro_step(trainer, model, batch)
        # FSDP sets the sharded gradients in its post-backward hooks, past AccumulateGrad
        recorder.mark("gradients", [p.grad for p in params if p.requires_grad])
        recorder.phase = f"step{step}.optimizer"
        if trainer.args.max_grad_norm:
            _clip_gradients(trainer, model)
        optimizer.step()
        recorder.mark("optimizer_states", optimizer_state_tensors(optimizer))
        recorder.phase = f"step{step}.zero_grad"
        model.zero_grad()
        del loss, batch
        recorder.settle()
