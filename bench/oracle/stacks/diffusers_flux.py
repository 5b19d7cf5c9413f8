"""diffusers' Flux LoRA training step (examples/dreambooth/train_dreambooth_lora_flux.py).

The script is a `main()` with its step loop inline, not a library, so the loop is
mirrored here statement by statement from the script at diffusers 0.39.0 (unchanged
from 387a47156e, 2026-05-18, to the release but for `check_min_version`), and every
part that decides memory is diffusers', PEFT's, accelerate's or torch's own code:
- the model: `FluxTransformer2DModel.from_config` of the config folder, moved to the
  weight dtype (`transformer.to(dtype=weight_dtype)`), frozen (`requires_grad_(False)`),
  `enable_gradient_checkpointing()` (ModelMixin: non-reentrant torch checkpoint per block),
  `add_adapter(LoraConfig(...))` with the script's defaults (rank 4, alpha 4, dropout 0,
  gaussian init, its twelve target modules). The adapters stay in the base layer's
  dtype, bf16: diffusers' `add_adapter` calls PEFT's `inject_adapter_in_model`, which
  does not cast them (peft 0.21.2: only PeftModel, `get_peft_model`'s, calls
  `_cast_adapter_dtype`, peft_model.py), and the script's `cast_training_params` runs
  only under `--mixed_precision fp16`, as here;
- the optimizer: `torch.optim.AdamW` with the script's betas, weight decay, eps;
  `get_scheduler("constant")`; `accelerator.prepare(transformer, optimizer, scheduler)`
  (accelerate's autocast forward and fp32 output conversion under bf16);
- the step: `FluxPipeline._prepare_latent_image_ids`, `randn_like` noise,
  `compute_density_for_timestep_sampling`, the flow-matching interpolation,
  `FluxPipeline._pack_latents`, the guidance tensor, the prepared forward,
  `FluxPipeline._unpack_latents`, `compute_loss_weighting_for_sd3`, the loss
  (weighted MSE in fp32, mean per sample, mean), `accelerator.backward`,
  `accelerator.clip_grad_norm_`, `optimizer.step()`, `lr_scheduler.step()`,
  `optimizer.zero_grad()`, inside `accelerator.accumulate`.
What the oracle replaces, and why:
- the batch: what the step gets from the VAE and the text encoders is made at their
  shapes and dtypes (bf16 latents B x 16 x res/8 x res/8 after the script's shift and
  scale; T5 B x 512 x 4096, CLIP pooled B x 768, text ids 512 x 3): the embeddings
  precomputed, the latents as `--cache_latents` gives them; neither encoder is resident;
- `get_sigmas` (a closure in `main`) looks each timestep up with `.item()`: it runs on
  the scheduler's CPU tables, and the sigma is moved to the device (the script's copy of
  the 1000-entry sigma table on the GPU, 4 KB, is left out);
- placement: the model is built on meta (`device_placement=False`); the accelerator is
  the CPU (`cpu=True`), whose bf16 autocast runs CUDA's policy (cuda_autocast.py).
"""

from __future__ import annotations

import json
import os

import torch

from meta_recorder import Recorder, optimizer_state_tensors
from stacks.diffusers_flux_args import SCHEDULER, VAE, args_of

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "no": torch.float32}


def build_transformer(spec: dict, args: dict, weight_dtype, model_class: str = "FluxTransformer2DModel"):
    """The script's model setup, in its order (main(): from_pretrained .. add_adapter); the
    SD3 script (stacks/diffusers_sd3.py) sets up its SD3Transformer2DModel the same way."""
    import diffusers
    from diffusers.training_utils import cast_training_params
    from peft import LoraConfig

    with open(os.path.join(spec["model"], "config.json")) as f:
        config = {k: v for k, v in json.load(f).items() if not k.startswith("_")}
    with torch.device("meta"):
        transformer = getattr(diffusers, model_class).from_config(config)
    transformer.requires_grad_(False)
    transformer.to(dtype=weight_dtype)
    if args["checkpointing"] != "none":
        transformer.enable_gradient_checkpointing()
    transformer.add_adapter(LoraConfig(r=args["lora_rank"], lora_alpha=args["lora_alpha"],
                                       lora_dropout=args["lora_dropout"], init_lora_weights="gaussian",
                                       target_modules=args["lora_targets"]))
    if args["mixed_precision"] == "fp16":  # the script upcasts the adapters only under fp16
        cast_training_params([transformer], dtype=torch.float32)
    return transformer


def build_training(transformer, args: dict):
    """The optimizer, scheduler and accelerator as main() makes and prepares them."""
    from accelerate import Accelerator
    from accelerate.utils import DistributedDataParallelKwargs
    from diffusers.optimization import get_scheduler

    accelerator = Accelerator(mixed_precision=args["mixed_precision"], cpu=True, device_placement=False,
                              kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)])
    params = [p for p in transformer.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW([{"params": params, "lr": args["learning_rate"]}],
                                  betas=(args["adam_beta1"], args["adam_beta2"]),
                                  weight_decay=args["adam_weight_decay"], eps=args["adam_epsilon"])
    scheduler = get_scheduler("constant", optimizer=optimizer, num_warmup_steps=args["lr_warmup_steps"],
                              num_training_steps=1000, num_cycles=1, power=1.0)
    transformer, optimizer, scheduler = accelerator.prepare(transformer, optimizer, scheduler)
    return accelerator, transformer, optimizer, scheduler


def flux_batch(spec: dict, args: dict, config, weight_dtype) -> dict:
    """What the step reads from the VAE and the text encoders, at their shapes and dtypes
    (T5's width is the transformer's joint_attention_dim, CLIP's its pooled_projection_dim)."""
    b, side = spec["batch"], spec["resolution"] // 2 ** (VAE["block_out_channels"] - 1)
    meta = {"device": "meta", "dtype": weight_dtype}
    return {"latents": torch.empty(b, config.in_channels // 4, side, side, **meta),
            "prompt_embeds": torch.empty(b, args["max_sequence_length"], config.joint_attention_dim, **meta),
            "pooled_prompt_embeds": torch.empty(b, config.pooled_projection_dim, **meta),
            "text_ids": torch.empty(args["max_sequence_length"], 3, **meta)}


def run(spec: dict, recorder: Recorder) -> dict:
    from diffusers import FlowMatchEulerDiscreteScheduler

    return run_script(spec, recorder, args_of(spec), "FluxTransformer2DModel",
                      lambda: FlowMatchEulerDiscreteScheduler(**SCHEDULER), flux_batch, _forward_backward)


def run_script(spec: dict, recorder: Recorder, args: dict, model_class: str, make_scheduler, make_batch,
               forward_backward, resident=()) -> dict:
    """A diffusers LoRA script's frame, shared by Flux, SD3 and SDXL: the model set up as the
    script does, accelerate's preparation, its noise scheduler, the recorded steps, and what trained.
    `resident`: frozen modules the script keeps on the GPU beside the model (SDXL's VAE and text
    encoders), their weights counted as parameters."""
    weight_dtype = _DTYPES[args["mixed_precision"]]
    model = build_transformer(spec, args, weight_dtype, model_class)
    accelerator, model, optimizer, scheduler = build_training(model, args)
    noise_scheduler = make_scheduler()
    _record_steps(spec, args, recorder, (accelerator, model, optimizer, scheduler), noise_scheduler,
                  make_batch=make_batch, forward_backward=forward_backward, resident=resident)
    adapters = {str(p.dtype).replace("torch.", "") for p in model.parameters() if p.requires_grad}
    return {"optim": "adamw_torch", "adapter_dtype": ",".join(sorted(adapters)),
            "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad)}


def _record_steps(spec, args, recorder, training, noise_scheduler, make_batch, forward_backward,
                  resident=()) -> None:
    """`steps` steps of the script's loop (stacks/diffusers_sd3.py runs it too): the
    batch from `make_batch`, the loop body up to backward from `forward_backward`."""
    accelerator, transformer, optimizer, scheduler = training
    params = list(transformer.parameters())
    recorder.adopt_model(params + [p for m in resident for p in m.parameters()],
                         [*transformer.buffers(), *(b for m in resident for b in m.buffers())])
    for p in params:
        if p.requires_grad:
            p.register_post_accumulate_grad_hook(lambda q: recorder.mark("gradients", [q.grad]))
    recorder.begin("step0.start")
    transformer.train()
    for step in range(spec.get("steps", 2)):
        config = accelerator.unwrap_model(transformer).config
        batch = make_batch(spec, args, config, _DTYPES[args["mixed_precision"]])
        recorder.adopt_batch(batch)
        recorder.phase = f"step{step}.forward_backward"
        with accelerator.accumulate([transformer]):
            # the loop body's locals (model_pred, target, noise, ...) live until the next step
            # reassigns them: held through the optimizer step here, dropped before the next
            kept = forward_backward(args, accelerator, transformer, noise_scheduler, batch)
            recorder.phase = f"step{step}.optimizer"
            if accelerator.sync_gradients:
                accelerator.clip_grad_norm_(transformer.parameters(), args["max_grad_norm"])
            optimizer.step()
            recorder.mark("optimizer_states", optimizer_state_tensors(optimizer.optimizer))
            scheduler.step()
            recorder.phase = f"step{step}.zero_grad"
            optimizer.zero_grad()
        del kept, batch
        recorder.settle()


def _sigmas(noise_scheduler, timesteps, n_dim: int, dtype):
    """The script's get_sigmas, on the scheduler's CPU tables (module docstring)."""
    sigmas = noise_scheduler.sigmas.to(dtype=dtype)
    step_indices = [(noise_scheduler.timesteps == t).nonzero().item() for t in timesteps]
    sigma = sigmas[step_indices].flatten()
    while len(sigma.shape) < n_dim:
        sigma = sigma.unsqueeze(-1)
    return sigma


def _forward_backward(args, accelerator, transformer, noise_scheduler, batch):
    """The body of the script's step loop from the latents to accelerator.backward."""
    from diffusers import FluxPipeline
    from diffusers.training_utils import compute_density_for_timestep_sampling, compute_loss_weighting_for_sd3

    weight_dtype = _DTYPES[args["mixed_precision"]]
    model_input = (batch["latents"] - VAE["shift_factor"]) * VAE["scaling_factor"]
    model_input = model_input.to(dtype=weight_dtype)
    vae_scale_factor = 2 ** (VAE["block_out_channels"] - 1)
    latent_image_ids = FluxPipeline._prepare_latent_image_ids(
        model_input.shape[0], model_input.shape[2] // 2, model_input.shape[3] // 2, model_input.device,
        weight_dtype)
    noise = torch.randn_like(model_input)
    bsz = model_input.shape[0]
    u = compute_density_for_timestep_sampling(weighting_scheme=args["weighting_scheme"], batch_size=bsz,
                                              logit_mean=0.0, logit_std=1.0, mode_scale=1.29)
    indices = (u * noise_scheduler.config.num_train_timesteps).long()
    cpu_timesteps = noise_scheduler.timesteps[indices]
    timesteps = cpu_timesteps.to(device=model_input.device)
    sigmas = _sigmas(noise_scheduler, cpu_timesteps, model_input.ndim, model_input.dtype).to(model_input.device)
    noisy_model_input = (1.0 - sigmas) * model_input + sigmas * noise
    packed = FluxPipeline._pack_latents(noisy_model_input, batch_size=model_input.shape[0],
                                        num_channels_latents=model_input.shape[1],
                                        height=model_input.shape[2], width=model_input.shape[3])
    guidance = None
    if accelerator.unwrap_model(transformer).config.guidance_embeds:
        guidance = torch.tensor([args["guidance_scale"]], device=model_input.device).expand(bsz)
    model_pred = transformer(hidden_states=packed, timestep=timesteps / 1000, guidance=guidance,
                             pooled_projections=batch["pooled_prompt_embeds"],
                             encoder_hidden_states=batch["prompt_embeds"], txt_ids=batch["text_ids"],
                             img_ids=latent_image_ids, return_dict=False)[0]
    model_pred = FluxPipeline._unpack_latents(model_pred, height=model_input.shape[2] * vae_scale_factor,
                                              width=model_input.shape[3] * vae_scale_factor,
                                              vae_scale_factor=vae_scale_factor)
    weighting = compute_loss_weighting_for_sd3(weighting_scheme=args["weighting_scheme"], sigmas=sigmas)
    target = noise - model_input
    loss = torch.mean((weighting.float() * (model_pred.float() - target.float()) ** 2).reshape(target.shape[0], -1),
                      1)
    loss = loss.mean()
    accelerator.backward(loss)
    return locals()
